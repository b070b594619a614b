//! A probe's slot array without BPF: `ncpu * slots_per_cpu` slots in a
//! memfd, written the way a probe writes its mmapable array (every field
//! first, the commit word `seq + 1` last), so that a real
//! [`SlotRing`](super::slots::SlotRing) maps and drains it. What the slot
//! ring's tests and the synthetic feed of the pipeline bench
//! (`crate::synthetic`) write their records into.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd};
use std::sync::atomic::{fence, Ordering};

/// A writable slot array in a memfd; map it for reading with
/// `SlotRing::new(slots.fd(), …)`.
#[derive(Debug)]
pub struct MemfdSlots {
    file: File,
    base: *mut u8,
    map_len: usize,
    /// Bytes between slots: the record size rounded up to 8, as a BPF
    /// array lays out its values and as `SlotRing` reads them.
    stride: usize,
    commit_offset: usize,
    ncpu: usize,
    slots_per_cpu: u64,
}

// SAFETY: the mapping belongs to this value alone: no other handle to it
// exists in Rust, and writes go through `&mut self`, so moving it to
// another thread moves the only writer.
unsafe impl Send for MemfdSlots {}

impl MemfdSlots {
    /// Slots of `slot_size` bytes whose u32 commit word lies at
    /// `commit_offset`, `slots_per_cpu` (a power of two, as the agent's
    /// `--ring-slots`) for each of `ncpu` CPUs, all zero (uncommitted).
    pub fn new(
        ncpu: usize,
        slots_per_cpu: u32,
        slot_size: usize,
        commit_offset: usize,
    ) -> std::io::Result<Self> {
        let invalid = |what| std::io::Error::new(std::io::ErrorKind::InvalidInput, what);
        if ncpu == 0 || !slots_per_cpu.is_power_of_two() {
            return Err(invalid("want one CPU or more and a power of two of slots"));
        }
        if commit_offset % 4 != 0 || commit_offset + 4 > slot_size {
            return Err(invalid(
                "the commit word must be an aligned u32 inside the slot",
            ));
        }
        let stride = slot_size.div_ceil(8) * 8;
        let bytes = stride * slots_per_cpu as usize * ncpu;
        // SAFETY: the name is a valid C string; memfd_create returns a new
        // fd or -1.
        let fd = unsafe { libc::memfd_create(c"nettrace-slots".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is the fresh memfd just created, owned by nobody else.
        let file = unsafe { File::from_raw_fd(fd) };
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let map_len = bytes.div_ceil(page) * page;
        file.set_len(map_len as u64)?;
        // SAFETY: a shared read-write mapping of the whole memfd, which is
        // map_len bytes long; unmapped in Drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(MemfdSlots {
            file,
            base: p.cast(),
            map_len,
            stride,
            commit_offset,
            ncpu,
            slots_per_cpu: u64::from(slots_per_cpu),
        })
    }

    /// The memfd, for `SlotRing::new`.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// The slot that record `seq` of `cpu` takes (the probe's
    /// `counter % slots_per_cpu`).
    fn slot(&self, cpu: usize, seq: u64) -> *mut u8 {
        assert!(cpu < self.ncpu, "CPU {cpu} of {}", self.ncpu);
        let idx = cpu as u64 * self.slots_per_cpu + (seq & (self.slots_per_cpu - 1));
        // SAFETY: idx < ncpu * slots_per_cpu, so the slot lies inside the
        // mapping.
        unsafe { self.base.add(idx as usize * self.stride) }
    }

    /// Write `record` (at most a slot, its commit word included) into the
    /// slot of record `seq` of `cpu`, all but its commit word: the slot
    /// keeps the commit of whatever it held before, so a reader does not
    /// take it yet.
    pub fn write(&mut self, cpu: usize, seq: u64, record: &[u8]) {
        assert!(record.len() <= self.stride, "record larger than a slot");
        let slot = self.slot(cpu, seq);
        let c = self.commit_offset;
        let (head, tail) = record.split_at(c.min(record.len()));
        let tail = tail.get(4..).unwrap_or(&[]);
        // SAFETY: both ranges lie inside the slot (record.len() <= stride),
        // and the mapping is not borrowed as a Rust reference anywhere.
        unsafe {
            std::ptr::copy_nonoverlapping(head.as_ptr(), slot, head.len());
            std::ptr::copy_nonoverlapping(tail.as_ptr(), slot.add(c + 4), tail.len());
        }
    }

    /// Publish the slot of record `seq` of `cpu`: its commit word becomes
    /// `seq + 1` (low 32 bits), after everything written before it.
    pub fn commit(&mut self, cpu: usize, seq: u64) {
        let slot = self.slot(cpu, seq);
        fence(Ordering::Release);
        // SAFETY: the commit word lies inside the slot and is 4-byte
        // aligned (checked in new(); slots are 8-byte aligned in a
        // page-aligned mapping).
        unsafe {
            std::ptr::write_volatile(
                slot.add(self.commit_offset).cast::<u32>(),
                (seq as u32).wrapping_add(1),
            )
        };
    }
}

impl Drop for MemfdSlots {
    fn drop(&mut self) {
        // SAFETY: base/map_len are the mapping made in new().
        unsafe { libc::munmap(self.base.cast(), self.map_len) };
    }
}
