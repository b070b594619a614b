//! Writing a trace file's buffer out, and the streaming write-behind that
//! sends the written bytes to the disk and out of the page cache soon after.

use std::fs::File;
use std::io::Write;

use crate::error::SinkError;

/// Written bytes left in the page cache behind the newest write: older
/// ones are written back and dropped (see [`write_behind`]).
pub const WRITE_BEHIND_LAG: u64 = 8 << 20;

/// A failed write: the file was cut back to its last complete block (or
/// removed, when that left it without any event).
#[derive(Debug)]
pub(crate) struct WriteFailure {
    /// Events that were in the lost part.
    pub lost_events: u64,
    /// Events of the failed write that did reach the file (the whole
    /// blocks that fitted before the error).
    pub written_events: u64,
    /// `written_events` per agent index (what each agent is told was
    /// delivered; the rest of its events in the write are lost).
    pub written_by_agent: Vec<(u32, u64)>,
    /// Bytes the file keeps on disk (0 when it was removed).
    pub file_bytes: u64,
    /// Their uncompressed pcapng bytes.
    pub file_raw_bytes: u64,
    /// The file held no event and was removed, so that retries on a full
    /// disk do not leave a header-only file each.
    pub removed: bool,
    /// What went wrong.
    pub error: SinkError,
}

/// Write `buf` whole to `file`: the bytes the kernel took, and the error
/// that stopped it, if any.
pub(super) fn write_out(file: &mut File, buf: &[u8]) -> (usize, Option<std::io::Error>) {
    let mut done = 0;
    while done < buf.len() {
        match file.write(&buf[done..]) {
            Ok(0) => return (done, Some(std::io::ErrorKind::WriteZero.into())),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return (done, Some(e)),
        }
    }
    (done, None)
}

/// Streaming write-behind: start writeback of the bytes just written
/// (from `start`), and once more than [`WRITE_BEHIND_LAG`] bytes are
/// in the page cache, wait for the oldest to reach the disk and drop
/// them from the cache. A trace file is written once and not read back
/// by the sink, so keeping it cached only pushes other data out; and
/// page-cache pages that are recycled at once are much cheaper to
/// write into than fresh ones (on this VM a buffered write of fresh
/// pages costs about 7x the CPU time). Failures here are harmless (the
/// data is in the page cache; `close` fsyncs) and ignored.
pub(super) fn write_behind(file: &File, start: u64, end: u64, dropped: &mut u64) {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: plain syscalls on the open fd owned by `file`; no
    // memory is passed.
    unsafe {
        libc::sync_file_range(
            fd,
            start as libc::off64_t,
            (end - start) as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
    if end.saturating_sub(*dropped) <= WRITE_BEHIND_LAG {
        return;
    }
    // Page-aligned, so the next range starts on a whole page.
    let upto = (end - WRITE_BEHIND_LAG) & !4095;
    if upto <= *dropped {
        return;
    }
    let (off, len) = (
        *dropped as libc::off64_t,
        (upto - *dropped) as libc::off64_t,
    );
    // SAFETY: as above.
    unsafe {
        libc::sync_file_range(
            fd,
            off,
            len,
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER,
        );
        libc::posix_fadvise(fd, off, len, libc::POSIX_FADV_DONTNEED);
    }
    *dropped = upto;
}
