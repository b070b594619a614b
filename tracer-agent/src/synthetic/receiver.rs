//! The bench's stand-in for a sink: a thread that reads the datagrams on a
//! loopback UDP socket with `UDP_GRO` on, as tracer-sink's socket does (an
//! agent's UDP GSO batch then arrives as one message instead of being cut
//! into datagrams inside the agent's send call), and counts them: events
//! from each header, or every datagram decoded with `verify`.
//!
//! It polls without ever sleeping (one core busy): a sleeping receiver
//! would be woken from inside the agent's send calls, a cost the agent
//! does not pay towards a sink on another host (on this 2-core VM it
//! added about 140 ns per event to `mmsg` and 190 ns to `off`, each
//! datagram a wake-up, and made `gso` twice as variable).

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;
use tracer_codec::{Datagram, DatagramHeaderRef, Event};

/// Receive buffer: the largest UDP payload (a whole GSO batch).
const RECV_BUF: usize = 65_536;
/// Socket receive buffer asked for: a ring-full of events in flight.
const RCVBUF: usize = 16 << 20;

/// What the receiver counted.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct Received {
    /// Messages read (one per GSO batch with UDP GRO).
    pub messages: u64,
    /// Datagrams in them.
    pub datagrams: u64,
    /// Events in them (from the headers; decoded with `verify`).
    pub events: u64,
    /// With `verify`: RX events decoded.
    pub rx_events: u64,
    /// With `verify`: TX events decoded.
    pub tx_events: u64,
    /// Datagrams that did not parse (their events are not counted).
    pub bad_datagrams: u64,
}

/// A receiving thread and the address to send to.
pub(crate) struct Receiver {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    datagrams: Arc<AtomicU64>,
    thread: JoinHandle<Received>,
}

impl Receiver {
    /// Bind 127.0.0.1 on a free port and start reading.
    pub(crate) fn start(verify: bool) -> std::io::Result<Self> {
        let sock = UdpSocket::bind("127.0.0.1:0")?;
        let fd = sock.as_raw_fd();
        // As root the buffer may exceed net.core.rmem_max; otherwise it is
        // capped there, and the sender waits for the receiver between
        // drains (Receiver::wait_for) so nothing is dropped either way.
        if set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, RCVBUF).is_err() {
            let _ = set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, RCVBUF);
        }
        // Without UDP GRO (Linux < 5.0) each datagram is read on its own.
        let _ = set_int(fd, libc::SOL_UDP, libc::UDP_GRO, 1);
        let addr = sock.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let datagrams = Arc::new(AtomicU64::new(0));
        let thread = std::thread::Builder::new()
            .name("synthetic-recv".into())
            .spawn({
                let (stop, datagrams) = (stop.clone(), datagrams.clone());
                move || read_all(&sock, verify, &stop, &datagrams)
            })?;
        Ok(Receiver {
            addr,
            stop,
            datagrams,
            thread,
        })
    }

    /// Where to send.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Wait until `datagrams` were read, for at most `timeout`; false on
    /// timeout (some were lost).
    pub(crate) fn wait_for(&self, datagrams: u64, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        while self.datagrams.load(Ordering::Acquire) < datagrams {
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        true
    }

    /// Wait for the `sent` datagrams (up to a second), stop, and count.
    pub(crate) fn finish(self, sent: u64) -> Received {
        self.wait_for(sent, Duration::from_secs(1));
        self.stop.store(true, Ordering::Release);
        // A panic in the thread (none is expected) counts as nothing read.
        self.thread.join().unwrap_or_default()
    }
}

/// The receiving loop: until `stop`, read and count every message.
fn read_all(sock: &UdpSocket, verify: bool, stop: &AtomicBool, done: &AtomicU64) -> Received {
    let mut buf = vec![0u8; RECV_BUF];
    let mut got = Received::default();
    while !stop.load(Ordering::Acquire) {
        let (len, segment) = match recv_gro(sock, &mut buf) {
            Ok(r) => r,
            // Nothing yet (EAGAIN), or a signal: look at `stop` again.
            Err(_) => {
                std::hint::spin_loop();
                continue;
            }
        };
        got.messages += 1;
        let bytes = &buf[..len];
        if bytes.is_empty() {
            // One empty datagram: bad, as at the sink.
            count(bytes, verify, &mut got);
            got.datagrams += 1;
        }
        // Datagrams of `segment` bytes end to end, the last maybe shorter.
        let size = segment.filter(|&s| s > 0).unwrap_or(len).max(1);
        for d in bytes.chunks(size) {
            count(d, verify, &mut got);
            got.datagrams += 1;
        }
        done.store(got.datagrams, Ordering::Release);
    }
    got
}

/// Count one datagram's events into `got`.
fn count(d: &[u8], verify: bool, got: &mut Received) {
    if !verify {
        match DatagramHeaderRef::parse(d) {
            Ok((h, _)) => got.events += u64::from(h.event_count),
            Err(_) => got.bad_datagrams += 1,
        }
        return;
    }
    match Datagram::decode(d) {
        Ok(dg) => {
            for (_, ev) in &dg.records {
                got.events += 1;
                match ev {
                    Event::Rx(_) => got.rx_events += 1,
                    Event::Tx(_) => got.tx_events += 1,
                    _ => {}
                }
            }
        }
        Err(_) => got.bad_datagrams += 1,
    }
}

/// One message, without waiting, and the `UDP_GRO` segment size the
/// kernel gave with it.
fn recv_gro(sock: &UdpSocket, buf: &mut [u8]) -> std::io::Result<(usize, Option<usize>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for one cmsg carrying an int, 8-byte aligned.
    let mut control = [0u64; 4];
    // SAFETY: msghdr is plain data; zeroed is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: recvmsg on our socket into `buf` and `control`, which
    // outlive the call and are the sizes the header says.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut segment = None;
    // SAFETY: walking the control data recvmsg wrote (msg_controllen is
    // what it wrote) with the libc CMSG macros; the int is read unaligned
    // from inside the cmsg they bound.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                let v: libc::c_int = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                segment = usize::try_from(v).ok();
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, segment))
}

/// setsockopt of an int option.
fn set_int(fd: i32, level: i32, name: i32, value: usize) -> std::io::Result<()> {
    let v = libc::c_int::try_from(value).unwrap_or(libc::c_int::MAX);
    // SAFETY: setsockopt on a valid fd with a c_int option of its size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
