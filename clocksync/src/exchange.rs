//! Two-way time exchange for hosts without PTP: the agent (client) asks the
//! sink (responder, the master) over UDP; every message is stamped by the
//! kernel (SO_TIMESTAMPING software TX stamps from the error queue, RX stamps
//! from the SCM_TIMESTAMPING control message), never in user space. Offset
//! and path delay come from the four stamps; the minimum-delay exchange of a
//! burst becomes one [`OffsetSample`] for the servo.
//!
//! # Messages
//! Every message is 40 bytes, little-endian (requests as long as answers,
//! so both directions take the same serialisation time):
//!
//! | off | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `b"CSX1"` |
//! | 4 | 1 | version = 1 |
//! | 5 | 1 | kind: 1 request, 2 response (carries t2), 3 follow-up (carries t3) |
//! | 6 | 2 | flags: bit 0 = responder clock synchronised (locked) |
//! | 8 | 8 | sequence number (client's; echoed) |
//! | 16 | 8 | `t_ns`: t2 or t3 on the responder's global axis, 0 in requests |
//! | 24 | 4 | responder servo state code (0-3, 255 = none) |
//! | 28 | 4 | responder error estimate, ns (saturated) |
//! | 32 | 8 | reserved, 0 |
//!
//! The responder learns t3 (its reply's TX stamp) only after sending the
//! response, so it sends it in a follow-up, as two-step PTP does.
//!
//! # Time axes
//! Kernel software stamps are CLOCK_REALTIME. Each side maps them to its own
//! axis with a tight realtime↔monotonic bracket taken per exchange (same
//! kernel, so only the bracket width and NTP slew during one round trip
//! matter): the client to CLOCK_MONOTONIC, the responder further through
//! its [`GlobalClock`]. The client applies the test-only
//! [`ErrorInjection`] to every realtime stamp and reading, which cancels
//! out, as it must: the exchange does not depend on the client's realtime.
//!
//! With t1 (client TX), t2 (responder RX), t3 (responder TX), t4 (client RX):
//! `offset = ((t2 - t1) + (t3 - t4)) / 2`, `delay = (t4 - t1) - (t3 - t2)`,
//! and the sample is "at mono (t1+t4)/2 the reference read (t2+t3)/2".

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bracket::{now_ns, ClockId};
use crate::clock::{
    inject, Clock, ErrorInjection, OffsetSample, RealtimeMonoTracker, ReferenceClock,
};
use crate::error::ClockError;
use crate::global::GlobalClock;

/// Message magic.
pub const MAGIC: [u8; 4] = *b"CSX1";
/// Protocol version.
pub const VERSION: u8 = 1;
/// Size of every message, bytes.
pub const MSG_LEN: usize = 40;
/// Flag: the responder's global clock is locked.
pub const FLAG_SYNCED: u16 = 1;

// SO_TIMESTAMPING flags (linux/net_tstamp.h; values checked by a test
// against the C header's).
/// SOF_TIMESTAMPING_TX_HARDWARE.
pub const SOF_TX_HARDWARE: u32 = 1 << 0;
/// SOF_TIMESTAMPING_TX_SOFTWARE.
pub const SOF_TX_SOFTWARE: u32 = 1 << 1;
/// SOF_TIMESTAMPING_RX_HARDWARE.
pub const SOF_RX_HARDWARE: u32 = 1 << 2;
/// SOF_TIMESTAMPING_RX_SOFTWARE.
pub const SOF_RX_SOFTWARE: u32 = 1 << 3;
/// SOF_TIMESTAMPING_SOFTWARE (report software stamps).
pub const SOF_SOFTWARE: u32 = 1 << 4;
/// SOF_TIMESTAMPING_RAW_HARDWARE (report hardware stamps).
pub const SOF_RAW_HARDWARE: u32 = 1 << 6;
/// SOF_TIMESTAMPING_OPT_ID (a key per sent datagram in ee_data).
pub const SOF_OPT_ID: u32 = 1 << 7;
/// SOF_TIMESTAMPING_OPT_TSONLY (no payload echoed on the error queue).
pub const SOF_OPT_TSONLY: u32 = 1 << 11;
/// SO_TIMESTAMPING / SCM_TIMESTAMPING (asm-generic/socket.h, old 64-bit layout).
pub const SO_TIMESTAMPING: i32 = 37;
/// SO_EE_ORIGIN_TIMESTAMPING (linux/errqueue.h).
pub const SO_EE_ORIGIN_TIMESTAMPING: u8 = 4;
/// IP_RECVERR cmsg type at SOL_IP.
const IP_RECVERR: i32 = 11;
/// IPV6_RECVERR cmsg type at SOL_IPV6.
const IPV6_RECVERR: i32 = 25;

/// Software stamps only: what veth, loopback and every NIC offer.
pub const SOFTWARE_FLAGS: u32 =
    SOF_TX_SOFTWARE | SOF_RX_SOFTWARE | SOF_SOFTWARE | SOF_OPT_ID | SOF_OPT_TSONLY;

/// Message kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Client → responder.
    Request = 1,
    /// Responder → client, with t2.
    Response = 2,
    /// Responder → client, with t3.
    FollowUp = 3,
    /// Client → responder, ignored: sent just before each request so the
    /// request does not travel a cache-cold path (see `try_exchange`).
    Warmup = 4,
}

/// One protocol message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message {
    /// Kind.
    pub kind: Kind,
    /// Flags ([`FLAG_SYNCED`]).
    pub flags: u16,
    /// Sequence number.
    pub seq: u64,
    /// t2 or t3 on the responder's global axis, ns.
    pub t_ns: u64,
    /// Responder servo state code (255 = none).
    pub state: u32,
    /// Responder error estimate, ns.
    pub error_estimate_ns: u32,
}

impl Message {
    /// A request.
    pub fn request(seq: u64) -> Self {
        Message {
            kind: Kind::Request,
            flags: 0,
            seq,
            t_ns: 0,
            state: 255,
            error_estimate_ns: 0,
        }
    }

    /// Encode.
    pub fn encode(&self) -> [u8; MSG_LEN] {
        let mut b = [0u8; MSG_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = VERSION;
        b[5] = self.kind as u8;
        b[6..8].copy_from_slice(&self.flags.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.t_ns.to_le_bytes());
        b[24..28].copy_from_slice(&self.state.to_le_bytes());
        b[28..32].copy_from_slice(&self.error_estimate_ns.to_le_bytes());
        b
    }

    /// Decode; rejects wrong size, magic, version or kind.
    pub fn decode(b: &[u8]) -> Result<Self, ClockError> {
        let bad = |w: &str| ClockError::Protocol(w.to_string());
        if b.len() != MSG_LEN {
            return Err(bad("wrong message length"));
        }
        if b[0..4] != MAGIC {
            return Err(bad("bad magic"));
        }
        if b[4] != VERSION {
            return Err(bad("unsupported version"));
        }
        let kind = match b[5] {
            1 => Kind::Request,
            2 => Kind::Response,
            3 => Kind::FollowUp,
            4 => Kind::Warmup,
            _ => return Err(bad("unknown kind")),
        };
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        let u32_at = |o: usize| {
            let mut a = [0u8; 4];
            a.copy_from_slice(&b[o..o + 4]);
            u32::from_le_bytes(a)
        };
        Ok(Message {
            kind,
            flags: u16::from_le_bytes([b[6], b[7]]),
            seq: u64_at(8),
            t_ns: u64_at(16),
            state: u32_at(24),
            error_estimate_ns: u32_at(28),
        })
    }
}

/// The four stamps of one exchange, each on its side's axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Exchange {
    /// Sequence number.
    pub seq: u64,
    /// Client TX, client CLOCK_MONOTONIC, ns.
    pub t1_ns: u64,
    /// Responder RX, responder global axis, ns.
    pub t2_ns: u64,
    /// Responder TX, responder global axis, ns.
    pub t3_ns: u64,
    /// Client RX, client CLOCK_MONOTONIC, ns.
    pub t4_ns: u64,
}

impl Exchange {
    /// Responder minus client, ns: `((t2 - t1) + (t3 - t4)) / 2`.
    pub fn offset_ns(&self) -> i64 {
        let a = self.t2_ns.wrapping_sub(self.t1_ns) as i64 as i128;
        let b = self.t3_ns.wrapping_sub(self.t4_ns) as i64 as i128;
        ((a + b) / 2) as i64
    }

    /// Round-trip path delay, ns: `(t4 - t1) - (t3 - t2)` (0 if negative).
    pub fn delay_ns(&self) -> u64 {
        let rtt = self.t4_ns.wrapping_sub(self.t1_ns) as i64;
        let hold = self.t3_ns.wrapping_sub(self.t2_ns) as i64;
        rtt.saturating_sub(hold).max(0) as u64
    }

    /// As a servo sample: at mono (t1+t4)/2 the reference read (t2+t3)/2.
    pub fn to_sample(&self) -> OffsetSample {
        let mono = self.t1_ns / 2 + self.t4_ns / 2 + (self.t1_ns % 2 + self.t4_ns % 2) / 2;
        let delay = self.delay_ns();
        OffsetSample {
            mono_ns: mono,
            ref_ns: mono.wrapping_add(self.offset_ns() as u64),
            uncertainty_ns: delay / 2,
            delay_ns: delay,
        }
    }
}

/// The exchange with the smallest delay (the minimum-delay filter).
pub fn min_delay(exchanges: &[Exchange]) -> Option<Exchange> {
    exchanges.iter().copied().min_by_key(Exchange::delay_ns)
}

/// Where the stamps come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StampMode {
    /// Kernel SO_TIMESTAMPING software stamps (the product).
    #[default]
    Kernel,
    /// `clock_gettime(CLOCK_REALTIME)` right before send / after receive:
    /// the user-space stamping trace-cmd does, for comparison only.
    User,
    /// NIC hardware stamps (SO_TIMESTAMPING raw hardware, in PHC time),
    /// mapped to CLOCK_MONOTONIC through the NIC's PHC. The NIC must have
    /// hardware timestamping switched on (ptp4l does; so does
    /// `hwstamp_ctl -i IF -t 1 -r 1`).
    Hardware,
}

/// Hardware stamps only (the NIC's PHC time).
pub const HARDWARE_FLAGS: u32 =
    SOF_TX_HARDWARE | SOF_RX_HARDWARE | SOF_RAW_HARDWARE | SOF_OPT_ID | SOF_OPT_TSONLY;

/// The PHC whose time a NIC's hardware stamps are in, and the mapping of
/// that time to CLOCK_MONOTONIC, refreshed before each exchange.
pub struct PhcMap {
    phc: Box<dyn ReferenceClock>,
    /// `phc - monotonic`, ns, from the last refresh.
    offset_ns: i64,
}

impl std::fmt::Debug for PhcMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PhcMap")
            .field("phc", &self.phc.name())
            .field("offset_ns", &self.offset_ns)
            .finish()
    }
}

impl PhcMap {
    /// Map stamps of `phc` (the NIC's clock, e.g. `PhcClock::for_interface`).
    pub fn new(phc: Box<dyn ReferenceClock>) -> Result<Self, ClockError> {
        let mut m = PhcMap { phc, offset_ns: 0 };
        m.refresh()?;
        Ok(m)
    }

    /// The PHC of a network interface.
    pub fn for_interface(iface: &str) -> Result<Self, ClockError> {
        Self::new(Box::new(crate::phc::PhcClock::for_interface(iface)?))
    }

    /// Re-measure `phc - monotonic` (one cross-timestamp sample).
    pub fn refresh(&mut self) -> Result<(), ClockError> {
        let s = self.phc.sample()?;
        self.offset_ns = s.ref_minus_mono_ns();
        Ok(())
    }

    /// A hardware stamp (PHC ns) on the monotonic axis.
    pub fn to_mono(&self, phc_ns: u64) -> u64 {
        phc_ns.wrapping_sub(self.offset_ns as u64)
    }
}

// --- socket plumbing ------------------------------------------------------

/// Enable SO_TIMESTAMPING with `flags` on a socket.
pub fn enable_timestamping(sock: &UdpSocket, flags: u32) -> Result<(), ClockError> {
    let v: libc::c_int = flags as libc::c_int;
    // SAFETY: setsockopt with a valid int option value and its size.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_TIMESTAMPING,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(ClockError::last_os("setsockopt(SO_TIMESTAMPING)"));
    }
    Ok(())
}

/// A received datagram or error-queue entry.
struct Received {
    len: usize,
    from: Option<SocketAddr>,
    /// Software stamp (CLOCK_REALTIME), ns.
    sw_ns: Option<u64>,
    /// Raw hardware stamp (the NIC's PHC time), ns.
    hw_ns: Option<u64>,
    /// OPT_ID key of a TX stamp (error queue only).
    tx_key: Option<u32>,
}

fn timespec_ns(ts: &libc::timespec) -> Option<u64> {
    if ts.tv_sec == 0 && ts.tv_nsec == 0 {
        None
    } else {
        Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    }
}

fn sockaddr_to_std(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match ss.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says this storage holds a sockaddr_in.
            let a: libc::sockaddr_in =
                unsafe { std::ptr::read_unaligned((ss as *const libc::sockaddr_storage).cast()) };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::from((ip, u16::from_be(a.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this storage holds a sockaddr_in6.
            let a: libc::sockaddr_in6 =
                unsafe { std::ptr::read_unaligned((ss as *const libc::sockaddr_storage).cast()) };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::from((ip, u16::from_be(a.sin6_port))))
        }
        _ => None,
    }
}

/// recvmsg(2) with control messages parsed. `errqueue` reads MSG_ERRQUEUE.
fn recv_stamped(sock: &UdpSocket, buf: &mut [u8], errqueue: bool) -> std::io::Result<Received> {
    // u64 elements keep the control buffer aligned for cmsghdr.
    let mut control = [0u64; 64];
    let mut from: libc::sockaddr_storage =
        // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
        unsafe { std::mem::zeroed() };
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain old data; the fields we need are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut from as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control);
    let flags = libc::MSG_DONTWAIT | if errqueue { libc::MSG_ERRQUEUE } else { 0 };
    // SAFETY: msg points to live buffers (iov, name, control) of the sizes given.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, flags) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = Received {
        len: n as usize,
        from: if msg.msg_namelen > 0 && !errqueue {
            sockaddr_to_std(&from)
        } else {
            None
        },
        sw_ns: None,
        hw_ns: None,
        tx_key: None,
    };
    // SAFETY: msg was filled by recvmsg.
    unsafe { parse_control(&msg, &mut out) };
    Ok(out)
}

/// Read the timestamping control messages of a received `msg` into `out`.
///
/// # Safety
/// `msg.msg_control` must point to `msg.msg_controllen` readable bytes
/// holding well-formed cmsg headers (as recvmsg leaves them).
unsafe fn parse_control(msg: &libc::msghdr, out: &mut Received) {
    // SAFETY: the caller guarantees the control buffer; the CMSG_* macros
    // walk it within msg_controllen, and each payload is read unaligned only
    // when its cmsg_len covers the type read.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            let h = &*c;
            let data = libc::CMSG_DATA(c);
            let payload = h.cmsg_len as usize - (data as usize - c as usize);
            let is_ts = h.cmsg_level == libc::SOL_SOCKET && h.cmsg_type == SO_TIMESTAMPING;
            let is_err = (h.cmsg_level == libc::SOL_IP && h.cmsg_type == IP_RECVERR)
                || (h.cmsg_level == libc::SOL_IPV6 && h.cmsg_type == IPV6_RECVERR);
            if is_ts && payload >= 3 * size_of::<libc::timespec>() {
                // ts[0] software, ts[1] deprecated, ts[2] raw hardware.
                let ts: [libc::timespec; 3] = std::ptr::read_unaligned(data.cast());
                out.sw_ns = timespec_ns(&ts[0]);
                out.hw_ns = timespec_ns(&ts[2]);
            } else if is_err && payload >= size_of::<libc::sock_extended_err>() {
                let e: libc::sock_extended_err = std::ptr::read_unaligned(data.cast());
                if e.ee_errno == libc::ENOMSG as u32 && e.ee_origin == SO_EE_ORIGIN_TIMESTAMPING {
                    out.tx_key = Some(e.ee_data);
                }
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
}

/// Wait until the socket is readable (or has an error-queue entry).
fn wait_readable(sock: &UdpSocket, deadline: Instant, errqueue: bool) -> Result<bool, ClockError> {
    let now = Instant::now();
    if now >= deadline {
        return Ok(false);
    }
    let ms = (deadline - now).as_millis().clamp(1, i32::MAX as u128) as i32;
    let mut p = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: if errqueue { 0 } else { libc::POLLIN },
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let rc = unsafe { libc::poll(&mut p, 1, ms) };
    if rc < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            return Ok(true);
        }
        return Err(ClockError::io("poll", e));
    }
    if !errqueue && p.revents & libc::POLLERR != 0 && p.revents & libc::POLLIN == 0 {
        // Only stale TX stamps (of a timed-out exchange) are pending: drop
        // them, or poll would keep waking up for them.
        let mut buf = [0u8; 64];
        while recv_stamped(sock, &mut buf, true).is_ok() {}
    }
    Ok(rc > 0)
}

/// The stamp of a received datagram or error-queue entry that `mode` uses.
fn kernel_stamp(r: &Received, mode: StampMode) -> Option<u64> {
    match mode {
        StampMode::Hardware => r.hw_ns,
        _ => r.sw_ns,
    }
}

/// Read the TX stamp with OPT_ID key `key` from the error queue.
fn tx_stamp(
    sock: &UdpSocket,
    key: u32,
    mode: StampMode,
    deadline: Instant,
) -> Result<u64, ClockError> {
    let mut buf = [0u8; 64];
    loop {
        match recv_stamped(sock, &mut buf, true) {
            Ok(r) => {
                if let (Some(k), Some(t)) = (r.tx_key, kernel_stamp(&r, mode)) {
                    if k == key {
                        return Ok(t);
                    }
                }
                // An older stamp (from a timed-out exchange): skip it.
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if !wait_readable(sock, deadline, true)? {
                    return Err(ClockError::Timeout("no TX timestamp".into()));
                }
            }
            Err(e) => return Err(ClockError::io("recvmsg(MSG_ERRQUEUE)", e)),
        }
    }
}

fn user_realtime_ns() -> Result<u64, ClockError> {
    now_ns(ClockId::Realtime)
}

/// Send, then get the send's realtime stamp (kernel TX stamp or user).
/// `sent` counts datagrams sent on the socket (the OPT_ID key).
fn send_stamped(
    sock: &UdpSocket,
    msg: &[u8],
    to: Option<SocketAddr>,
    mode: StampMode,
    sent: &mut u32,
    deadline: Instant,
) -> Result<u64, ClockError> {
    let user = if mode == StampMode::User {
        Some(user_realtime_ns()?)
    } else {
        None
    };
    let r = match to {
        Some(a) => sock.send_to(msg, a),
        None => sock.send(msg),
    };
    r.map_err(|e| ClockError::io("send", e))?;
    let key = *sent;
    *sent = sent.wrapping_add(1);
    match user {
        Some(t) => Ok(t),
        None => tx_stamp(sock, key, mode, deadline),
    }
}

/// Receive one protocol message with its realtime RX stamp.
fn recv_message(
    sock: &UdpSocket,
    mode: StampMode,
    deadline: Instant,
) -> Result<Option<(Message, u64, Option<SocketAddr>)>, ClockError> {
    let mut buf = [0u8; 128];
    loop {
        match recv_stamped(sock, &mut buf, false) {
            Ok(r) => {
                let t = match mode {
                    StampMode::User => user_realtime_ns()?,
                    StampMode::Kernel | StampMode::Hardware => match kernel_stamp(&r, mode) {
                        Some(t) => t,
                        None => continue, // no stamp: unusable
                    },
                };
                match Message::decode(&buf[..r.len]) {
                    Ok(m) => return Ok(Some((m, t, r.from))),
                    Err(_) => continue, // garbage is dropped, never fatal
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if !wait_readable(sock, deadline, false)? {
                    return Ok(None);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                return Err(ClockError::io("recv (responder not listening?)", e));
            }
            Err(e) => return Err(ClockError::io("recvmsg", e)),
        }
    }
}

// --- client ---------------------------------------------------------------

/// Client configuration.
#[derive(Debug, Clone)]
pub struct ExchangeConfig {
    /// Exchanges per sample; the one with the smallest delay is used.
    /// 16, as in the prototype that measured 5 ns p99 idle on veth.
    pub burst: usize,
    /// Pause between the exchanges of a burst (0 = back to back).
    pub burst_gap: Duration,
    /// Give up on one exchange after this long.
    pub timeout: Duration,
    /// Test-only clock error of this host's realtime clock.
    pub injection: Option<ErrorInjection>,
    /// Kernel or user-space stamps.
    pub mode: StampMode,
    /// Accept answers from a responder whose clock is not locked.
    pub accept_unsynced: bool,
    /// Send a throw-away datagram just before each request (see
    /// `Kind::Warmup`).
    pub warmup: bool,
    /// Use the hardware stamps of this interface's NIC (mode becomes
    /// [`StampMode::Hardware`]); the interface must have a PHC.
    pub hw_iface: Option<String>,
}

impl Default for ExchangeConfig {
    fn default() -> Self {
        ExchangeConfig {
            burst: 16,
            burst_gap: Duration::ZERO,
            timeout: Duration::from_millis(200),
            injection: None,
            mode: StampMode::Kernel,
            accept_unsynced: false,
            warmup: true,
            hw_iface: None,
        }
    }
}

/// Counters of a client or responder.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ExchangeStats {
    /// Exchanges completed.
    pub completed: u64,
    /// Exchanges that timed out.
    pub timeouts: u64,
    /// Messages ignored (stale sequence, bad format, unsynced responder).
    pub ignored: u64,
}

/// The agent side: a [`ReferenceClock`] whose reference is the responder's
/// global clock.
#[derive(Debug)]
pub struct ExchangeClient {
    sock: UdpSocket,
    server: SocketAddr,
    cfg: ExchangeConfig,
    seq: u64,
    sent: u32,
    stats: ExchangeStats,
    last: Vec<Exchange>,
    rt_map: RealtimeMonoTracker,
    phc_map: Option<PhcMap>,
}

impl ExchangeClient {
    /// Bind an ephemeral port of the right family and connect to `server`.
    pub fn connect(server: SocketAddr, cfg: ExchangeConfig) -> Result<Self, ClockError> {
        let bind: SocketAddr = if server.is_ipv4() {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let sock = UdpSocket::bind(bind).map_err(|e| ClockError::io("bind", e))?;
        Self::from_socket(sock, server, cfg)
    }

    /// Use an existing socket (e.g. bound to a given address or interface).
    pub fn from_socket(
        sock: UdpSocket,
        server: SocketAddr,
        cfg: ExchangeConfig,
    ) -> Result<Self, ClockError> {
        sock.connect(server)
            .map_err(|e| ClockError::io(format!("connect {server}"), e))?;
        let mut cfg = cfg;
        let phc_map = match &cfg.hw_iface {
            Some(iface) => {
                cfg.mode = StampMode::Hardware;
                Some(PhcMap::for_interface(iface)?)
            }
            None => None,
        };
        match cfg.mode {
            StampMode::Kernel => enable_timestamping(&sock, SOFTWARE_FLAGS)?,
            StampMode::Hardware => enable_timestamping(&sock, HARDWARE_FLAGS)?,
            StampMode::User => {}
        }
        Ok(ExchangeClient {
            sock,
            server,
            cfg,
            seq: 0,
            sent: 0,
            stats: ExchangeStats::default(),
            last: Vec::new(),
            rt_map: RealtimeMonoTracker::new()?,
            phc_map,
        })
    }

    /// Counters.
    pub fn stats(&self) -> ExchangeStats {
        self.stats
    }

    /// The exchanges of the last burst (for clock records / debugging).
    pub fn last_burst(&self) -> &[Exchange] {
        &self.last
    }

    /// One exchange: four stamps, t1/t4 on this host's CLOCK_MONOTONIC.
    pub fn exchange_once(&mut self) -> Result<Exchange, ClockError> {
        let r = self.try_exchange();
        match &r {
            Ok(_) => self.stats.completed += 1,
            Err(ClockError::Timeout(_)) => self.stats.timeouts += 1,
            Err(_) => {}
        }
        r
    }

    fn try_exchange(&mut self) -> Result<Exchange, ClockError> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let inj = self.cfg.injection;
        let deadline = Instant::now() + self.cfg.timeout;
        // Realtime → monotonic for this host. The kernel stamps carry the
        // injected error (as a faulty host's would); so do its realtime
        // readings, so the conversion removes it again.
        self.rt_map.refresh()?;
        let map = self.rt_map;
        if let Some(p) = self.phc_map.as_mut() {
            p.refresh()?;
        }
        let phc_map = self.phc_map.as_ref();
        let to_mono = |stamp: u64| match phc_map {
            // A PHC stamp does not depend on this host's realtime clock.
            Some(p) => p.to_mono(stamp),
            None => {
                let approx_mono = map.to_mono(stamp);
                map.to_mono_injected(inject(inj.as_ref(), stamp, approx_mono), inj.as_ref())
            }
        };
        // The reply leaves a stack the request has just warmed, while the
        // request itself would run through cache-cold code after the gap
        // between exchanges: an asymmetry of some 100 ns that no kernel
        // stamp removes. A throw-away datagram first warms the path.
        if self.cfg.warmup {
            let warm = Message {
                kind: Kind::Warmup,
                ..Message::request(seq)
            };
            send_stamped(
                &self.sock,
                &warm.encode(),
                None,
                self.cfg.mode,
                &mut self.sent,
                deadline,
            )?;
        }
        let t1 = send_stamped(
            &self.sock,
            &Message::request(seq).encode(),
            None,
            self.cfg.mode,
            &mut self.sent,
            deadline,
        )?;
        let (mut t2, mut t3, mut t4) = (None, None, None);
        while t2.is_none() || t3.is_none() {
            let Some((m, t, _)) = recv_message(&self.sock, self.cfg.mode, deadline)? else {
                return Err(ClockError::Timeout(format!("exchange {seq}")));
            };
            if m.seq != seq
                || (!self.cfg.accept_unsynced && m.flags & FLAG_SYNCED == 0)
                || m.kind == Kind::Request
                || m.kind == Kind::Warmup
            {
                self.stats.ignored += 1;
                continue;
            }
            match m.kind {
                Kind::Response => {
                    t2 = Some(m.t_ns);
                    t4 = Some(t);
                }
                Kind::FollowUp => t3 = Some(m.t_ns),
                Kind::Request | Kind::Warmup => {}
            }
        }
        match (t2, t3, t4) {
            (Some(t2), Some(t3), Some(t4)) => Ok(Exchange {
                seq,
                t1_ns: to_mono(t1),
                t2_ns: t2,
                t3_ns: t3,
                t4_ns: to_mono(t4),
            }),
            _ => Err(ClockError::Protocol("incomplete exchange".into())),
        }
    }
}

impl Clock for ExchangeClient {
    /// The responder's global time now, estimated from one fresh sample.
    fn now_ns(&mut self) -> Result<u64, ClockError> {
        let s = self.sample()?;
        let mono = now_ns(ClockId::Monotonic)?;
        Ok(s.ref_ns.wrapping_add(mono.wrapping_sub(s.mono_ns)))
    }
    fn name(&self) -> String {
        format!("sink:{}", self.server)
    }
}

impl ReferenceClock for ExchangeClient {
    /// A burst of exchanges; the minimum-delay one becomes the sample.
    /// Fails only if every exchange of the burst failed.
    fn sample(&mut self) -> Result<OffsetSample, ClockError> {
        self.last.clear();
        let mut last_err = None;
        for i in 0..self.cfg.burst.max(1) {
            if i > 0 && !self.cfg.burst_gap.is_zero() {
                std::thread::sleep(self.cfg.burst_gap);
            }
            match self.exchange_once() {
                Ok(x) => self.last.push(x),
                Err(e) => last_err = Some(e),
            }
        }
        match min_delay(&self.last) {
            Some(x) => Ok(x.to_sample()),
            None => Err(last_err.unwrap_or_else(|| ClockError::Timeout("no exchange".into()))),
        }
    }
    /// Software stamps, but in-kernel and minimum-delay filtered: on veth
    /// their error is nanoseconds, so phc2sys' hardware gains fit. Set
    /// `ServoConfig::hardware_timestamps = false` for ptp4l's software gains.
    fn hardware_stamped(&self) -> bool {
        true
    }
}

// --- responder ------------------------------------------------------------

/// The sink side: answers requests with its global clock.
#[derive(Debug)]
pub struct Responder {
    sock: UdpSocket,
    clock: GlobalClock,
    mode: StampMode,
    sent: u32,
    stats: ExchangeStats,
    rt_map: RealtimeMonoTracker,
    phc_map: Option<PhcMap>,
}

impl Responder {
    /// Serve on `sock` (already bound) with `clock` as the master's time.
    /// [`StampMode::Hardware`] needs [`Responder::with_hardware`].
    pub fn new(sock: UdpSocket, clock: GlobalClock, mode: StampMode) -> Result<Self, ClockError> {
        match mode {
            StampMode::Kernel => enable_timestamping(&sock, SOFTWARE_FLAGS)?,
            StampMode::Hardware => {
                return Err(ClockError::Protocol(
                    "hardware stamps need the NIC's PHC: use Responder::with_hardware".into(),
                ))
            }
            StampMode::User => {}
        }
        Ok(Responder {
            sock,
            clock,
            mode,
            sent: 0,
            stats: ExchangeStats::default(),
            rt_map: RealtimeMonoTracker::new()?,
            phc_map: None,
        })
    }

    /// Serve with the hardware stamps of the NIC whose PHC `phc` maps.
    pub fn with_hardware(
        sock: UdpSocket,
        clock: GlobalClock,
        phc: PhcMap,
    ) -> Result<Self, ClockError> {
        enable_timestamping(&sock, HARDWARE_FLAGS)?;
        Ok(Responder {
            sock,
            clock,
            mode: StampMode::Hardware,
            sent: 0,
            stats: ExchangeStats::default(),
            rt_map: RealtimeMonoTracker::new()?,
            phc_map: Some(phc),
        })
    }

    /// The local address served.
    pub fn local_addr(&self) -> Result<SocketAddr, ClockError> {
        self.sock
            .local_addr()
            .map_err(|e| ClockError::io("local_addr", e))
    }

    /// Counters.
    pub fn stats(&self) -> ExchangeStats {
        self.stats
    }

    /// A realtime stamp on the global axis (None before the clock has a mapping).
    fn global_of(&mut self, stamp_ns: u64) -> Result<Option<u64>, ClockError> {
        let mono = match self.phc_map.as_mut() {
            Some(p) => {
                p.refresh()?;
                p.to_mono(stamp_ns)
            }
            None => {
                self.rt_map.refresh()?;
                self.rt_map.to_mono(stamp_ns)
            }
        };
        Ok(self.clock.to_global_ns(mono))
    }

    /// Answer at most one request, waiting up to `timeout`. Returns whether
    /// one was answered. Errors of one exchange (a client gone) are counted,
    /// not returned, so the responder keeps serving.
    pub fn serve_one(&mut self, timeout: Duration) -> Result<bool, ClockError> {
        let deadline = Instant::now() + timeout;
        let Some((m, t2_rt, from)) = recv_message(&self.sock, self.mode, deadline)? else {
            return Ok(false);
        };
        let (Kind::Request, Some(from)) = (m.kind, from) else {
            self.stats.ignored += 1;
            return Ok(false);
        };
        let snap = self.clock.snapshot();
        let flags = if snap.is_locked() { FLAG_SYNCED } else { 0 };
        let state = snap.state.map_or(255, |s| s.code() as u32);
        let err = snap.error_estimate_ns.min(u32::MAX as u64) as u32;
        let Some(t2) = self.global_of(t2_rt)? else {
            self.stats.ignored += 1;
            return Ok(false);
        };
        let mut reply = Message {
            kind: Kind::Response,
            flags,
            seq: m.seq,
            t_ns: t2,
            state,
            error_estimate_ns: err,
        };
        let deadline = Instant::now() + timeout.max(Duration::from_millis(100));
        let t3_rt = match send_stamped(
            &self.sock,
            &reply.encode(),
            Some(from),
            self.mode,
            &mut self.sent,
            deadline,
        ) {
            Ok(t) => t,
            Err(_) => {
                self.stats.timeouts += 1;
                return Ok(false);
            }
        };
        reply.kind = Kind::FollowUp;
        reply.t_ns = self.global_of(t3_rt)?.unwrap_or(0);
        // The follow-up's own TX stamp is not needed; drain it so the error
        // queue does not grow.
        if self.mode != StampMode::User {
            let _ = send_stamped(
                &self.sock,
                &reply.encode(),
                Some(from),
                self.mode,
                &mut self.sent,
                deadline,
            );
        } else if let Err(e) = self.sock.send_to(&reply.encode(), from) {
            return Err(ClockError::io("send follow-up", e));
        }
        self.stats.completed += 1;
        Ok(true)
    }

    /// Serve until `shutdown` is set (checked every 100 ms).
    pub fn run(&mut self, shutdown: &AtomicBool) -> Result<ExchangeStats, ClockError> {
        while !shutdown.load(Ordering::Relaxed) {
            self.serve_one(Duration::from_millis(100))?;
        }
        Ok(self.stats)
    }
}

/// Run a responder on its own thread until `shutdown` is set.
pub fn spawn_responder(
    sock: UdpSocket,
    clock: GlobalClock,
    mode: StampMode,
    shutdown: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<Result<ExchangeStats, ClockError>>, ClockError> {
    Responder::new(sock, clock, mode)?.spawn(shutdown)
}

impl Responder {
    /// Run on its own thread until `shutdown` is set.
    pub fn spawn(
        mut self,
        shutdown: Arc<AtomicBool>,
    ) -> Result<std::thread::JoinHandle<Result<ExchangeStats, ClockError>>, ClockError> {
        std::thread::Builder::new()
            .name("clocksync-responder".into())
            .spawn(move || self.run(&shutdown))
            .map_err(|e| ClockError::io("spawn responder", e))
    }
}

#[cfg(test)]
mod tests {

    /// Build a control buffer as recvmsg would for a datagram with software
    /// stamp `sw` and raw hardware stamp `hw`, and parse it.
    fn parse_synthetic(sw: u64, hw: u64) -> Received {
        let ts = |ns: u64| libc::timespec {
            tv_sec: (ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (ns % 1_000_000_000) as libc::c_long,
        };
        let stamps = [ts(sw), ts(0), ts(hw)];
        let mut control = [0u64; 16];
        // SAFETY: zeroed msghdr is valid; control outlives msg.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_control = control.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE is a pure size computation.
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(size_of_val(&stamps) as u32) } as usize;
        // SAFETY: the buffer holds one cmsg of CMSG_SPACE bytes; we fill its
        // header and payload within that space.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = SO_TIMESTAMPING;
            (*c).cmsg_len = libc::CMSG_LEN(size_of_val(&stamps) as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast(), stamps);
        }
        let mut out = Received {
            len: 0,
            from: None,
            sw_ns: None,
            hw_ns: None,
            tx_key: None,
        };
        // SAFETY: msg describes the well-formed buffer built above.
        unsafe { parse_control(&msg, &mut out) };
        out
    }

    #[test]
    fn hardware_stamps_are_read_from_the_third_timespec() {
        let r = parse_synthetic(1_700_000_000_123_456_789, 37_000_000_987_654_321);
        assert_eq!(r.sw_ns, Some(1_700_000_000_123_456_789));
        assert_eq!(r.hw_ns, Some(37_000_000_987_654_321));
        assert_eq!(kernel_stamp(&r, StampMode::Hardware), r.hw_ns);
        assert_eq!(kernel_stamp(&r, StampMode::Kernel), r.sw_ns);
        // A NIC without hardware stamps leaves ts[2] zero: no stamp.
        let r = parse_synthetic(5_000_000_000, 0);
        assert_eq!((r.sw_ns, r.hw_ns), (Some(5_000_000_000), None));
    }

    #[test]
    fn phc_stamps_map_to_the_monotonic_instant() {
        use crate::sim::{SimConfig, SimPhc};
        // A PHC 37 s ahead (TAI vs UTC-ish), read without noise.
        let cfg = SimConfig {
            initial_offset_ns: 37_000_000_000,
            freq_error_ppm: 0.0,
            wander_ppb: 0.0,
            read_jitter_ns: 0,
            asymmetry_ns: 0,
            ..SimConfig::parse("").unwrap()
        };
        let sim = SimPhc::new(cfg.clone());
        let truth = |m: u64| sim.true_ref_ns(m);
        let probe = SimPhc::new(cfg);
        let mut map = PhcMap::new(Box::new(probe)).unwrap();
        map.refresh().unwrap();
        // A NIC stamp taken at monotonic instant m is the PHC's time then.
        for m in [1_000_000_000u64, 1_000_500_000] {
            let back = map.to_mono(truth(m));
            let err = back as i64 - m as i64;
            assert!(
                err.abs() < 5_000,
                "PHC stamp of {m} maps to {back} ({err} ns off)"
            );
        }
    }

    #[test]
    fn hardware_mode_on_an_interface_without_a_phc_says_so() {
        let cfg = ExchangeConfig {
            hw_iface: Some("lo".into()),
            ..Default::default()
        };
        let e = ExchangeClient::connect("127.0.0.1:9".parse().unwrap(), cfg).unwrap_err();
        assert!(e.to_string().contains("lo"), "{e}");
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(Responder::new(sock, GlobalClock::fixed(0), StampMode::Hardware).is_err());
    }

    use super::*;

    #[test]
    fn message_round_trip_and_rejects() {
        let m = Message {
            kind: Kind::FollowUp,
            flags: FLAG_SYNCED,
            seq: 0x0102_0304_0506_0708,
            t_ns: 42,
            state: 3,
            error_estimate_ns: 17,
        };
        let b = m.encode();
        assert_eq!(&b[0..4], b"CSX1");
        assert_eq!(b[5], 3);
        assert_eq!(Message::decode(&b).unwrap(), m);
        assert!(Message::decode(&b[..39]).is_err());
        let mut bad = b;
        bad[0] = b'X';
        assert!(Message::decode(&bad).is_err());
        let mut bad = b;
        bad[4] = 2;
        assert!(Message::decode(&bad).is_err());
        let mut bad = b;
        bad[5] = 9;
        assert!(Message::decode(&bad).is_err());
    }

    #[test]
    fn offset_and_delay_from_four_stamps() {
        // Responder 1000 ns ahead, 300 ns each way, held 50 ns.
        let x = Exchange {
            seq: 1,
            t1_ns: 10_000,
            t2_ns: 11_300,
            t3_ns: 11_350,
            t4_ns: 10_650,
        };
        assert_eq!(x.offset_ns(), 1000);
        assert_eq!(x.delay_ns(), 600);
        let s = x.to_sample();
        assert_eq!(s.mono_ns, 10_325);
        assert_eq!(s.ref_ns, 11_325);
        assert_eq!(s.uncertainty_ns, 300);
        // Asymmetry shows up as half its size in the offset.
        let y = Exchange {
            t2_ns: 11_500,
            t3_ns: 11_550,
            t4_ns: 10_850,
            ..x
        };
        assert_eq!(y.offset_ns(), 1100);
    }

    #[test]
    fn min_delay_picks_the_fastest() {
        let x = |seq, t4_ns| Exchange {
            seq,
            t1_ns: 0,
            t2_ns: 100,
            t3_ns: 110,
            t4_ns,
        };
        let v = [x(1, 400), x(2, 220), x(3, 900)];
        assert_eq!(min_delay(&v).unwrap().seq, 2);
        assert!(min_delay(&[]).is_none());
    }

    #[test]
    fn timestamping_flags_match_the_header() {
        // Values printed from linux/net_tstamp.h and linux/errqueue.h.
        assert_eq!(SOF_TX_HARDWARE, 1);
        assert_eq!(SOF_TX_SOFTWARE, 2);
        assert_eq!(SOF_RX_HARDWARE, 4);
        assert_eq!(SOF_RX_SOFTWARE, 8);
        assert_eq!(SOF_SOFTWARE, 16);
        assert_eq!(SOF_RAW_HARDWARE, 64);
        assert_eq!(SOF_OPT_ID, 128);
        assert_eq!(SOF_OPT_TSONLY, 2048);
        assert_eq!(SO_EE_ORIGIN_TIMESTAMPING, 4);
        assert_eq!(SO_TIMESTAMPING, libc::SO_TIMESTAMPING);
    }
}
