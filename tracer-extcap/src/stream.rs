//! The capture itself: connect to the sink's live port, pass the
//! handshake (tracer_auth::live), check that a pcapng stream follows, and
//! copy it to Wireshark's fifo until one side stops.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use tracer_auth::live::{
    ClientHello, HandshakeError, ServerHello, Verdict, CLIENT_HELLO_LEN, NONCE_LEN,
    SERVER_HELLO_LEN, VERDICT_LEN,
};
use tracer_auth::SharedKey;

/// A pcapng Section Header Block's type, the first 4 bytes of the stream.
const SHB_TYPE: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

/// Why a capture stopped with an error. Every message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// No connection.
    #[error(
        "cannot connect to the sink's live port {addr}: is the sink running with \
         --live-listen {addr}, and does a firewall let TCP through?"
    )]
    Connect {
        /// Where.
        addr: SocketAddr,
        /// The OS error.
        source: io::Error,
    },
    /// The sink closed the connection before the handshake ended.
    #[error(
        "the sink at {addr} closed the connection during the handshake: is it a nettrace \
         sink's --live-listen port, of the same version as this program?"
    )]
    HandshakeClosed {
        /// Where.
        addr: SocketAddr,
    },
    /// The sink said nothing for the whole timeout.
    #[error(
        "the sink at {addr} did not answer the handshake within {} s: is it a nettrace \
         sink's --live-listen port, or is the sink too busy (raise --connect-timeout)?",
        timeout.as_secs()
    )]
    HandshakeSilent {
        /// Where.
        addr: SocketAddr,
        /// How long it waited for each step.
        timeout: Duration,
    },
    /// The connection broke during the handshake.
    #[error(
        "the sink at {addr} did not complete the handshake: {source} (is it a nettrace \
         sink's --live-listen port?)"
    )]
    Handshake {
        /// Where.
        addr: SocketAddr,
        /// The OS error.
        source: io::Error,
    },
    /// The handshake was refused or did not check.
    #[error(transparent)]
    Refused(#[from] HandshakeError),
    /// Something other than pcapng followed the handshake.
    #[error("the sink's stream does not start with a pcapng section header (got {0:02x?}): upgrade the sink or this program so that both speak the same version")]
    NotPcapng([u8; 4]),
    /// The sink closed the stream.
    #[error(
        "the sink closed the live stream after {bytes} bytes: it exited, or cut this \
         client loose because it read too slowly (the sink counts those in its stats)"
    )]
    Closed {
        /// Bytes copied before.
        bytes: u64,
    },
    /// Reading from the sink failed.
    #[error("reading the live stream failed after {bytes} bytes")]
    Read {
        /// Bytes copied before.
        bytes: u64,
        /// The OS error.
        source: io::Error,
    },
    /// Writing to Wireshark failed for another reason than it stopping.
    #[error("writing to the capture fifo failed")]
    Write(#[source] io::Error),
    /// No random bytes for the nonce.
    #[error("no random bytes from the kernel for the handshake nonce")]
    Random(#[source] io::Error),
}

/// A connected, accepted live stream, positioned at its first pcapng byte.
pub struct LiveStream {
    tcp: TcpStream,
    /// Bytes already read past the handshake (the stream's start).
    head: [u8; 4],
}

impl LiveStream {
    /// Connect to `addr` and pass the handshake, with `key` when given;
    /// `timeout` bounds the connection and each handshake step.
    pub fn open(
        addr: SocketAddr,
        key: Option<&SharedKey>,
        timeout: Duration,
    ) -> Result<Self, CaptureError> {
        let mut tcp = TcpStream::connect_timeout(&addr, timeout)
            .map_err(|source| CaptureError::Connect { addr, source })?;
        let hs = |source: io::Error| match source.kind() {
            io::ErrorKind::UnexpectedEof => CaptureError::HandshakeClosed { addr },
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                CaptureError::HandshakeSilent { addr, timeout }
            }
            _ => CaptureError::Handshake { addr, source },
        };
        tcp.set_read_timeout(Some(timeout)).map_err(hs)?;
        tcp.set_write_timeout(Some(timeout)).map_err(hs)?;
        let mut hello = [0u8; SERVER_HELLO_LEN];
        tcp.read_exact(&mut hello).map_err(hs)?;
        let server = ServerHello::decode(&hello)?;
        if key.is_some() && !server.key_required {
            tracing::warn!(
                "the sink does not ask for a key: its stream is open to anyone who can connect"
            );
        }
        let reply = ClientHello::answer(&server, nonce().map_err(CaptureError::Random)?, key)?;
        let bytes: [u8; CLIENT_HELLO_LEN] = reply.encode();
        tcp.write_all(&bytes).map_err(hs)?;
        let mut verdict = [0u8; VERDICT_LEN];
        tcp.read_exact(&mut verdict).map_err(hs)?;
        Verdict::check(&verdict, &server, &reply, key)?;
        let mut head = [0u8; 4];
        tcp.read_exact(&mut head).map_err(hs)?;
        if head != SHB_TYPE {
            return Err(CaptureError::NotPcapng(head));
        }
        // From here on the sink sends only when it has events.
        tcp.set_read_timeout(None).map_err(hs)?;
        Ok(LiveStream { tcp, head })
    }

    /// Copy the stream into `out` until the sink closes it (an error: a
    /// live capture has no natural end) or `out` is closed by its reader
    /// (Wireshark stopping the capture: Ok, with the bytes copied).
    pub fn pump(mut self, out: &mut impl Write) -> Result<u64, CaptureError> {
        let mut copied = 0u64;
        match out.write_all(&self.head) {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(0),
            r => r.map_err(CaptureError::Write)?,
        }
        copied += self.head.len() as u64;
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let n = match self.tcp.read(&mut buf) {
                Ok(0) => return Err(CaptureError::Closed { bytes: copied }),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(CaptureError::Read {
                        bytes: copied,
                        source,
                    })
                }
            };
            // Flushed at once: Wireshark shows what it has been given.
            match out.write_all(&buf[..n]).and_then(|()| out.flush()) {
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(copied),
                r => r.map_err(CaptureError::Write)?,
            }
            copied += n as u64;
        }
    }
}

fn nonce() -> io::Result<[u8; NONCE_LEN]> {
    let mut b = [0u8; NONCE_LEN];
    // SAFETY: getrandom writes at most `b.len()` bytes into the buffer we own.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        return Err(io::Error::last_os_error());
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use tracer_auth::live::Status;

    /// A one-connection stand-in for the sink's live port: the real
    /// handshake, then `stream`, then it closes.
    fn serve(key: Option<SharedKey>, stream: Vec<u8>) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let hello = ServerHello {
                key_required: key.is_some(),
                nonce: [3; NONCE_LEN],
            };
            s.write_all(&hello.encode()).unwrap();
            let mut c = [0u8; CLIENT_HELLO_LEN];
            if s.read_exact(&mut c).is_err() {
                return;
            }
            let v = Verdict::decide(&hello, &ClientHello::decode(&c), key.as_ref(), Status::Ok);
            s.write_all(&v.encode()).unwrap();
            if v.status == Status::Ok {
                let _ = s.write_all(&stream);
            }
        });
        addr
    }

    fn key(b: u8) -> SharedKey {
        SharedKey::from_bytes(&[b; 32]).unwrap()
    }

    const T: Duration = Duration::from_secs(5);

    #[test]
    fn copies_the_stream_and_reports_the_close() {
        let mut body = SHB_TYPE.to_vec();
        body.extend((0..100_000u32).map(|i| i as u8));
        let addr = serve(Some(key(1)), body.clone());
        let mut out = Vec::new();
        let s = LiveStream::open(addr, Some(&key(1)), T).unwrap();
        match s.pump(&mut out) {
            Err(CaptureError::Closed { bytes }) => assert_eq!(bytes, body.len() as u64),
            other => panic!("expected the close to be reported, got {other:?}"),
        }
        assert_eq!(out, body);
    }

    #[test]
    fn a_wrong_key_is_refused_with_a_reason() {
        let addr = serve(Some(key(1)), SHB_TYPE.to_vec());
        let e = LiveStream::open(addr, Some(&key(2)), T).err().unwrap();
        assert!(e.to_string().contains("--key-file"), "{e}");
        let addr = serve(Some(key(1)), SHB_TYPE.to_vec());
        let e = LiveStream::open(addr, None, T).err().unwrap();
        assert!(
            matches!(e, CaptureError::Refused(HandshakeError::KeyRequired)),
            "{e}"
        );
    }

    #[test]
    fn something_else_than_pcapng_is_named() {
        let addr = serve(None, b"HTTP/1.1 400".to_vec());
        let e = LiveStream::open(addr, None, T).err().unwrap();
        assert!(matches!(e, CaptureError::NotPcapng(_)), "{e}");
    }

    #[test]
    fn a_closed_reader_ends_the_capture_cleanly() {
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let addr = serve(None, SHB_TYPE.repeat(10));
        let s = LiveStream::open(addr, None, T).unwrap();
        assert_eq!(s.pump(&mut Closed).unwrap(), 0);
    }

    #[test]
    fn no_listener_says_what_to_check() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let e = LiveStream::open(addr, None, T).err().unwrap();
        assert!(e.to_string().contains("--live-listen"), "{e}");
    }
}
