//! An attacker on the lab network: UDP datagrams with a forged source
//! address and port, sent as fast as one thread can from a raw socket
//! (IP_HDRINCL), so the test needs no socket of the spoofed endpoint.

use std::net::SocketAddrV4;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// A raw IPv4 socket that sends datagrams "from" `src` to `dst`.
pub struct Spoofer {
    fd: OwnedFd,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    packet: Vec<u8>,
}

impl Spoofer {
    /// Open the raw socket (needs CAP_NET_RAW) in the calling thread's
    /// network namespace.
    pub fn new(src: SocketAddrV4, dst: SocketAddrV4) -> std::io::Result<Self> {
        // SAFETY: plain socket(2); the fd is owned below.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Spoofer {
            fd,
            src,
            dst,
            packet: Vec::with_capacity(1500),
        })
    }

    /// Send one datagram carrying `payload`; false when the kernel refused
    /// it (a full queue: the caller floods on).
    pub fn send(&mut self, payload: &[u8]) -> bool {
        let udp_len = 8 + payload.len();
        let total = 20 + udp_len;
        self.packet.clear();
        // IPv4 header: the kernel fills the checksum and, with id 0, an id.
        self.packet.extend_from_slice(&[0x45, 0]);
        self.packet.extend_from_slice(&(total as u16).to_be_bytes());
        self.packet
            .extend_from_slice(&[0, 0, 0x40, 0, 64, libc::IPPROTO_UDP as u8, 0, 0]);
        self.packet.extend_from_slice(&self.src.ip().octets());
        self.packet.extend_from_slice(&self.dst.ip().octets());
        // UDP header, checksum 0 (none, allowed over IPv4).
        self.packet
            .extend_from_slice(&self.src.port().to_be_bytes());
        self.packet
            .extend_from_slice(&self.dst.port().to_be_bytes());
        self.packet
            .extend_from_slice(&(udp_len as u16).to_be_bytes());
        self.packet.extend_from_slice(&[0, 0]);
        self.packet.extend_from_slice(payload);
        let to = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from(*self.dst.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: the buffer and address outlive the call; sizes are theirs.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                self.packet.as_ptr().cast(),
                self.packet.len(),
                0,
                (&to as *const libc::sockaddr_in).cast(),
                size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        n == self.packet.len() as isize
    }

    /// Send for `how_long`, as fast as the kernel takes them, the payload
    /// `make(i)` as datagram `i`; returns how many were sent.
    pub fn flood(&mut self, how_long: Duration, mut make: impl FnMut(u64) -> Vec<u8>) -> u64 {
        let end = Instant::now() + how_long;
        let mut sent = 0;
        let mut i = 0u64;
        while Instant::now() < end {
            for _ in 0..64 {
                let p = make(i);
                i += 1;
                sent += u64::from(self.send(&p));
            }
        }
        sent
    }
}
