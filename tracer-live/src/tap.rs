//! The TAP device: `/dev/net/tun` opened non-blocking, `TUNSETIFF` with
//! `IFF_TAP | IFF_NO_PI`, never persistent (the kernel removes the
//! interface when the last descriptor closes, so also when the process is
//! killed with SIGKILL), IPv6 off (no neighbour discovery frames of the
//! host's own among the events) and the link up. Every syscall of the
//! crate is in this file.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

use crate::error::LiveError;

/// Longest interface name (IFNAMSIZ less the NUL).
pub const MAX_NAME_LEN: usize = 15;

/// An open TAP interface; closing it (drop) removes the interface.
#[derive(Debug)]
pub struct Tap {
    fd: OwnedFd,
    name: String,
    took_over: bool,
}

/// Check an interface name as the kernel would (`dev_valid_name`).
pub fn check_name(name: &str) -> Result<(), LiveError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name != "."
        && name != ".."
        && !name
            .bytes()
            .any(|b| b == b'/' || b == b':' || b == 0 || b.is_ascii_whitespace());
    if ok {
        Ok(())
    } else {
        Err(LiveError::BadName {
            name: name.to_owned(),
        })
    }
}

/// An `ifreq` naming `name` (checked: at most 15 bytes), flags 0.
fn ifreq(name: &str) -> libc::ifreq {
    // SAFETY: ifreq is plain old data; all zeroes is a valid value.
    let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in r.ifr_name.iter_mut().zip(name.bytes().take(MAX_NAME_LEN)) {
        *d = s as libc::c_char;
    }
    r
}

/// Does an interface of this name exist in this thread's network
/// namespace? (Not through /sys/class/net, which shows the namespace
/// sysfs was mounted in.)
pub fn exists(name: &str) -> bool {
    let Ok(c) = std::ffi::CString::new(name) else {
        return false;
    };
    // SAFETY: if_nametoindex reads a NUL-terminated string that outlives the call.
    unsafe { libc::if_nametoindex(c.as_ptr()) != 0 }
}

impl Tap {
    /// Create the TAP interface `name` (needs CAP_NET_ADMIN) and bring it
    /// up. A stale persistent TAP of that name that no process holds (left
    /// by `ip tuntap add` or a program that made it persistent) is taken
    /// over and made non-persistent; one that a process holds is an
    /// [`LiveError::InUse`] error.
    pub fn create(name: &str) -> Result<Tap, LiveError> {
        check_name(name)?;
        let existed = exists(name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")
            .map_err(|source| match source.kind() {
                io::ErrorKind::PermissionDenied => LiveError::NeedsNetAdmin {
                    name: name.to_owned(),
                    source,
                },
                _ => LiveError::NoTun { source },
            })?;
        let fd = OwnedFd::from(file);
        let mut req = ifreq(name);
        req.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short;
        // SAFETY: TUNSETIFF reads and writes one ifreq, which outlives the call.
        let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req) };
        if rc < 0 {
            let source = io::Error::last_os_error();
            let name = name.to_owned();
            return Err(match source.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => LiveError::NeedsNetAdmin { name, source },
                Some(libc::EBUSY) => LiveError::InUse { name, source },
                Some(libc::EINVAL) if existed => LiveError::NotTap { name, source },
                _ => LiveError::Io {
                    name,
                    what: "TUNSETIFF (create the TAP device)",
                    source,
                },
            });
        }
        let tap = Tap {
            fd,
            name: name.to_owned(),
            took_over: existed,
        };
        // Not persistent, also if it was: the interface goes with the
        // descriptor, whatever ends the process.
        // SAFETY: TUNSETPERSIST takes its argument by value.
        let rc =
            unsafe { libc::ioctl(tap.fd.as_raw_fd(), libc::TUNSETPERSIST, 0 as libc::c_ulong) };
        if rc < 0 {
            return Err(tap.io("TUNSETPERSIST 0 (make the interface go with the process)"));
        }
        tap.disable_ipv6();
        tap.set_up()?;
        Ok(tap)
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True when a stale interface of this name was taken over.
    pub fn took_over(&self) -> bool {
        self.took_over
    }

    /// Write one Ethernet frame; the kernel receives it on the interface.
    /// Never blocks: a frame the kernel cannot take fails with
    /// `WouldBlock` or `ENOBUFS` (see [`is_no_room`]).
    pub fn write_frame(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: writes frame.len() bytes from a live slice to our descriptor.
        let n = unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast::<libc::c_void>(),
                frame.len(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn io(&self, what: &'static str) -> LiveError {
        let source = io::Error::last_os_error();
        let name = self.name.clone();
        match source.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => LiveError::NeedsNetAdmin { name, source },
            _ => LiveError::Io { name, what, source },
        }
    }

    /// No IPv6 on the interface: the host would otherwise send router and
    /// neighbour solicitations and MLD reports out of it, which a capture
    /// of the interface would show among the events. A host without IPv6
    /// has nothing to turn off.
    fn disable_ipv6(&self) {
        let path = format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", self.name);
        match std::fs::write(&path, b"1") {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(iface = %self.name, error = %e,
                "cannot turn IPv6 off on the live interface; captures of it may show the host's \
                 IPv6 neighbour discovery beside the events"),
        }
    }

    /// Link up, no ARP.
    fn set_up(&self) -> Result<(), LiveError> {
        // SAFETY: socket() has no memory preconditions.
        let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if s < 0 {
            return Err(self.io("socket for interface flags"));
        }
        // SAFETY: s is a descriptor we just opened and own from here on.
        let sock = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(s) };
        let mut req = ifreq(&self.name);
        // SAFETY: SIOCGIFFLAGS fills the ifreq, which outlives the call.
        if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
            return Err(self.io("SIOCGIFFLAGS (read the interface flags)"));
        }
        // SAFETY: the kernel wrote the flags member of the union.
        let flags = unsafe { req.ifr_ifru.ifru_flags };
        req.ifr_ifru.ifru_flags = flags | (libc::IFF_UP | libc::IFF_NOARP) as libc::c_short;
        // SAFETY: SIOCSIFFLAGS reads the ifreq, which outlives the call.
        if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
            return Err(self.io("SIOCSIFFLAGS (bring the interface up)"));
        }
        Ok(())
    }
}

/// True for the errors of a frame the kernel had no room for (dropped and
/// counted, never waited for).
pub fn is_no_room(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOBUFS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_kernel_would_refuse_are_refused() {
        for bad in ["", ".", "..", "a/b", "a:b", "a b", "sixteen-chars-xx"] {
            assert!(
                matches!(check_name(bad), Err(LiveError::BadName { .. })),
                "{bad:?}"
            );
        }
        for good in ["nettrace0", "x", "fifteen-chars-x"] {
            assert!(check_name(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn ifreq_holds_the_name_nul_terminated() {
        let r = ifreq("nettrace0");
        let bytes: Vec<u8> = r.ifr_name.iter().map(|&c| c as u8).collect();
        assert_eq!(&bytes[..10], b"nettrace0\0");
    }
}
