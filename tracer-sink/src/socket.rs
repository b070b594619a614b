//! Binding the UDP socket with a large receive buffer.

use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::UdpSocket;

use crate::error::SinkError;

/// Default socket receive buffer (32 MiB): about 0.2 s of datagrams at the
/// 1 M events/s design rate, so a writer hiccup does not drop datagrams.
pub const DEFAULT_RCVBUF: usize = 32 << 20;

/// Bind a UDP socket on `addr` with a receive buffer of `rcvbuf` bytes.
///
/// Uses `SO_RCVBUFFORCE` (root or CAP_NET_ADMIN may exceed
/// `net.core.rmem_max`) and falls back to `SO_RCVBUF` (capped by
/// `rmem_max`). Returns the socket and the buffer size the kernel reports
/// (it doubles the request for its bookkeeping). Must be called inside a
/// tokio runtime.
pub fn bind_udp(addr: SocketAddr, rcvbuf: usize) -> Result<(UdpSocket, usize), SinkError> {
    let io = |what: &str, e| SinkError::Io {
        what: format!("{what} ({addr})"),
        source: e,
    };
    let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
        .map_err(|e| io("cannot create UDP socket", e))?;
    if rcvbuf > 0 && !set_rcvbuf_force(&sock, rcvbuf) {
        if let Err(e) = sock.set_recv_buffer_size(rcvbuf) {
            tracing::warn!(error = %e, rcvbuf, "cannot set the socket receive buffer");
        }
    }
    sock.bind(&addr.into())
        .map_err(|e| SinkError::Bind { addr, source: e })?;
    sock.set_nonblocking(true)
        .map_err(|e| io("cannot make the socket non-blocking", e))?;
    // An agent's UDP GSO batch then reaches us whole, one message for up
    // to 64 datagrams, instead of being cut into datagrams on the way in
    // (on veth and loopback inside the sender's send call).
    if let Err(e) = set_int(&sock, libc::SOL_UDP, libc::UDP_GRO, 1) {
        tracing::info!(error = %e, "no UDP GRO on this kernel: every datagram is read on its own");
    }
    let actual = sock.recv_buffer_size().unwrap_or(0);
    if rcvbuf > 0 && actual < rcvbuf {
        tracing::warn!(
            requested = rcvbuf,
            actual,
            "socket receive buffer smaller than asked: run as root or raise net.core.rmem_max"
        );
    }
    let std_sock: std::net::UdpSocket = sock.into();
    let sock = UdpSocket::from_std(std_sock)
        .map_err(|e| io("cannot register the socket with tokio", e))?;
    Ok((sock, actual))
}

/// `SO_RCVBUFFORCE`; false when the kernel refuses (no CAP_NET_ADMIN).
fn set_rcvbuf_force(sock: &Socket, bytes: usize) -> bool {
    let val = bytes.min(libc::c_int::MAX as usize) as libc::c_int;
    set_int(sock, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, val).is_ok()
}

/// An int socket option.
fn set_int(
    sock: &Socket,
    level: libc::c_int,
    name: libc::c_int,
    val: libc::c_int,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from `&val`, a live
    // local; the fd is owned by `sock` and open for the whole call.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&val as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
