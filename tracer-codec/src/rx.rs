//! RX events (wire kind 3): one receive-path tracepoint hit for one skb
//! (or, at the socket-only stages, one socket), with the skb's own RX
//! stamps and its TCP sequence range.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::flow::Flow;
use crate::kind::EventKind;

wire_enum! {
    /// Stage of a received skb, in the order an skb meets them; one per
    /// tracepoint of the RX probe.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum RxStage (table "RxStage") {
        /// `net:netif_receive_skb`: the stack takes the skb from the
        /// driver (after GRO); flow and sequence range from its headers.
        StackEntry = 0 => "STACK_ENTRY",
        /// `tcp:tcp_probe`: established-path TCP input of the segment.
        TcpInput = 1 => "TCP_INPUT",
        /// `sock:sk_data_ready`: the reader is woken; no skb (`end_seq` is
        /// the socket's `rcv_nxt` for TCP).
        DataReady = 2 => "DATA_READY",
        /// `skb:skb_copy_datagram_iovec`: the application copies the skb.
        Copy = 3 => "COPY",
        /// `sock:sock_recv_length`: recvmsg returns; no skb (`end_seq` is
        /// the socket's `copied_seq` for TCP).
        ReadDone = 4 => "READ_DONE",
    }
}

wire_event! {
    /// One RX tracepoint hit. The flow is as the packet travelled:
    /// `saddr`/`sport` the sender (remote), `daddr`/`dport` this host.
    ///
    /// The field order is the wire layout (bincode, fixed-int, little-endian):
    /// do not reorder; append new fields at the end only.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct RxEvent (kind EventKind::RX, name "RX", title "RX stage") {
        /// Raw kernel stamp, `bpf_ktime_get_ns()` (CLOCK_MONOTONIC ns).
        pub mono_ns: u64 => U64,
        /// The same instant on the global time axis (TAI ns since the epoch).
        pub global_ns: u64 => U64,
        /// The skb's software RX stamp (`skb->tstamp`, CLOCK_REALTIME ns
        /// when `tstamp_type` is 0); 0 when unset or at a stage without skb.
        pub rx_stamp_ns: u64 => U64,
        /// `rx_stamp_ns` on the global time axis (through the agent's
        /// REALTIME-MONOTONIC offset at drain time); 0 when there is none.
        pub rx_stamp_global_ns: u64 => U64,
        /// NIC hardware RX stamp (raw PHC ns), else 0.
        pub hw_ns: u64 => U64,
        /// Socket cookie at the socket stages, else 0.
        pub cookie: u64 => U64,
        /// TCP sequence number of the skb's first byte, else 0.
        pub seq: u32 => U32,
        /// TCP sequence number after the skb's last byte (a GRO-merged skb
        /// is one range); at DATA_READY `rcv_nxt`, at READ_DONE `copied_seq`.
        pub end_seq: u32 => U32,
        /// Bytes: the skb's length (STACK_ENTRY, TCP_INPUT), the bytes
        /// copied (COPY) or read (READ_DONE).
        pub len: u32 => U32,
        /// Inode of the network namespace.
        pub netns: u32 => U32,
        /// Receiving interface index, 0 if unknown.
        pub ifindex: u32 => U32,
        /// CPU the tracepoint ran on.
        pub cpu: u32 => U32,
        /// Thread-group id of the reader (COPY, READ_DONE), else 0.
        pub pid: u32 => U32,
        /// Thread id of the reader (COPY, READ_DONE), else 0.
        pub tid: u32 => U32,
        /// [`RxStage`] as its wire value.
        pub stage: u8 => U8 in RxStage::NAMES,
        /// Address family, 4 or 6.
        pub family: u8 => U8 in crate::layout::field::FAMILY,
        /// IP protocol: 6 TCP, 17 UDP, 0 other.
        pub protocol: u8 => U8,
        /// Clock of `rx_stamp_ns` (`skb->tstamp_type`): 0 REALTIME,
        /// 1 MONOTONIC, 2 TAI.
        pub tstamp_type: u8 => U8,
        /// Sender's port (host order).
        pub sport: u16 => U16,
        /// This host's port (host order).
        pub dport: u16 => U16,
        /// Sender's address: IPv4 in the first 4 bytes, or IPv6.
        pub saddr: [u8; 16] => Addr,
        /// This host's address, same convention.
        pub daddr: [u8; 16] => Addr,
        /// Reader's task name, NUL-padded (COPY, READ_DONE).
        pub comm: [u8; 16] => Comm,
    }
}

impl RxEvent {
    /// Decoded stage; `None` for a value this build does not know.
    pub fn stage(&self) -> Option<RxStage> {
        RxStage::from_u8(self.stage)
    }

    /// Reader task name without NUL padding.
    pub fn comm_str(&self) -> String {
        let end = self.comm.iter().position(|&b| b == 0).unwrap_or(16);
        String::from_utf8_lossy(&self.comm[..end]).into_owned()
    }

    /// The flow as typed addresses (sender first).
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

    /// Nanoseconds from the skb's RX stamp to this stage, both on the
    /// global axis; `None` without an RX stamp.
    pub fn since_rx_stamp_ns(&self) -> Option<i64> {
        (self.rx_stamp_global_ns != 0)
            .then(|| self.global_ns.wrapping_sub(self.rx_stamp_global_ns) as i64)
    }

    /// One-line human summary (pcapng packet comment).
    pub fn summary(&self) -> String {
        let stage = self.stage().map(RxStage::name).unwrap_or("?");
        let f = self.flow();
        let mut s = format!(
            "RX {stage} {}:{} > {}:{} len={} cpu={}",
            f.saddr, f.sport, f.daddr, f.dport, self.len, self.cpu
        );
        if self.seq != 0 || self.end_seq != 0 {
            s.push_str(&format!(" seq={}..{}", self.seq, self.end_seq));
        }
        if let Some(d) = self.since_rx_stamp_ns() {
            s.push_str(&format!(" since_rx_stamp={d}ns"));
        }
        if self.pid != 0 {
            s.push_str(&format!(" pid={} comm={}", self.pid, self.comm_str()));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_and_decodes_every_field() {
        let ev = RxEvent {
            mono_ns: 1,
            global_ns: 2_000,
            rx_stamp_ns: 3,
            rx_stamp_global_ns: 1_500,
            hw_ns: 5,
            cookie: 6,
            seq: 7,
            end_seq: 8,
            len: 9,
            netns: 10,
            ifindex: 11,
            cpu: 12,
            pid: 13,
            tid: 14,
            stage: RxStage::Copy as u8,
            family: 4,
            protocol: 6,
            tstamp_type: 0,
            sport: 15,
            dport: 16,
            saddr: [10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            daddr: [10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            comm: *b"iperf3\0\0\0\0\0\0\0\0\0\0",
        };
        let mut b = Vec::new();
        ev.encode_body(&mut b);
        assert_eq!(b.len(), RxEvent::BODY_LEN);
        assert_eq!(RxEvent::decode_body(&b).unwrap(), ev);
        assert_eq!(ev.since_rx_stamp_ns(), Some(500));
        let s = ev.summary();
        assert!(s.contains("RX COPY 10.0.0.1:15 > 10.0.0.2:16"), "{s}");
        assert!(s.contains("seq=7..8") && s.contains("comm=iperf3"), "{s}");
    }

    #[test]
    fn rejects_unknown_stage_and_family() {
        let mut b = Vec::new();
        RxEvent {
            stage: 5,
            family: 4,
            ..Default::default()
        }
        .encode_body(&mut b);
        assert!(RxEvent::decode_body(&b).is_err());
        let mut b = Vec::new();
        RxEvent {
            family: 0,
            ..Default::default()
        }
        .encode_body(&mut b);
        assert!(RxEvent::decode_body(&b).is_err());
    }
}
