//! The UDP path to the sink: a connected socket (datagrams out, the
//! sink's acknowledgements back) and the datagram size that fits the
//! route's MTU.

use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};

/// IPv4 + UDP header bytes.
const V4_OVERHEAD: usize = 28;
/// IPv6 + UDP header bytes.
const V6_OVERHEAD: usize = 48;

/// Where finished datagrams go. A trait so the batching logic is testable
/// without a network.
pub trait Transport {
    /// Send one datagram.
    fn send(&mut self, datagram: &[u8]) -> std::io::Result<()>;

    /// Read one datagram the sink sent back (an acknowledgement) without
    /// waiting: `Ok(None)` when there is none.
    fn recv(&mut self, _buf: &mut [u8]) -> std::io::Result<Option<usize>> {
        Ok(None)
    }
}

/// A connected UDP socket to the sink.
#[derive(Debug)]
pub struct UdpTransport {
    sock: Socket,
    max_payload: usize,
}

impl UdpTransport {
    /// Connect to `sink`; `max_payload` overrides the MTU-derived size.
    pub fn connect(sink: SocketAddr, max_payload: Option<usize>) -> std::io::Result<Self> {
        let sock = Socket::new(Domain::for_address(sink), Type::DGRAM, Some(Protocol::UDP))?;
        sock.set_send_buffer_size(4 << 20)?;
        sock.connect(&sink.into())?;
        let overhead = if sink.is_ipv4() {
            V4_OVERHEAD
        } else {
            V6_OVERHEAD
        };
        let mtu = path_mtu(&sock, sink.is_ipv4()).unwrap_or(1500);
        let max_payload = max_payload
            .unwrap_or(mtu.saturating_sub(overhead))
            .clamp(256, tracer_codec::MAX_DATAGRAM_LEN);
        Ok(UdpTransport { sock, max_payload })
    }

    /// Largest datagram payload to build.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }
}

impl Transport for UdpTransport {
    fn send(&mut self, datagram: &[u8]) -> std::io::Result<()> {
        self.sock.send(datagram).map(|_| ())
    }

    fn recv(&mut self, buf: &mut [u8]) -> std::io::Result<Option<usize>> {
        use std::mem::MaybeUninit;
        // SAFETY: `buf` is valid for writes of its length, and recv only
        // writes initialised bytes into it; MaybeUninit<u8> has u8's layout.
        let uninit: &mut [MaybeUninit<u8>] =
            unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast(), buf.len()) };
        // The socket is connected: only the sink's address can answer.
        match self.sock.recv_with_flags(uninit, libc::MSG_DONTWAIT) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Route MTU of a connected socket (IP_MTU / IPV6_MTU).
fn path_mtu(sock: &Socket, v4: bool) -> Option<usize> {
    use std::os::fd::AsRawFd;
    let (level, opt) = if v4 {
        (libc::IPPROTO_IP, libc::IP_MTU)
    } else {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU)
    };
    let mut mtu: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: fd is a valid socket; mtu and len are valid out-parameters of the right size.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            level,
            opt,
            (&mut mtu as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (rc == 0 && mtu > 0).then_some(mtu as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_mtu_gives_large_payload_and_override_wins() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let t = UdpTransport::connect(rx.local_addr().unwrap(), None).unwrap();
        // lo has a 64 KiB MTU.
        assert!(t.max_payload() > 1472, "{}", t.max_payload());
        let mut t = UdpTransport::connect(rx.local_addr().unwrap(), Some(1000)).unwrap();
        assert_eq!(t.max_payload(), 1000);
        t.send(b"hello").unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(rx.recv(&mut buf).unwrap(), 5);
    }
}
