//! The CPU event: what the network stack cost one CPU over one sampling
//! interval (NET_RX and NET_TX softirq time, time in socket send and
//! receive calls), so the trace shows it beside the packets.
//!
//! The agent reads its per-CPU counters periodically and sends one event
//! per CPU per read: deltas since that CPU's previous read, never
//! cumulative counters, so a lost event loses its interval and nothing
//! else (the next one starts where it ended).

use crate::kind::EventKind;

wire_event! {
    /// The network stack's CPU time on one CPU during one interval, ns.
    /// The categories may overlap (a softirq that runs inside a send call
    /// counts in both), so their sum may exceed the interval. Field order
    /// is the wire layout; append only.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct CpuEvent (kind EventKind::CPU, name "CPU", title "CPU cost of the network stack") {
        /// The agent's CLOCK_MONOTONIC when it read the counters, ns.
        pub mono_ns: u64 => U64,
        /// The same instant on the global time axis (TAI ns since the epoch).
        pub global_ns: u64 => U64,
        /// Time since this CPU's previous read, ns (the first read: since
        /// accounting started).
        pub interval_ns: u64 => U64,
        /// Time in NET_RX softirq on this CPU during the interval, ns.
        pub net_rx_ns: u64 => U64,
        /// Time in NET_TX softirq on this CPU during the interval, ns.
        pub net_tx_ns: u64 => U64,
        /// Time in socket send calls on this CPU during the interval, ns.
        pub sock_send_ns: u64 => U64,
        /// Time in socket receive calls on this CPU during the interval, ns.
        pub sock_recv_ns: u64 => U64,
        /// The CPU the counters are of.
        pub cpu: u32 => U32,
    }
}

impl CpuEvent {
    /// The categories in the order summaries list them: (short name,
    /// nanoseconds in the interval).
    pub fn categories(&self) -> [(&'static str, u64); 4] {
        [
            ("NET_RX", self.net_rx_ns),
            ("NET_TX", self.net_tx_ns),
            ("send", self.sock_send_ns),
            ("recv", self.sock_recv_ns),
        ]
    }

    /// `ns` as a percentage of the interval; `None` for an empty interval.
    /// Computed as `ns * 100 / interval` in doubles, which is what the
    /// dissector computes too (same text in both).
    pub fn share_pct(&self, ns: u64) -> Option<f64> {
        (self.interval_ns != 0).then(|| ns as f64 * 100.0 / self.interval_ns as f64)
    }

    /// One-line human summary (pcapng packet comment, the dissector's
    /// Info column): `CPU 1: NET_RX 23.4% NET_TX 0.1% send 5.0% recv 2.2%
    /// of 1.000 s`; `-` for every share of an empty interval.
    pub fn summary(&self) -> String {
        let mut s = format!("CPU {}:", self.cpu);
        for (name, ns) in self.categories() {
            match self.share_pct(ns) {
                Some(p) => s.push_str(&format!(" {name} {p:.1}%")),
                None => s.push_str(&format!(" {name} -")),
            }
        }
        s.push_str(&format!(" of {:.3} s", self.interval_ns as f64 / 1e9));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> CpuEvent {
        CpuEvent {
            mono_ns: 5_000_000_123,
            global_ns: 1_763_000_000_000_000_001,
            interval_ns: 1_000_000_000,
            net_rx_ns: 234_000_000,
            net_tx_ns: 1_000_000,
            sock_send_ns: 50_000_000,
            sock_recv_ns: 22_000_000,
            cpu: 1,
        }
    }

    #[test]
    fn round_trip_at_the_table_offsets() {
        let e = sample();
        let mut b = Vec::new();
        e.encode_body(&mut b);
        assert_eq!(b.len(), CpuEvent::BODY_LEN);
        assert_eq!(CpuEvent::BODY_LEN, 60);
        assert_eq!(CpuEvent::V1_BODY_LEN, CpuEvent::BODY_LEN);
        let l = &CpuEvent::LAYOUT;
        let at = |name: &str| &b[l.field(name).expect("described").range()];
        assert_eq!(at("interval_ns"), &1_000_000_000u64.to_le_bytes());
        assert_eq!(at("sock_recv_ns"), &22_000_000u64.to_le_bytes());
        assert_eq!(at("cpu"), &1u32.to_le_bytes());
        assert_eq!(l.field("cpu").expect("described").offset, 56);
        assert_eq!(CpuEvent::decode_body(&b).unwrap(), e);
        // A newer version's appended fields are skipped.
        b.extend_from_slice(&[0xee; 8]);
        assert_eq!(CpuEvent::decode_body(&b).unwrap(), e);
    }

    #[test]
    fn a_short_body_is_refused() {
        let mut b = Vec::new();
        sample().encode_body(&mut b);
        let err = CpuEvent::decode_body(&b[..CpuEvent::BODY_LEN - 1]).unwrap_err();
        assert_eq!(
            err,
            crate::error::DecodeError::BodyTooShort {
                kind: EventKind::CPU,
                len: 59,
                need: 60
            }
        );
        assert!(CpuEvent::decode_body(&[]).is_err());
    }

    #[test]
    fn summary_gives_each_share_of_the_interval() {
        assert_eq!(
            sample().summary(),
            "CPU 1: NET_RX 23.4% NET_TX 0.1% send 5.0% recv 2.2% of 1.000 s"
        );
        let e = CpuEvent {
            interval_ns: 250_000_000,
            net_rx_ns: 300_000_000, // overlapping categories may exceed it
            cpu: 7,
            ..CpuEvent::default()
        };
        assert_eq!(
            e.summary(),
            "CPU 7: NET_RX 120.0% NET_TX 0.0% send 0.0% recv 0.0% of 0.250 s"
        );
        let empty = CpuEvent {
            net_rx_ns: 5,
            ..CpuEvent::default()
        };
        assert_eq!(empty.share_pct(5), None);
        assert_eq!(
            empty.summary(),
            "CPU 0: NET_RX - NET_TX - send - recv - of 0.000 s"
        );
    }
}
