//! The TCP event: one TCP or socket-memory anomaly (retransmission, reset
//! sent or received, receive queue full, memory limit exceeded) of one
//! socket, with its flow from the socket's side (local, remote).

use std::net::SocketAddr;

use crate::drop::{wire_addr, FLOW_FAMILY};
use crate::kind::EventKind;

wire_enum! {
    /// What happened, one per tracepoint.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum TcpAnomaly (table "TcpAnomaly") {
        /// `tcp:tcp_retransmit_skb`: a segment sent again; `seq`..`end_seq`.
        Retransmit = 0 => "RETRANSMIT",
        /// `tcp:tcp_send_reset`: this host sent a RST; `detail` is the
        /// kernel's `enum sk_rst_reason`.
        ResetSent = 1 => "RESET_SENT",
        /// `tcp:tcp_receive_reset`: the peer reset the connection.
        ResetReceived = 2 => "RESET_RECEIVED",
        /// `sock:sock_rcvqueue_full`: an skb did not fit the receive
        /// buffer (dropped); `detail` is its length.
        RcvqueueFull = 3 => "RCVQUEUE_FULL",
        /// `sock:sock_exceed_buf_limit`: the protocol's memory limit was
        /// hit; `detail` 0 on send, 1 on receive.
        ExceedBufLimit = 4 => "EXCEED_BUF_LIMIT",
    }
}

wire_event! {
    /// One TCP anomaly. Field order is the wire layout; append only.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct TcpEvent (kind EventKind::TCP, name "TCP", title "TCP anomaly") {
        /// Raw kernel stamp, `bpf_ktime_get_ns()` (CLOCK_MONOTONIC ns).
        pub mono_ns: u64 => U64,
        /// The same instant on the global time axis (TAI ns since the epoch).
        pub global_ns: u64 => U64,
        /// Socket cookie, 0 for a reset sent without a socket.
        pub cookie: u64 => U64,
        /// RETRANSMIT: sequence number of the segment's first byte, else 0.
        pub seq: u32 => U32,
        /// RETRANSMIT: sequence number after its last byte, else 0.
        pub end_seq: u32 => U32,
        /// Inode of the socket's network namespace.
        pub netns: u32 => U32,
        /// CPU it happened on.
        pub cpu: u32 => U32,
        /// Per anomaly: retransmit error (0 sent), reset reason, the
        /// length of the skb that did not fit, or 0 send / 1 receive.
        pub detail: u32 => U32,
        /// [`TcpAnomaly`] as its wire value.
        pub anomaly: u8 => U8 in TcpAnomaly::NAMES,
        /// Address family, 4 or 6 (0 when unknown).
        pub family: u8 => U8 in FLOW_FAMILY,
        /// TCP state of the socket (1 ESTABLISHED, ...), 0 without one.
        pub state: u8 => U8,
        /// Local port (host order).
        pub sport: u16 => U16,
        /// Remote port (host order).
        pub dport: u16 => U16,
        /// Local address: IPv4 in the first 4 bytes, or IPv6.
        pub saddr: [u8; 16] => Addr,
        /// Remote address, same convention.
        pub daddr: [u8; 16] => Addr,
    }
}

impl TcpEvent {
    /// Decoded anomaly; `None` for a value this build does not know.
    pub fn anomaly(&self) -> Option<TcpAnomaly> {
        TcpAnomaly::from_u8(self.anomaly)
    }

    /// One-line human summary (pcapng packet comment).
    pub fn summary(&self) -> String {
        let what = self.anomaly().map_or("?", TcpAnomaly::name);
        let mut s = format!("TCP {what}");
        if self.family != 0 {
            s.push_str(&format!(
                " {} > {}",
                SocketAddr::new(wire_addr(self.family, &self.saddr), self.sport),
                SocketAddr::new(wire_addr(self.family, &self.daddr), self.dport)
            ));
        }
        if self.anomaly() == Some(TcpAnomaly::Retransmit) {
            s.push_str(&format!(" seq={}..{}", self.seq, self.end_seq));
        }
        s.push_str(&format!(" cookie={} cpu={}", self.cookie, self.cpu));
        s
    }
}

impl Default for TcpEvent {
    fn default() -> Self {
        TcpEvent {
            mono_ns: 0,
            global_ns: 0,
            cookie: 0,
            seq: 0,
            end_seq: 0,
            netns: 0,
            cpu: 0,
            detail: 0,
            anomaly: 0,
            family: 4,
            state: 0,
            sport: 0,
            dport: 0,
            saddr: [0; 16],
            daddr: [0; 16],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_summary() {
        let mut e = TcpEvent {
            cookie: 5,
            seq: 100,
            end_seq: 1548,
            sport: 40000,
            dport: 5201,
            ..Default::default()
        };
        e.saddr[..4].copy_from_slice(&[10, 0, 0, 1]);
        e.daddr[..4].copy_from_slice(&[10, 0, 0, 2]);
        let mut b = Vec::new();
        e.encode_body(&mut b);
        assert_eq!(TcpEvent::decode_body(&b).unwrap(), e);
        assert_eq!(
            e.summary(),
            "TCP RETRANSMIT 10.0.0.1:40000 > 10.0.0.2:5201 seq=100..1548 cookie=5 cpu=0"
        );
        e.anomaly = TcpAnomaly::ResetReceived as u8;
        assert_eq!(
            e.summary(),
            "TCP RESET_RECEIVED 10.0.0.1:40000 > 10.0.0.2:5201 cookie=5 cpu=0"
        );
        e.anomaly = TcpAnomaly::ALL.len() as u8;
        let mut b = Vec::new();
        e.encode_body(&mut b);
        assert!(TcpEvent::decode_body(&b).is_err());
    }
}
