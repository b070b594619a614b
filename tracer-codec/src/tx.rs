//! The TX event: one BPF TX timestamping callback for one tagged skb, and
//! the stages of an skb's life in the kernel's TX path.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::flow::Flow;
use crate::kind::EventKind;

wire_enum! {
    /// Stage of an skb's life in the kernel's TX path, one per BPF TX
    /// timestamping callback (`BPF_SOCK_OPS_TSTAMP_*_CB`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum TxStage (table "TxStage") {
        /// `tcp_sendmsg` tagged the skb (BPF_SOCK_OPS_TSTAMP_SENDMSG_CB).
        Sendmsg = 0 => "SENDMSG",
        /// Entered the qdisc / dev_queue_xmit (BPF_SOCK_OPS_TSTAMP_SCHED_CB).
        Sched = 1 => "SCHED",
        /// Driver handed it to the device, software stamp (TSTAMP_SND_SW_CB).
        SndSw = 2 => "SND_SW",
        /// NIC hardware TX stamp (TSTAMP_SND_HW_CB); `hw_ns` holds it.
        SndHw = 3 => "SND_HW",
        /// Peer acknowledged the last byte (TSTAMP_ACK_CB).
        Ack = 4 => "ACK",
    }
}

wire_event! {
    /// One BPF TX timestamping callback for one tagged skb.
    ///
    /// The field order is the wire layout (bincode, fixed-int, little-endian):
    /// do not reorder; append new fields at the end only. Version-1 bodies
    /// (agents of older builds) end after `comm`: their `end_seq` and
    /// `tx_flags` read as 0 (no range known).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct TxEvent (kind EventKind::TX, name "TX", title "TX timestamp", v1_fields 17) {
        /// Raw kernel stamp, `bpf_ktime_get_ns()` (CLOCK_MONOTONIC ns).
        pub mono_ns: u64 => U64,
        /// The same instant on the global time axis (TAI ns since the epoch).
        pub global_ns: u64 => U64,
        /// NIC hardware stamp (SND_HW only, raw PHC ns), else 0.
        pub hw_ns: u64 => U64,
        /// Socket cookie (`bpf_get_socket_cookie`), unique per socket per boot.
        pub cookie: u64 => U64,
        /// `skb_shinfo(skb)->tskey`: for TCP, sequence number of the skb's last byte.
        pub tskey: u32 => U32,
        /// TCP sequence number of the skb's first byte at this callback when
        /// `tx_flags` has RANGE (version 1: at SENDMSG and ACK only, else 0).
        pub seq: u32 => U32,
        /// Inode of the socket's network namespace.
        pub netns: u32 => U32,
        /// CPU the callback ran on.
        pub cpu: u32 => U32,
        /// Thread-group id of the sender (SENDMSG only, else 0).
        pub pid: u32 => U32,
        /// Thread id of the sender (SENDMSG only, else 0).
        pub tid: u32 => U32,
        /// [`TxStage`] as its wire value.
        pub stage: u8 => U8 in TxStage::NAMES,
        /// Address family, 4 or 6.
        pub family: u8 => U8 in crate::layout::field::FAMILY,
        /// Local port (host order).
        pub sport: u16 => U16,
        /// Remote port (host order).
        pub dport: u16 => U16,
        /// Local address: IPv4 in the first 4 bytes, or IPv6.
        pub saddr: [u8; 16] => Addr,
        /// Remote address, same convention.
        pub daddr: [u8; 16] => Addr,
        /// Sender's task name, NUL-padded (SENDMSG only).
        pub comm: [u8; 16] => Comm,
        /// TCP sequence number after the skb's last byte at this callback
        /// (with `seq`: the bytes the skb really held then, as the
        /// receiver's RX `end_seq` counts them) when `tx_flags` has RANGE.
        pub end_seq: u32 => U32,
        /// Bits: 1 RANGE (`seq`..`end_seq` read from the skb at this
        /// callback), 2 SENT (SENDMSG only: the kernel tagged an skb it had
        /// already transmitted, so no first transmission of it is stamped).
        pub tx_flags: u8 => U8,
    }
}

/// [`TxEvent::tx_flags`] bit: `seq`..`end_seq` is the range the skb held
/// at this callback.
pub const TX_FLAG_RANGE: u8 = 1;
/// [`TxEvent::tx_flags`] bit, at SENDMSG: the tagged skb had already been
/// sent (`tcp_tx_timestamp()` falls back to the retransmit queue's tail when
/// the whole write went out inside the call), so its SCHED/SND_SW, if any,
/// belong to a retransmission.
pub const TX_FLAG_SENT: u8 = 2;

impl TxEvent {
    /// Decoded stage; `None` for a value this build does not know.
    pub fn stage(&self) -> Option<TxStage> {
        TxStage::from_u8(self.stage)
    }

    /// The bytes the skb held at this callback, `[seq, end_seq)`, when
    /// recorded (version-2 bodies).
    pub fn range(&self) -> Option<(u32, u32)> {
        (self.tx_flags & TX_FLAG_RANGE != 0).then_some((self.seq, self.end_seq))
    }

    /// At SENDMSG: the kernel tagged an skb it had already transmitted.
    pub fn tagged_sent(&self) -> bool {
        self.tx_flags & TX_FLAG_SENT != 0
    }

    /// Sender task name without NUL padding.
    pub fn comm_str(&self) -> String {
        let end = self.comm.iter().position(|&b| b == 0).unwrap_or(16);
        String::from_utf8_lossy(&self.comm[..end]).into_owned()
    }

    /// The flow as typed addresses.
    pub fn flow(&self) -> Flow {
        let addr = |a: &[u8; 16]| -> IpAddr {
            if self.family == 6 {
                IpAddr::V6(Ipv6Addr::from(*a))
            } else {
                IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
            }
        };
        Flow {
            saddr: addr(&self.saddr),
            daddr: addr(&self.daddr),
            sport: self.sport,
            dport: self.dport,
        }
    }

    /// Store a flow's addresses in the wire convention.
    pub fn set_flow(&mut self, flow: &Flow) {
        let put = |ip: IpAddr| -> [u8; 16] {
            match ip {
                IpAddr::V4(v4) => {
                    let mut a = [0u8; 16];
                    a[..4].copy_from_slice(&v4.octets());
                    a
                }
                IpAddr::V6(v6) => v6.octets(),
            }
        };
        self.family = if flow.saddr.is_ipv6() { 6 } else { 4 };
        self.saddr = put(flow.saddr);
        self.daddr = put(flow.daddr);
        self.sport = flow.sport;
        self.dport = flow.dport;
    }

    /// One-line human summary (pcapng packet comment).
    pub fn summary(&self) -> String {
        let stage = self.stage().map(TxStage::name).unwrap_or("?");
        let f = self.flow();
        let mut s = format!(
            "{stage} {}:{} > {}:{} cookie={} tskey={} cpu={}",
            f.saddr, f.sport, f.daddr, f.dport, self.cookie, self.tskey, self.cpu
        );
        if self.pid != 0 {
            s.push_str(&format!(" pid={} comm={}", self.pid, self.comm_str()));
        }
        s
    }
}

impl Default for TxEvent {
    fn default() -> Self {
        TxEvent {
            mono_ns: 0,
            global_ns: 0,
            hw_ns: 0,
            cookie: 0,
            tskey: 0,
            seq: 0,
            netns: 0,
            cpu: 0,
            pid: 0,
            tid: 0,
            stage: 0,
            family: 4,
            sport: 0,
            dport: 0,
            saddr: [0; 16],
            daddr: [0; 16],
            comm: [0; 16],
            end_seq: 0,
            tx_flags: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_len_matches_layout() {
        let mut out = Vec::new();
        TxEvent::default().encode_body(&mut out);
        assert_eq!(out.len(), TxEvent::BODY_LEN);
    }

    /// Bytes of field `name` of an encoded body, located by the layout table.
    fn at<'a>(layout: &crate::layout::field::EventLayout, b: &'a [u8], name: &str) -> &'a [u8] {
        &b[layout.field(name).expect("described").range()]
    }

    #[test]
    fn fields_sit_where_the_layout_says() {
        let ev = TxEvent {
            mono_ns: 0x0102030405060708,
            global_ns: 0x1112131415161718,
            cookie: 0xAABB,
            tskey: 0xDEADBEEF,
            netns: 0x4030201,
            stage: 4,
            family: 6,
            sport: 0x1234,
            dport: 0x5678,
            comm: *b"iperf3\0\0\0\0\0\0\0\0\0\0",
            ..TxEvent::default()
        };
        let mut b = Vec::new();
        ev.encode_body(&mut b);
        let l = &TxEvent::LAYOUT;
        assert_eq!(at(l, &b, "mono_ns"), &0x0102030405060708u64.to_le_bytes());
        assert_eq!(at(l, &b, "global_ns"), &0x1112131415161718u64.to_le_bytes());
        assert_eq!(at(l, &b, "cookie"), &0xAABBu64.to_le_bytes());
        assert_eq!(at(l, &b, "tskey"), &0xDEADBEEFu32.to_le_bytes());
        assert_eq!(at(l, &b, "netns"), &0x4030201u32.to_le_bytes());
        assert_eq!(at(l, &b, "stage"), &[4]);
        assert_eq!(at(l, &b, "family"), &[6]);
        assert_eq!(at(l, &b, "sport"), &0x1234u16.to_le_bytes());
        assert_eq!(at(l, &b, "dport"), &0x5678u16.to_le_bytes());
        assert_eq!(&at(l, &b, "comm")[..6], b"iperf3");
    }

    #[test]
    fn flow_round_trip_v4_v6() {
        for flow in [
            Flow {
                saddr: "10.0.0.1".parse().unwrap(),
                daddr: "10.0.0.2".parse().unwrap(),
                sport: 40000,
                dport: 5201,
            },
            Flow {
                saddr: "fd00::1".parse().unwrap(),
                daddr: "fd00::2".parse().unwrap(),
                sport: 1,
                dport: 65535,
            },
        ] {
            let mut ev = TxEvent::default();
            ev.set_flow(&flow);
            assert_eq!(ev.flow(), flow);
        }
    }
}
