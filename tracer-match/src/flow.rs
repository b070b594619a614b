//! A TCP flow in the data's direction (sender -> receiver), the key that
//! joins a sender's TX events to the receiver's RX events.
//!
//! Both ends already write the flow this way round: a TX event's
//! `saddr:sport` is the sending socket's local end, and an RX event's
//! `saddr:sport` is the packet's source (docs/wire-format.md), so no
//! reversal is needed; a TCP RETRANSMIT event on the sender has the
//! socket's local -> remote flow, the same direction again. Addresses are
//! normalised so that a dual-stack socket (`::ffff:a.b.c.d`) and an IPv4
//! header name the same flow.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Flow in the data's direction, addresses in the wire convention (IPv4
/// in the first 4 bytes, the rest zero), ports in host order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    /// Sender address.
    pub src: [u8; 16],
    /// Receiver address.
    pub dst: [u8; 16],
    /// Sender port.
    pub sport: u16,
    /// Receiver port.
    pub dport: u16,
    /// True for IPv6 addresses (after mapping `::ffff:a.b.c.d` to IPv4).
    pub v6: bool,
}

/// An address of a record (`family` 4 or 6) in the normalised form:
/// IPv4 and IPv4-mapped IPv6 both become an IPv4 address in the first
/// four bytes. Returns the address and whether it is (still) IPv6.
pub fn normalise_addr(family: u8, a: &[u8; 16]) -> ([u8; 16], bool) {
    if family != 6 {
        let mut v4 = [0u8; 16];
        v4[..4].copy_from_slice(&a[..4]);
        return (v4, false);
    }
    if a[..10].iter().all(|&b| b == 0) && a[10] == 0xff && a[11] == 0xff {
        let mut v4 = [0u8; 16];
        v4[..4].copy_from_slice(&a[12..16]);
        return (v4, false);
    }
    (*a, true)
}

impl FlowKey {
    /// A flow from a record's fields (source first).
    pub fn new(family: u8, src: &[u8; 16], sport: u16, dst: &[u8; 16], dport: u16) -> Self {
        let (src, v6s) = normalise_addr(family, src);
        let (dst, v6d) = normalise_addr(family, dst);
        FlowKey {
            src,
            dst,
            sport,
            dport,
            v6: v6s || v6d,
        }
    }

    /// The other direction of the same connection.
    pub fn reversed(&self) -> Self {
        FlowKey {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            v6: self.v6,
        }
    }

    fn ip(&self, a: &[u8; 16]) -> IpAddr {
        if self.v6 {
            IpAddr::V6(Ipv6Addr::from(*a))
        } else {
            IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
        }
    }

    /// Sender address.
    pub fn src_ip(&self) -> IpAddr {
        self.ip(&self.src)
    }

    /// Receiver address.
    pub fn dst_ip(&self) -> IpAddr {
        self.ip(&self.dst)
    }
}

impl fmt::Display for FlowKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ep = |ip: IpAddr, port: u16| match ip {
            IpAddr::V6(v6) => format!("[{v6}]:{port}"),
            IpAddr::V4(v4) => format!("{v4}:{port}"),
        };
        write!(
            f,
            "{} > {}",
            ep(self.src_ip(), self.sport),
            ep(self.dst_ip(), self.dport)
        )
    }
}

/// Sequence numbers of one flow, unwrapped to 64 bits so ranges compare
/// and sort across a wrap of the 32-bit space. Every value is placed
/// within ±2^31 of the previous one, which holds for the events of one
/// flow inside a matching window.
#[derive(Debug, Clone, Copy)]
pub struct SeqUnwrap {
    last: Option<(u32, i64)>,
}

/// Where the first value of a flow is placed: far from 0 both ways.
const SEQ_ORIGIN: i64 = 1 << 40;

impl Default for SeqUnwrap {
    fn default() -> Self {
        Self::new()
    }
}

impl SeqUnwrap {
    /// No value seen yet.
    pub fn new() -> Self {
        SeqUnwrap { last: None }
    }

    /// The 64-bit value of `seq`, relative to the previous one.
    pub fn ext(&mut self, seq: u32) -> i64 {
        let e = match self.last {
            None => SEQ_ORIGIN + i64::from(seq),
            Some((s, e)) => e + i64::from(seq.wrapping_sub(s) as i32),
        };
        self.last = Some((seq, e));
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: [u8; 4]) -> [u8; 16] {
        let mut r = [0u8; 16];
        r[..4].copy_from_slice(&a);
        r
    }

    #[test]
    fn mapped_v6_and_v4_are_one_flow() {
        let mut m = [0u8; 16];
        m[10] = 0xff;
        m[11] = 0xff;
        m[12..].copy_from_slice(&[10, 0, 0, 1]);
        let mut n = m;
        n[15] = 2;
        let a = FlowKey::new(6, &m, 40000, &n, 5201);
        let b = FlowKey::new(4, &v4([10, 0, 0, 1]), 40000, &v4([10, 0, 0, 2]), 5201);
        assert_eq!(a, b);
        assert_eq!(b.to_string(), "10.0.0.1:40000 > 10.0.0.2:5201");
        assert_eq!(b.reversed().reversed(), b);
        assert_ne!(b.reversed(), b);
        // Garbage after an IPv4 address does not split a flow.
        let mut g = v4([10, 0, 0, 1]);
        g[9] = 7;
        assert_eq!(FlowKey::new(4, &g, 40000, &v4([10, 0, 0, 2]), 5201), b);
        let six: [u8; 16] = "fd00::1".parse::<Ipv6Addr>().unwrap().octets();
        let f = FlowKey::new(6, &six, 1, &six, 2);
        assert!(f.v6);
        assert_eq!(f.to_string(), "[fd00::1]:1 > [fd00::1]:2");
    }

    #[test]
    fn unwrap_crosses_the_wrap() {
        let mut u = SeqUnwrap::new();
        let a = u.ext(u32::MAX - 10);
        let b = u.ext(5);
        assert_eq!(b - a, 16);
        let c = u.ext(u32::MAX - 100);
        assert_eq!(c - a, -90);
    }
}
