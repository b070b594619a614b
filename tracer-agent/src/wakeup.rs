//! Waiting for the ring buffer without spinning.
//!
//! libbpf's own poll is level-triggered: while any record is queued it
//! returns at once, so a consumer under steady load loops continuously and
//! burns a core (and bounces the ring's cache lines against the producer).
//! The probe submits records without wakeups and forces one only when the
//! ring fills past a threshold; an edge-triggered epoll on the map fd
//! returns exactly on those forced wakeups, else after the timeout.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// An edge-triggered epoll instance watching one ring-buffer map.
#[derive(Debug)]
pub struct Wakeup {
    epoll: OwnedFd,
}

impl Wakeup {
    /// Watch `map` (a BPF ring-buffer map fd).
    pub fn new(map: BorrowedFd<'_>) -> std::io::Result<Self> {
        // SAFETY: plain syscall; the result is checked before use.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh epoll fd we own.
        let epoll = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLET) as u32,
            u64: 0,
        };
        // SAFETY: both fds are valid; ev is a valid epoll_event.
        let rc = unsafe {
            libc::epoll_ctl(
                epoll.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                map.as_raw_fd(),
                &mut ev,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Wakeup { epoll })
    }

    /// Sleep until the probe forces a wakeup or `timeout` passes. Returns
    /// true on a wakeup. EINTR (a signal) returns false.
    pub fn wait(&self, timeout: Duration) -> bool {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: epoll fd is valid; ev has room for the one event asked for.
        let n = unsafe { libc::epoll_wait(self.epoll.as_raw_fd(), &mut ev, 1, ms) };
        n > 0
    }
}
