//! The events the dissector tests send: agents, records (known kinds,
//! bodies a newer version extended, unknown kinds), the sent event, and
//! short constructors for TX and clock events.

use tracer_codec::{ClockEvent, Flow, TxEvent};

/// A global time above 2^53 ns: doubles could not hold these stamps (or
/// their odd-nanosecond differences) exactly, so a dissector that loses
/// precision fails the comparison.
pub const T0: u64 = 1_763_000_000_123_456_789;

/// Stage numbers as on the wire.
pub const SENDMSG: u8 = 0;
pub const SCHED: u8 = 1;
pub const SND_SW: u8 = 2;
pub const SND_HW: u8 = 3;
pub const ACK: u8 = 4;

/// One agent as the tests model it.
#[derive(Debug, Clone)]
pub struct Agent {
    pub agent_id: u64,
    pub host: &'static str,
    pub boot_id: [u8; 16],
    pub clock_source: u8,
    pub clock_state: u8,
}

/// Host A: IPv4 flows, PHC clock, LOCKED_STABLE.
pub const AGENT_A: Agent = Agent {
    agent_id: 0x0123_4567_89ab_cdef,
    host: "host-a",
    boot_id: [
        0x6f, 0x1c, 0x2a, 0x3b, 0x4c, 0x5d, 0x4e, 0x7f, 0x80, 0x91, 0xa2, 0xb3, 0xc4, 0xd5, 0xe6,
        0xf7,
    ],
    clock_source: 1,
    clock_state: 3,
};

/// Host B: IPv6 flows (and one IPv4), clock from the sink, LOCKED. Its
/// agent id has the top bit set, so it only fits an unsigned 64-bit field.
pub const AGENT_B: Agent = Agent {
    agent_id: 0xfedc_ba98_7654_3210,
    host: "host-b.example.net",
    boot_id: [0xb0; 16],
    clock_source: 2,
    clock_state: 2,
};

/// Clock sources and servo states as on the wire.
pub const SRC_SYSTEM: u8 = 0;
pub const SRC_PHC: u8 = 1;
pub const SRC_SINK: u8 = 2;
pub const UNLOCKED: u8 = 0;
pub const JUMP: u8 = 1;
pub const LOCKED: u8 = 2;
pub const LOCKED_STABLE: u8 = 3;

/// The record one event travels in.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// A TX event, with bytes a newer version appended to its body.
    Tx { ev: TxEvent, extra: Vec<u8> },
    /// A clock update, with bytes a newer version appended to its body.
    Clock { ev: ClockEvent, extra: Vec<u8> },
    /// A kind this version does not know.
    Unknown { kind: u16, body: Vec<u8> },
}

impl Record {
    /// kind | len | body, as on the wire.
    pub fn bytes(&self) -> Vec<u8> {
        let (kind, body) = self.kind_body();
        let mut out = Vec::new();
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(&(body.len() as u16).to_le_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// Kind number and body bytes.
    pub fn kind_body(&self) -> (u16, Vec<u8>) {
        match self {
            Record::Tx { ev, extra } => {
                let mut body = Vec::new();
                ev.encode_body(&mut body);
                body.extend_from_slice(extra);
                (tracer_codec::EventKind::TX, body)
            }
            Record::Clock { ev, extra } => {
                let mut body = Vec::new();
                ev.encode_body(&mut body);
                body.extend_from_slice(extra);
                (tracer_codec::EventKind::CLOCK, body)
            }
            Record::Unknown { kind, body } => (*kind, body.clone()),
        }
    }

    /// The TX event, if this is one.
    pub fn tx(&self) -> Option<&TxEvent> {
        match self {
            Record::Tx { ev, .. } => Some(ev),
            _ => None,
        }
    }

    /// The clock update, if this is one.
    pub fn clock(&self) -> Option<&ClockEvent> {
        match self {
            Record::Clock { ev, .. } => Some(ev),
            _ => None,
        }
    }
}

/// One event as an agent sent it.
#[derive(Debug, Clone)]
pub struct Sent {
    pub agent: Agent,
    pub event_seq: u64,
    pub record: Record,
    /// Time used for the pcapng frame (the event's global time; for an
    /// unknown kind the time of the event before it).
    pub time_ns: u64,
}

/// Short constructor for a TX event of one skb.
pub struct Skb {
    pub cookie: u64,
    pub tskey: u32,
    pub flow: Flow,
    pub netns: u32,
}

impl Skb {
    /// The event of `stage` at global time `global_ns`. SENDMSG carries the
    /// sender; SENDMSG and ACK carry the first sequence number; SND_HW a
    /// hardware stamp; mono_ns is the global time minus a fixed offset.
    pub fn at(&self, stage: u8, global_ns: u64, cpu: u32) -> TxEvent {
        let mut ev = TxEvent {
            mono_ns: global_ns - 1_700_000_000_000_000_000,
            global_ns,
            hw_ns: if stage == SND_HW {
                global_ns ^ 0x0f0f
            } else {
                0
            },
            cookie: self.cookie,
            tskey: self.tskey,
            seq: if stage == SENDMSG || stage == ACK {
                self.tskey.wrapping_sub(1447)
            } else {
                0
            },
            netns: self.netns,
            cpu,
            stage,
            ..TxEvent::default()
        };
        if stage == SENDMSG {
            ev.pid = 4242;
            ev.tid = 4243;
            ev.comm = comm("iperf3");
        }
        ev.set_flow(&self.flow);
        ev
    }
}

/// A NUL-padded task name.
pub fn comm(name: &str) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[..name.len()].copy_from_slice(name.as_bytes());
    c
}

pub(super) fn flow(saddr: &str, sport: u16, daddr: &str, dport: u16) -> Flow {
    Flow {
        saddr: saddr.parse().unwrap(),
        daddr: daddr.parse().unwrap(),
        sport,
        dport,
    }
}

/// A clock update. Every u64 and the offset can be above 2^53 (doubles
/// would round them), freq_ppb is a double with at most 15 significant
/// digits (tshark prints doubles with 15).
#[allow(clippy::too_many_arguments)]
pub fn clock_event(
    source: u8,
    state: u8,
    mono_ns: u64,
    global_ns: u64,
    ref_ns: u64,
    offset_ns: i64,
    freq_ppb: f64,
    delay_ns: u64,
    uncertainty_ns: u64,
    error_estimate_ns: u64,
) -> ClockEvent {
    ClockEvent {
        mono_ns,
        global_ns,
        ref_ns,
        offset_ns,
        freq_ppb,
        delay_ns,
        uncertainty_ns,
        error_estimate_ns,
        source,
        state,
    }
}
