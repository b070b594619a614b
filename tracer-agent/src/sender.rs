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

    /// How many datagrams one [`send_batch`](Self::send_batch) may carry,
    /// and whether they must all have one size (but the last, which may be
    /// shorter) for that: what UDP GSO needs. One datagram, any size, by
    /// default.
    fn batch_shape(&self) -> BatchShape {
        BatchShape::default()
    }

    /// Send the datagrams laid end to end in `buf`, `lens` bytes each,
    /// shaped as [`batch_shape`](Self::batch_shape) said. Stops at the
    /// first failure: the datagrams before it went out, the rest did not.
    fn send_batch(&mut self, buf: &[u8], lens: &[usize]) -> BatchSent {
        send_each(self, buf, lens)
    }

    /// Read one datagram the sink sent back (an acknowledgement) without
    /// waiting: `Ok(None)` when there is none.
    fn recv(&mut self, _buf: &mut [u8]) -> std::io::Result<Option<usize>> {
        Ok(None)
    }
}

/// [`Transport::send_batch`] one [`Transport::send`] per datagram.
fn send_each<T: Transport + ?Sized>(t: &mut T, buf: &[u8], lens: &[usize]) -> BatchSent {
    let mut sent = BatchSent::default();
    let mut off = 0;
    for &len in lens {
        sent.calls += 1;
        if let Err(e) = t.send(&buf[off..off + len]) {
            sent.error = Some(e);
            break;
        }
        off += len;
        sent.datagrams += 1;
    }
    sent
}

/// Whether one UDP GSO call can carry `lens`: two or more datagrams, all
/// of the first one's size but the last, which may be shorter.
fn gso_shaped(lens: &[usize]) -> bool {
    match lens.split_last() {
        Some((&last, body)) if !body.is_empty() => {
            body.iter().all(|&l| l == body[0]) && last <= body[0]
        }
        _ => false,
    }
}

/// One socket alone, for [`send_each`].
struct SinkOnly<'a>(&'a Socket);

impl Transport for SinkOnly<'_> {
    fn send(&mut self, datagram: &[u8]) -> std::io::Result<()> {
        self.0.send(datagram).map(|_| ())
    }
}

/// What a transport can send in one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchShape {
    /// Most datagrams in one batch (at least 1).
    pub max_datagrams: usize,
    /// When set, every datagram of a batch but the last must be exactly
    /// this long (UDP GSO segments); the builder pads them to it.
    pub segment: Option<usize>,
}

impl Default for BatchShape {
    fn default() -> Self {
        BatchShape {
            max_datagrams: 1,
            segment: None,
        }
    }
}

/// What one [`Transport::send_batch`] did.
#[derive(Debug, Default)]
pub struct BatchSent {
    /// Datagrams handed to the kernel, from the first.
    pub datagrams: usize,
    /// System calls made.
    pub calls: usize,
    /// Why the rest were not sent.
    pub error: Option<std::io::Error>,
}

/// How the agent hands datagrams to the kernel (`--batch-send`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum BatchSend {
    /// UDP GSO: one system call and one pass down the stack for up to 64
    /// datagrams of one size, cut into datagrams at the device (the
    /// builder pads each to the segment size). Falls back to `mmsg` where
    /// the kernel or the route refuses it.
    #[default]
    Gso,
    /// `sendmmsg`: one system call for up to 64 datagrams, each still its
    /// own pass down the stack.
    Mmsg,
    /// One `send` per datagram.
    Off,
}

/// Most segments of one UDP GSO send (the kernel's UDP_MAX_SEGMENTS is 64
/// before Linux 6.2 and 128 since; the smaller holds everywhere).
const GSO_MAX_SEGMENTS: usize = 64;
/// Most datagrams of one `sendmmsg` call.
const MMSG_MAX: usize = 64;

/// A connected UDP socket to the sink.
#[derive(Debug)]
pub struct UdpTransport {
    sock: Socket,
    max_payload: usize,
    mode: BatchSend,
    /// A second sink every datagram also goes to (the agent's own writer,
    /// for `--write`/`--live-iface` beside `--sink`): connected, send-only;
    /// its acknowledgements are never read, the remote sink's count.
    copy: Option<Socket>,
}

impl UdpTransport {
    /// Connect to `sink`; `max_payload` overrides the MTU-derived size.
    /// `mode` falls back to `mmsg` at once when the socket refuses UDP GSO.
    pub fn connect(
        sink: SocketAddr,
        max_payload: Option<usize>,
        mode: BatchSend,
    ) -> std::io::Result<Self> {
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
        let mut mode = mode;
        if mode == BatchSend::Gso {
            if let Err(e) = set_gso_size(&sock, 0) {
                tracing::info!(error = %e, "this kernel has no UDP GSO: batching datagrams with sendmmsg instead");
                mode = BatchSend::Mmsg;
            }
        }
        Ok(UdpTransport {
            sock,
            max_payload,
            mode,
            copy: None,
        })
    }

    /// Also send every datagram to `local`, a sink on this host. What it
    /// does not take shows as a sequence gap in its own loss accounting.
    pub fn with_copy_to(mut self, local: SocketAddr) -> std::io::Result<Self> {
        let sock = Socket::new(Domain::for_address(local), Type::DGRAM, Some(Protocol::UDP))?;
        sock.set_send_buffer_size(4 << 20)?;
        sock.connect(&local.into())?;
        self.copy = Some(sock);
        Ok(self)
    }

    /// Largest datagram payload to build (the GSO segment size).
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// How datagrams are sent now (GSO may have fallen back to `mmsg`).
    pub fn mode(&self) -> BatchSend {
        self.mode
    }

    /// One `sendmsg` carrying every datagram of `buf` as UDP GSO segments
    /// of `segment` bytes.
    fn send_gso(sock: &Socket, buf: &[u8], segment: usize) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let seg = u16::try_from(segment).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "GSO segment over 64 KiB")
        })?;
        let mut iov = libc::iovec {
            iov_base: buf.as_ptr() as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // Room for one cmsg carrying a u16, 8-byte aligned.
        let mut control = [0u64; 4];
        // SAFETY: msghdr is plain data; zeroed is a valid empty header.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE is arithmetic on its argument.
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as usize;
        // SAFETY: the control buffer is CMSG_SPACE(2) bytes or more, so the
        // first header and its 2 data bytes lie inside it.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = libc::UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
        }
        // SAFETY: sendmsg on our socket with buffers that outlive the call;
        // the kernel only reads them.
        let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// `sendmmsg` calls until every datagram went out or one failed.
    fn send_mmsg(sock: &Socket, buf: &[u8], lens: &[usize], sent: &mut BatchSent) {
        use std::os::fd::AsRawFd;
        let mut offsets = Vec::with_capacity(lens.len());
        let mut off = 0;
        for &len in lens {
            offsets.push(off);
            off += len;
        }
        let mut first = 0;
        while first < lens.len() {
            let chunk = (lens.len() - first).min(MMSG_MAX);
            let mut iovs: Vec<libc::iovec> = (first..first + chunk)
                .map(|i| libc::iovec {
                    iov_base: buf[offsets[i]..].as_ptr() as *mut libc::c_void,
                    iov_len: lens[i],
                })
                .collect();
            let mut msgs: Vec<libc::mmsghdr> = iovs
                .iter_mut()
                .map(|iov| {
                    // SAFETY: mmsghdr is plain data; zeroed is a valid empty header.
                    let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                    m.msg_hdr.msg_iov = iov;
                    m.msg_hdr.msg_iovlen = 1;
                    m
                })
                .collect();
            sent.calls += 1;
            // SAFETY: sendmmsg on our socket with `chunk` headers whose
            // iovecs point into `buf`, all alive for the call.
            let n = unsafe { libc::sendmmsg(sock.as_raw_fd(), msgs.as_mut_ptr(), chunk as u32, 0) };
            if n <= 0 {
                sent.error = Some(if n < 0 {
                    std::io::Error::last_os_error()
                } else {
                    std::io::Error::from(std::io::ErrorKind::WriteZero)
                });
                return;
            }
            first += n as usize;
            sent.datagrams += n as usize;
        }
    }
}

/// Set the socket's default UDP GSO segment size (0: none); fails on a
/// kernel without UDP GSO (before 4.18).
fn set_gso_size(sock: &Socket, size: libc::c_int) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: setsockopt with a valid fd and a c_int option of its size.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Errors with which a route or device refuses UDP GSO (no checksum
/// offload, IPsec, too many segments for it): sent another way instead.
fn gso_refused(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EIO | libc::EINVAL | libc::EOPNOTSUPP | libc::ENOPROTOOPT)
    )
}

impl Transport for UdpTransport {
    fn send(&mut self, datagram: &[u8]) -> std::io::Result<()> {
        self.sock.send(datagram)?;
        if let Some(c) = &self.copy {
            // The local copy never holds the remote sink up.
            let _ = c.send(datagram);
        }
        Ok(())
    }

    fn batch_shape(&self) -> BatchShape {
        // At most 64 KiB per call, GSO or not: the burst one call lands
        // in the sink's socket buffer stays what one large datagram is
        // (64 datagrams of 64 KiB at once overflow a default 208 KiB
        // buffer of a sink on the same host).
        let fit = (tracer_codec::MAX_DATAGRAM_LEN / self.max_payload).max(1);
        match self.mode {
            BatchSend::Gso if fit > 1 => BatchShape {
                max_datagrams: fit.min(GSO_MAX_SEGMENTS),
                segment: Some(self.max_payload),
            },
            BatchSend::Gso | BatchSend::Mmsg => BatchShape {
                max_datagrams: fit.min(MMSG_MAX),
                segment: None,
            },
            BatchSend::Off => BatchShape::default(),
        }
    }

    fn send_batch(&mut self, buf: &[u8], lens: &[usize]) -> BatchSent {
        let sent = self.send_batch_to_sink(buf, lens);
        if let Some(c) = &self.copy {
            // What the remote sink was sent, the local one gets too; over
            // loopback a GSO batch always goes in one call.
            let lens = &lens[..sent.datagrams];
            let buf = &buf[..lens.iter().sum::<usize>()];
            match self.mode {
                BatchSend::Gso if gso_shaped(lens) => {
                    let _ = Self::send_gso(c, buf, lens[0]);
                }
                BatchSend::Gso | BatchSend::Mmsg => {
                    Self::send_mmsg(c, buf, lens, &mut BatchSent::default());
                }
                BatchSend::Off => {
                    send_each(&mut SinkOnly(c), buf, lens);
                }
            }
        }
        sent
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

impl UdpTransport {
    fn send_batch_to_sink(&mut self, buf: &[u8], lens: &[usize]) -> BatchSent {
        let mut sent = BatchSent::default();
        let Some(&first) = lens.first() else {
            return sent;
        };
        if lens.len() == 1 || self.mode == BatchSend::Off {
            return send_each(&mut SinkOnly(&self.sock), buf, lens);
        }
        if self.mode == BatchSend::Gso && gso_shaped(lens) {
            sent.calls += 1;
            match Self::send_gso(&self.sock, buf, first) {
                Ok(()) => {
                    sent.datagrams = lens.len();
                    return sent;
                }
                Err(e) if gso_refused(&e) => {
                    tracing::warn!(error = %e, "the route to the sink refuses UDP GSO: sending with sendmmsg from now on");
                    self.mode = BatchSend::Mmsg;
                }
                Err(e) => {
                    sent.error = Some(e);
                    return sent;
                }
            }
        }
        Self::send_mmsg(&self.sock, buf, lens, &mut sent);
        sent
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
        let t = UdpTransport::connect(rx.local_addr().unwrap(), None, BatchSend::Off).unwrap();
        // lo has a 64 KiB MTU.
        assert!(t.max_payload() > 1472, "{}", t.max_payload());
        let mut t =
            UdpTransport::connect(rx.local_addr().unwrap(), Some(1000), BatchSend::Off).unwrap();
        assert_eq!(t.max_payload(), 1000);
        t.send(b"hello").unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(rx.recv(&mut buf).unwrap(), 5);
    }

    /// `lens` datagrams end to end, each filled with its index.
    fn batch(lens: &[usize]) -> Vec<u8> {
        lens.iter()
            .enumerate()
            .flat_map(|(i, &l)| std::iter::repeat_n(i as u8, l))
            .collect()
    }

    /// Every datagram waiting on `rx`, as (length, first byte).
    fn received(rx: &std::net::UdpSocket) -> Vec<(usize, u8)> {
        rx.set_nonblocking(true).unwrap();
        let mut buf = vec![0u8; 65536];
        let mut got = Vec::new();
        while let Ok(n) = rx.recv(&mut buf) {
            assert!(buf[..n].iter().all(|&b| b == buf[0]), "datagrams mixed");
            got.push((n, buf[0]));
        }
        got
    }

    fn receiver() -> std::net::UdpSocket {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        socket2::SockRef::from(&rx)
            .set_recv_buffer_size(4 << 20)
            .unwrap();
        rx
    }

    #[test]
    fn gso_sends_a_batch_in_one_call_and_the_kernel_cuts_it_into_datagrams() {
        let rx = receiver();
        let mut t =
            UdpTransport::connect(rx.local_addr().unwrap(), Some(1000), BatchSend::Gso).unwrap();
        let shape = t.batch_shape();
        assert_eq!(shape.segment, Some(1000));
        assert_eq!(shape.max_datagrams, GSO_MAX_SEGMENTS);
        let lens = [1000, 1000, 1000, 1000, 1000, 300];
        let sent = t.send_batch(&batch(&lens), &lens);
        assert!(sent.error.is_none(), "{:?}", sent.error);
        assert_eq!((sent.datagrams, sent.calls), (6, 1));
        let want: Vec<(usize, u8)> = lens
            .iter()
            .enumerate()
            .map(|(i, &l)| (l, i as u8))
            .collect();
        assert_eq!(received(&rx), want);
        assert_eq!(t.mode(), BatchSend::Gso);
    }

    #[test]
    fn a_copy_gets_every_datagram_the_sink_got_in_every_mode() {
        let uniform = [1000, 1000, 1000, 400];
        let mixed: Vec<usize> = (0..70).map(|i| 100 + i).collect();
        for mode in [BatchSend::Gso, BatchSend::Mmsg, BatchSend::Off] {
            for lens in [&uniform[..], &mixed[..]] {
                let (rx, copy) = (receiver(), receiver());
                let mut t = UdpTransport::connect(rx.local_addr().unwrap(), Some(1000), mode)
                    .unwrap()
                    .with_copy_to(copy.local_addr().unwrap())
                    .unwrap();
                let sent = t.send_batch(&batch(lens), lens);
                assert!(sent.error.is_none(), "{mode:?}: {:?}", sent.error);
                t.send(&[7u8; 10]).unwrap();
                let got = received(&rx);
                assert_eq!(got.len(), lens.len() + 1, "{mode:?}");
                assert_eq!(received(&copy), got, "{mode:?}: the copy differs");
            }
        }
    }

    #[test]
    fn datagrams_of_mixed_sizes_go_by_sendmmsg_in_chunks() {
        let rx = receiver();
        let mut t =
            UdpTransport::connect(rx.local_addr().unwrap(), Some(1000), BatchSend::Gso).unwrap();
        // Not one size: no GSO, sendmmsg in chunks of MMSG_MAX.
        let lens: Vec<usize> = (0..MMSG_MAX + 6).map(|i| 100 + i).collect();
        assert_eq!(
            t.batch_shape().max_datagrams,
            MMSG_MAX,
            "65,507 bytes hold 65 of 1000"
        );
        let sent = t.send_batch(&batch(&lens), &lens);
        assert!(sent.error.is_none(), "{:?}", sent.error);
        assert_eq!((sent.datagrams, sent.calls), (lens.len(), 2));
        let got = received(&rx);
        assert_eq!(got.len(), lens.len());
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, &(l, b))| l == lens[i] && b == i as u8));
    }

    #[test]
    fn a_route_that_refuses_gso_falls_back_to_sendmmsg_without_losing_the_batch() {
        let rx = receiver();
        let mut t =
            UdpTransport::connect(rx.local_addr().unwrap(), Some(1000), BatchSend::Gso).unwrap();
        // Without UDP checksums the kernel refuses GSO (EINVAL), as a
        // route without checksum offload does (EIO).
        let off: libc::c_int = 1;
        // SAFETY: setsockopt on our socket with a c_int option of its size.
        let rc = unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&t.sock),
                libc::SOL_SOCKET,
                libc::SO_NO_CHECK,
                (&off as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0);
        let lens = [1000, 1000, 1000, 10];
        let sent = t.send_batch(&batch(&lens), &lens);
        assert!(sent.error.is_none(), "{:?}", sent.error);
        assert_eq!(
            (sent.datagrams, sent.calls),
            (4, 2),
            "one refused GSO call, one sendmmsg"
        );
        assert_eq!(t.mode(), BatchSend::Mmsg);
        assert_eq!(received(&rx).len(), 4);
        assert_eq!(t.batch_shape().segment, None, "no more padding");
    }

    #[test]
    fn a_closed_port_fails_the_batch_and_says_how_many_went() {
        let rx = receiver();
        let addr = rx.local_addr().unwrap();
        let mut t = UdpTransport::connect(addr, Some(1000), BatchSend::Mmsg).unwrap();
        drop(rx);
        let lens = [500, 500];
        // The first send draws the ICMP error; a later one reports it.
        let mut failed = None;
        for _ in 0..20 {
            let sent = t.send_batch(&batch(&lens), &lens);
            if let Some(e) = sent.error {
                failed = Some((sent.datagrams, e.kind()));
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let (went, kind) = failed.expect("a send to a closed port fails");
        assert!(went < lens.len());
        assert_eq!(kind, std::io::ErrorKind::ConnectionRefused);
    }
}
