//! The DROP event: one skb the kernel freed as a drop (`skb:kfree_skb`
//! with a drop reason), with the reason and the freeing location both as
//! numbers and as the names the agent resolved on its host.
//!
//! Why the names travel in every event: drop reasons are numbered by each
//! kernel's `enum skb_drop_reason` (numbers move between versions) and a
//! location is an address only that host's `/proc/kallsyms` resolves. The
//! agent resolves both where they are valid and puts the text beside the
//! number, so a sink, a pcapng and the dissector need no side table and a
//! reader of any single frame sees the name.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::kind::EventKind;
use crate::layout::field::NameTable;

/// Size of [`DropEvent::reason_name`].
pub const DROP_REASON_NAME_LEN: usize = 32;
/// Size of [`DropEvent::location_sym`].
pub const DROP_LOCATION_SYM_LEN: usize = 48;

/// Address family of a drop's flow: IP packets carry 4 or 6; 0 when the
/// skb held no IP packet (the flow fields are then 0).
pub const FLOW_FAMILY: NameTable = NameTable {
    name: "FlowFamily",
    entries: &[(0, "none"), (4, "IPv4"), (6, "IPv6")],
};

wire_event! {
    /// One dropped skb. Field order is the wire layout; append only.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct DropEvent (kind EventKind::DROP, name "DROP", title "skb drop") {
        /// Raw kernel stamp, `bpf_ktime_get_ns()` (CLOCK_MONOTONIC ns).
        pub mono_ns: u64 => U64,
        /// The same instant on the global time axis (TAI ns since the epoch).
        pub global_ns: u64 => U64,
        /// Kernel address of the code that freed the skb (`location`).
        pub location: u64 => U64,
        /// `enum skb_drop_reason` value, as the sending host's kernel numbers it.
        pub reason: u32 => U32,
        /// Inode of the network namespace the drop happened in (0 when
        /// every namespace is traced and the skb had neither device nor socket).
        pub netns: u32 => U32,
        /// Interface index of the skb's device, 0 without one.
        pub ifindex: u32 => U32,
        /// CPU the drop happened on.
        pub cpu: u32 => U32,
        /// `skb->len`, bytes.
        pub len: u32 => U32,
        /// `skb->protocol` (EtherType, host order).
        pub protocol: u16 => U16,
        /// Address family of the flow (0: not an IP packet).
        pub family: u8 => U8 in FLOW_FAMILY,
        /// IP protocol number (6 TCP, 17 UDP, ...), 0 when not IP.
        pub l4proto: u8 => U8,
        /// Source port of the packet (TCP or UDP, host order), else 0.
        pub sport: u16 => U16,
        /// Destination port, same convention.
        pub dport: u16 => U16,
        /// Source address of the packet: IPv4 in the first 4 bytes, or IPv6.
        pub saddr: [u8; 16] => Addr,
        /// Destination address, same convention.
        pub daddr: [u8; 16] => Addr,
        /// Reason name from the sending host's kernel BTF without the
        /// `SKB_DROP_REASON_` prefix (e.g. `NO_SOCKET`), NUL-padded; empty
        /// when that kernel does not name the value.
        pub reason_name: [u8; DROP_REASON_NAME_LEN] => Comm,
        /// `location` symbolized through the host's /proc/kallsyms
        /// (`symbol+0xoff`), NUL-padded; empty when unresolved.
        pub location_sym: [u8; DROP_LOCATION_SYM_LEN] => Comm,
    }
}

/// `s` NUL-padded (cut to `N` bytes, at a char boundary).
pub fn padded<const N: usize>(s: &str) -> [u8; N] {
    let mut out = [0u8; N];
    let mut end = s.len().min(N);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    out[..end].copy_from_slice(&s.as_bytes()[..end]);
    out
}

/// The text before the first NUL of a NUL-padded field.
pub fn unpadded(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// An address field in the wire convention as a typed address.
pub(crate) fn wire_addr(family: u8, a: &[u8; 16]) -> IpAddr {
    if family == 6 {
        IpAddr::V6(Ipv6Addr::from(*a))
    } else {
        IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
    }
}

impl DropEvent {
    /// The reason's name, or `reason <n>` when the host had none for it.
    pub fn reason_str(&self) -> String {
        let n = unpadded(&self.reason_name);
        if n.is_empty() {
            format!("reason {}", self.reason)
        } else {
            n
        }
    }

    /// The symbolized location, or the address in hex.
    pub fn location_str(&self) -> String {
        let s = unpadded(&self.location_sym);
        if s.is_empty() {
            format!("{:#x}", self.location)
        } else {
            s
        }
    }

    /// One-line human summary (pcapng packet comment).
    pub fn summary(&self) -> String {
        let mut s = format!("DROP {} at {}", self.reason_str(), self.location_str());
        if self.family != 0 {
            let (sa, da) = (
                wire_addr(self.family, &self.saddr),
                wire_addr(self.family, &self.daddr),
            );
            let proto = match self.l4proto {
                6 => "TCP".to_owned(),
                17 => "UDP".to_owned(),
                p => format!("proto {p}"),
            };
            // SocketAddr brackets IPv6 addresses, as the dissector does.
            s.push_str(&format!(
                " {proto} {} > {}",
                SocketAddr::new(sa, self.sport),
                SocketAddr::new(da, self.dport)
            ));
        }
        s.push_str(&format!(
            " len={} ifindex={} cpu={}",
            self.len, self.ifindex, self.cpu
        ));
        s
    }
}

impl Default for DropEvent {
    fn default() -> Self {
        DropEvent {
            mono_ns: 0,
            global_ns: 0,
            location: 0,
            reason: 0,
            netns: 0,
            ifindex: 0,
            cpu: 0,
            len: 0,
            protocol: 0,
            family: 0,
            l4proto: 0,
            sport: 0,
            dport: 0,
            saddr: [0; 16],
            daddr: [0; 16],
            reason_name: [0; DROP_REASON_NAME_LEN],
            location_sym: [0; DROP_LOCATION_SYM_LEN],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> DropEvent {
        let mut e = DropEvent {
            global_ns: 7,
            location: 0xffff_ffff_8100_0000,
            reason: 3,
            family: 4,
            l4proto: 17,
            sport: 40000,
            dport: 9,
            len: 28,
            ifindex: 2,
            reason_name: padded("NO_SOCKET"),
            location_sym: padded("__udp4_lib_rcv+0x5c1"),
            ..Default::default()
        };
        e.saddr[..4].copy_from_slice(&[10, 0, 0, 1]);
        e.daddr[..4].copy_from_slice(&[10, 0, 0, 2]);
        e
    }

    #[test]
    fn encodes_and_decodes_round_trip() {
        let e = sample();
        let mut b = Vec::new();
        e.encode_body(&mut b);
        assert_eq!(b.len(), DropEvent::BODY_LEN);
        assert_eq!(DropEvent::decode_body(&b).unwrap(), e);
    }

    #[test]
    fn a_family_outside_the_table_is_refused() {
        let mut e = sample();
        e.family = 5;
        let mut b = Vec::new();
        e.encode_body(&mut b);
        assert!(matches!(
            DropEvent::decode_body(&b),
            Err(crate::error::DecodeError::BadField {
                field: "family",
                ..
            })
        ));
    }

    #[test]
    fn summary_names_reason_location_and_flow() {
        assert_eq!(
            sample().summary(),
            "DROP NO_SOCKET at __udp4_lib_rcv+0x5c1 UDP 10.0.0.1:40000 > 10.0.0.2:9 len=28 ifindex=2 cpu=0"
        );
        let mut e = sample();
        e.reason_name = [0; DROP_REASON_NAME_LEN];
        e.location_sym = [0; DROP_LOCATION_SYM_LEN];
        e.family = 0;
        assert_eq!(
            e.summary(),
            "DROP reason 3 at 0xffffffff81000000 len=28 ifindex=2 cpu=0"
        );
    }

    #[test]
    fn padding_cuts_at_char_boundaries() {
        let p: [u8; 4] = padded("abcdé");
        assert_eq!(&p, b"abcd");
        let p: [u8; 5] = padded("abcdé");
        assert_eq!(&p, b"abcd\0");
        assert_eq!(unpadded(&padded::<8>("xy")), "xy");
        assert_eq!(unpadded(b"12345678"), "12345678");
    }
}
