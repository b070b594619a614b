//! The event model: what one kernel observation carries.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Wire identifier of an event kind. Kinds a decoder does not know are
/// skipped by length, so older sinks survive newer agents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A BPF TX timestamping callback ([`TxEvent`]).
    Tx,
    /// A clock update of the agent's global clock ([`ClockEvent`]).
    Clock,
    /// A receive-path stage ([`crate::RxEvent`]).
    Rx,
    /// An skb dropped by the kernel ([`DropEvent`](crate::DropEvent)).
    Drop,
    /// A TCP anomaly ([`TcpEvent`](crate::TcpEvent)).
    Tcp,
    /// Any kind this build does not know.
    Unknown(u16),
}

impl EventKind {
    /// Kind number of [`TxEvent`] records.
    pub const TX: u16 = 1;
    /// Kind number of [`ClockEvent`] records.
    pub const CLOCK: u16 = 2;
    /// Kind number of [`crate::RxEvent`] records.
    pub const RX: u16 = 3;
    /// Kind number of [`DropEvent`](crate::DropEvent) records.
    pub const DROP: u16 = 4;
    /// Kind number of [`TcpEvent`](crate::TcpEvent) records.
    pub const TCP: u16 = 5;

    /// Kind from its wire number.
    pub fn from_u16(v: u16) -> Self {
        match v {
            Self::TX => EventKind::Tx,
            Self::CLOCK => EventKind::Clock,
            Self::RX => EventKind::Rx,
            Self::DROP => EventKind::Drop,
            Self::TCP => EventKind::Tcp,
            other => EventKind::Unknown(other),
        }
    }

    /// Wire number of this kind.
    pub fn as_u16(self) -> u16 {
        match self {
            EventKind::Tx => Self::TX,
            EventKind::Clock => Self::CLOCK,
            EventKind::Rx => Self::RX,
            EventKind::Drop => Self::DROP,
            EventKind::Tcp => Self::TCP,
            EventKind::Unknown(v) => v,
        }
    }
}

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

wire_enum! {
    /// Which clock an agent's global timestamps come from (datagram
    /// header). Names are lower-case, as on command lines and in pcapng
    /// descriptions.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum ClockSource (table "ClockSource") {
        /// CLOCK_TAI of the agent's own host, mapped from CLOCK_MONOTONIC.
        System = 0 => "system",
        /// A PTP hardware clock disciplining the global clock.
        Phc = 1 => "phc",
        /// The sink's clock through the kernel-stamped two-way exchange.
        Sink = 2 => "sink",
    }
}

wire_enum! {
    /// Servo state of the agent's global clock (datagram header), named
    /// as phc2sys prints it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum ClockState (table "ClockState") {
        /// No usable estimate yet.
        Unlocked = 0 => "UNLOCKED",
        /// The clock was just stepped.
        Jump = 1 => "JUMP",
        /// Tracking.
        Locked = 2 => "LOCKED",
        /// Tracking with a small, steady offset.
        LockedStable = 3 => "LOCKED_STABLE",
        /// The reference moved further or faster than this clock can
        /// explain (the servo's sanity check): the clock runs on its own
        /// frequency and does not follow it. A sign of a forged or broken
        /// reference; the clock event's error estimate says how far the
        /// reference disagrees.
        Holdover = 4 => "HOLDOVER",
    }
}

impl ClockState {
    /// LOCKED or LOCKED_STABLE: the clock follows its reference, so a
    /// cross-host claim may rest on it (HOLDOVER does not: the reference
    /// and the clock disagree).
    pub fn is_locked(self) -> bool {
        matches!(self, ClockState::Locked | ClockState::LockedStable)
    }

    /// [`Self::is_locked`] of a wire value (false for an unknown one).
    pub fn is_locked_code(v: u8) -> bool {
        ClockState::from_u8(v).is_some_and(ClockState::is_locked)
    }
}

/// A TCP flow as the local host sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Flow {
    /// Local address.
    pub saddr: IpAddr,
    /// Remote address.
    pub daddr: IpAddr,
    /// Local port (host order).
    pub sport: u16,
    /// Remote port (host order).
    pub dport: u16,
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
        pub family: u8 => U8 in crate::layout::FAMILY,
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

wire_event! {
    /// One update of an agent's global clock: the raw sample and what the
    /// servo made of it, so a reader can judge (and post-correct) each host's
    /// time. Field order is the wire layout; append only.
    #[derive(Debug, Clone, Copy, PartialEq)]
    pub struct ClockEvent (kind EventKind::CLOCK, name "CLOCK", title "clock update") {
        /// Monotonic instant of the sample (raw kernel clock), ns.
        pub mono_ns: u64 => U64,
        /// The global clock at `mono_ns`, after this update, ns (TAI).
        pub global_ns: u64 => U64,
        /// The reference clock's reading at `mono_ns` (raw sample), ns.
        pub ref_ns: u64 => U64,
        /// `global - reference` at `mono_ns`, before this update, ns.
        pub offset_ns: i64 => I64,
        /// Frequency correction in force after this update, ppb.
        pub freq_ppb: f64 => F64,
        /// Sample delay: read delay of the reference, or the exchange's
        /// round-trip path delay, ns.
        pub delay_ns: u64 => U64,
        /// Uncertainty of the sample (half its bracket), ns.
        pub uncertainty_ns: u64 => U64,
        /// The clock's error estimate after this update, ns.
        pub error_estimate_ns: u64 => U64,
        /// [`ClockSource`] as its wire value.
        pub source: u8 => U8 in ClockSource::NAMES,
        /// [`ClockState`] (servo state) after this update, as its wire value.
        pub state: u8 => U8 in ClockState::NAMES,
    }
}

impl ClockEvent {
    /// One-line summary, phc2sys style.
    pub fn summary(&self) -> String {
        format!(
            "CLOCK {} {} offset {} ns freq {:+.1} ppb delay {} ns err {} ns",
            ClockSource::from_u8(self.source).map_or("?", ClockSource::name),
            ClockState::from_u8(self.state).map_or("?", ClockState::name),
            self.offset_ns,
            self.freq_ppb,
            self.delay_ns,
            self.error_estimate_ns
        )
    }
}

/// A decoded event.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A TX timestamping callback.
    Tx(TxEvent),
    /// A clock update.
    Clock(ClockEvent),
    /// A receive-path stage.
    Rx(crate::RxEvent),
    /// A dropped skb.
    Drop(crate::DropEvent),
    /// A TCP anomaly.
    Tcp(crate::TcpEvent),
    /// A kind this build does not know; kept as its raw body length.
    Unknown {
        /// Wire kind number.
        kind: u16,
        /// Body length in bytes.
        len: usize,
    },
}

impl Event {
    /// The event's kind.
    pub fn kind(&self) -> EventKind {
        match self {
            Event::Tx(_) => EventKind::Tx,
            Event::Clock(_) => EventKind::Clock,
            Event::Rx(_) => EventKind::Rx,
            Event::Drop(_) => EventKind::Drop,
            Event::Tcp(_) => EventKind::Tcp,
            Event::Unknown { kind, .. } => EventKind::Unknown(*kind),
        }
    }

    /// Global timestamp, if the kind carries one.
    pub fn global_ns(&self) -> Option<u64> {
        match self {
            Event::Tx(e) => Some(e.global_ns),
            Event::Clock(e) => Some(e.global_ns),
            Event::Rx(e) => Some(e.global_ns),
            Event::Drop(e) => Some(e.global_ns),
            Event::Tcp(e) => Some(e.global_ns),
            Event::Unknown { .. } => None,
        }
    }

    /// One-line summary.
    pub fn summary(&self) -> String {
        match self {
            Event::Tx(e) => e.summary(),
            Event::Clock(e) => e.summary(),
            Event::Rx(e) => e.summary(),
            Event::Drop(e) => e.summary(),
            Event::Tcp(e) => e.summary(),
            Event::Unknown { kind, len } => format!("unknown event kind {kind} ({len} bytes)"),
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
    fn at<'a>(layout: &crate::layout::EventLayout, b: &'a [u8], name: &str) -> &'a [u8] {
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
    fn clock_body_layout_and_round_trip() {
        let ev = ClockEvent {
            mono_ns: 1,
            global_ns: 2,
            ref_ns: 3,
            offset_ns: -4,
            freq_ppb: 12.5,
            delay_ns: 6,
            uncertainty_ns: 7,
            error_estimate_ns: 8,
            source: 2,
            state: 3,
        };
        let mut b = Vec::new();
        ev.encode_body(&mut b);
        assert_eq!(b.len(), ClockEvent::BODY_LEN);
        let l = &ClockEvent::LAYOUT;
        assert_eq!(at(l, &b, "offset_ns"), &(-4i64).to_le_bytes());
        assert_eq!(at(l, &b, "freq_ppb"), &12.5f64.to_le_bytes());
        assert_eq!(
            (at(l, &b, "source"), at(l, &b, "state")),
            (&[2u8][..], &[3u8][..])
        );
        assert_eq!(ClockEvent::decode_body(&b).unwrap(), ev);
        let state = l.field("state").expect("described").offset;
        b[state] = 9;
        assert!(ClockEvent::decode_body(&b).is_err());
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
