//! Socket timestamping for the exchange (linuxptp's `sk.c`): turning
//! SO_TIMESTAMPING on, reading TX stamps from the error queue and RX stamps
//! from SCM_TIMESTAMPING control messages, and converting kernel socket
//! addresses. Every `unsafe` of the exchange lives in this folder: here,
//! and in [`filter`], the classic BPF filters that decide which datagrams
//! reach an exchange socket at all.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Instant;

use crate::bracket::{now_ns, ClockId};
use crate::error::ClockError;
use crate::source::exchange::msg::Message;
use crate::source::exchange::stats::ExchangeStats;

pub mod filter;

pub(crate) use filter::{admit_only, admit_requests, kernel_drops};

/// Software stamps only: what veth, loopback and every NIC offer. OPT_ID
/// keys each TX stamp to its datagram; OPT_TSONLY echoes no payload.
pub const SOFTWARE_FLAGS: u32 = libc::SOF_TIMESTAMPING_TX_SOFTWARE
    | libc::SOF_TIMESTAMPING_RX_SOFTWARE
    | libc::SOF_TIMESTAMPING_SOFTWARE
    | libc::SOF_TIMESTAMPING_OPT_ID
    | libc::SOF_TIMESTAMPING_OPT_TSONLY;

/// Hardware stamps only (the NIC's PHC time).
pub const HARDWARE_FLAGS: u32 = libc::SOF_TIMESTAMPING_TX_HARDWARE
    | libc::SOF_TIMESTAMPING_RX_HARDWARE
    | libc::SOF_TIMESTAMPING_RAW_HARDWARE
    | libc::SOF_TIMESTAMPING_OPT_ID
    | libc::SOF_TIMESTAMPING_OPT_TSONLY;

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

/// Enable SO_TIMESTAMPING with `flags` on a socket.
pub fn enable_timestamping(sock: &UdpSocket, flags: u32) -> Result<(), ClockError> {
    let v: libc::c_int = flags as libc::c_int;
    // SAFETY: setsockopt with a valid int option value and its size.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPING,
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

/// A socket address as the kernel wrote it (`recvmsg`, `recvmmsg`), as a
/// std [`SocketAddr`]; `None` for another family or a length too short
/// for its family.
pub fn sockaddr_to_std(ss: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match ss.ss_family as libc::c_int {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family and length say this storage holds a
            // sockaddr_in; read_unaligned needs no alignment.
            let a: libc::sockaddr_in =
                unsafe { std::ptr::read_unaligned((ss as *const libc::sockaddr_storage).cast()) };
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let a: libc::sockaddr_in6 =
                unsafe { std::ptr::read_unaligned((ss as *const libc::sockaddr_storage).cast()) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
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
        from: if errqueue {
            None
        } else {
            sockaddr_to_std(&from, msg.msg_namelen)
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
            let is_ts = h.cmsg_level == libc::SOL_SOCKET && h.cmsg_type == libc::SCM_TIMESTAMPING;
            let is_err = (h.cmsg_level == libc::SOL_IP && h.cmsg_type == libc::IP_RECVERR)
                || (h.cmsg_level == libc::SOL_IPV6 && h.cmsg_type == libc::IPV6_RECVERR);
            if is_ts && payload >= 3 * size_of::<libc::timespec>() {
                // ts[0] software, ts[1] deprecated, ts[2] raw hardware.
                let ts: [libc::timespec; 3] = std::ptr::read_unaligned(data.cast());
                out.sw_ns = timespec_ns(&ts[0]);
                out.hw_ns = timespec_ns(&ts[2]);
            } else if is_err && payload >= size_of::<libc::sock_extended_err>() {
                let e: libc::sock_extended_err = std::ptr::read_unaligned(data.cast());
                if e.ee_errno == libc::ENOMSG as u32
                    && e.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING
                {
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
                    return Err(ClockError::Timeout("a TX timestamp"));
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
pub(crate) fn send_stamped(
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

/// Most datagrams read away before one exchange: a full default receive
/// queue holds about 300 small ones, so this empties it with room to
/// spare, and bounds the work a flood can cause per exchange.
pub(crate) const DRAIN_MAX: usize = 4096;

/// Read away, without waiting, what queued up on `sock` since the last
/// exchange (nothing an exchange still waits for: each one ends with its
/// answers read or timed out), counting each datagram by reason in
/// `stats`, and drop stale TX stamps of timed-out exchanges. The kernel
/// charges TX timestamps to the same receive buffer: junk left there (a
/// burst of forged answers) would starve every later exchange of its TX
/// stamp. Bounded by [`DRAIN_MAX`].
pub(crate) fn drain_queued(
    sock: &UdpSocket,
    auth: Option<&tracer_auth::MacKey>,
    stats: &mut ExchangeStats,
) -> Result<(), ClockError> {
    let mut buf = [0u8; 128];
    for _ in 0..DRAIN_MAX {
        match recv_stamped(sock, &mut buf, false) {
            Ok(r) => {
                stats.drained += 1;
                count_refused(
                    Message::open(&buf[..r.len.min(buf.len())], auth).err(),
                    stats,
                );
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            // An ICMP error of an earlier send (responder not up yet):
            // the exchange itself reports it if it persists.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break,
            Err(e) => return Err(ClockError::io("recvmsg", e)),
        }
    }
    let mut stamp = [0u8; 64];
    for _ in 0..DRAIN_MAX {
        if recv_stamped(sock, &mut stamp, true).is_err() {
            break;
        }
    }
    Ok(())
}

/// Count a message the exchange does not use, by why: `None` is a valid
/// message that no exchange waits for (stale).
fn count_refused(err: Option<ClockError>, stats: &mut ExchangeStats) {
    match err {
        None => stats.ignored += 1,
        Some(ClockError::Message(crate::error::MessageError::Unauthenticated)) => {
            stats.unauthenticated += 1
        }
        Some(_) => stats.malformed += 1,
    }
}

/// Receive one protocol message with its realtime RX stamp. With `auth`,
/// messages whose tag is missing or wrong are dropped and counted in
/// `unauthenticated`; datagrams that are no message, in `malformed`.
pub(crate) fn recv_message(
    sock: &UdpSocket,
    mode: StampMode,
    deadline: Instant,
    auth: Option<&tracer_auth::MacKey>,
    stats: &mut ExchangeStats,
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
                match Message::open(&buf[..r.len.min(buf.len())], auth) {
                    Ok(m) => return Ok(Some((m, t, r.from))),
                    // Garbage is dropped and counted, never fatal.
                    Err(e) => count_refused(Some(e), stats),
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

#[cfg(test)]
mod tests {
    use super::*;

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
            (*c).cmsg_type = libc::SCM_TIMESTAMPING;
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
    fn socket_addresses_convert_both_families() {
        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in.
        let v4 =
            unsafe { &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
        v4.sin_family = libc::AF_INET as libc::sa_family_t;
        v4.sin_port = 7420u16.to_be();
        v4.sin_addr.s_addr = u32::from(Ipv4Addr::new(10, 1, 2, 3)).to_be();
        let len4 = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        assert_eq!(
            sockaddr_to_std(&ss, len4),
            Some("10.1.2.3:7420".parse().unwrap())
        );
        assert_eq!(sockaddr_to_std(&ss, 2), None);

        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in6.
        let v6 =
            unsafe { &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
        v6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        v6.sin6_port = 5201u16.to_be();
        v6.sin6_addr.s6_addr = "fe80::1".parse::<Ipv6Addr>().unwrap().octets();
        v6.sin6_scope_id = 7;
        let len6 = size_of::<libc::sockaddr_in6>() as libc::socklen_t;
        assert_eq!(
            sockaddr_to_std(&ss, len6),
            Some("[fe80::1%7]:5201".parse().unwrap())
        );
        assert_eq!(sockaddr_to_std(&ss, len4), None);
        ss.ss_family = libc::AF_UNIX as libc::sa_family_t;
        assert_eq!(sockaddr_to_std(&ss, len6), None);
    }
}
