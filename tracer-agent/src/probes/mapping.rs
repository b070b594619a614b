//! A read-only view of an mmapable BPF array (or of a memfd standing in
//! for one in tests): the slot ring and the per-CPU heads are read from
//! memory, not through a system call per read.

use std::os::fd::{AsRawFd, BorrowedFd};

/// `len` bytes of `fd` mapped shared and read-only from offset 0 (the
/// length rounded up to whole pages, as the kernel maps them); unmapped on
/// drop.
#[derive(Debug)]
pub struct ReadMapping {
    base: *const u8,
    len: usize,
}

impl ReadMapping {
    /// Map the first `bytes` bytes of `fd`.
    pub fn new(fd: BorrowedFd<'_>, bytes: usize) -> std::io::Result<Self> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let len = bytes.max(1).div_ceil(page) * page;
        // SAFETY: a read-only shared mapping of an fd at offset 0; the
        // kernel refuses one larger than the map (or file) behind it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(ReadMapping {
            base: p as *const u8,
            len,
        })
    }

    /// The first byte of the mapping: the `bytes` given to `new` (rounded
    /// up to pages) are readable from it.
    pub fn base(&self) -> *const u8 {
        self.base
    }

    /// The u64 at byte `offset`, read as a producer on another CPU may be
    /// writing it: whole (an aligned 8-byte load is atomic on the targets
    /// BPF arrays are mmapable on) and not cached by the compiler.
    pub fn u64_at(&self, offset: usize) -> u64 {
        assert!(
            offset % 8 == 0 && offset + 8 <= self.len,
            "u64 outside the mapping"
        );
        // SAFETY: aligned and inside the mapping (asserted above); the
        // producer writes it concurrently, hence a volatile read.
        unsafe { std::ptr::read_volatile(self.base.add(offset).cast::<u64>()) }
    }
}

impl Drop for ReadMapping {
    fn drop(&mut self) {
        // SAFETY: base/len are the mapping made in new().
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}
