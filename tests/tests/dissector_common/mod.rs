//! Shared by the dissector tests: known events, pcapng and Ethernet frame
//! writers, the stage-latency rule computed independently of the Lua
//! script, and the field-by-field comparison of a decoded event.
// Each test crate uses a different subset of these helpers.
#![allow(dead_code)]

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption, InterfaceTsResolution,
};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;
use tracer_codec::{ClockEvent, DatagramBuilder, DatagramHeader, Flow, TxEvent, WIRE_VERSION};
use tracer_e2e::tshark::Row;

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

fn flow(saddr: &str, sport: u16, daddr: &str, dport: u16) -> Flow {
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

/// The golden event set, grouped into datagrams: per agent, consecutive
/// event sequence numbers. Covers all five stages, IPv4 and IPv6, several
/// cookies and tskeys, the same (cookie, tskey) on two agents (latencies
/// must be keyed by agent too), an ACK without SND_SW, a stage without a
/// SENDMSG, an unknown kind and a body with extra trailing bytes. Clock
/// updates (kind 2) sit between TX events in the last three datagrams: all
/// three sources and four servo states, negative and positive offsets,
/// fractional and negative freq_ppb, values above 2^53, u64::MAX, a
/// reference behind the monotonic clock (negative ref - mono) and a body
/// with extra trailing bytes. The first datagram has none, the malformed
/// tests rely on that. Global times increase through the whole list, so
/// file order is send order whatever ordering the sink applies.
pub fn golden_datagrams() -> Vec<(Agent, Vec<Sent>)> {
    let a1 = Skb {
        cookie: 1001,
        tskey: 5000,
        flow: flow("10.0.0.1", 40000, "10.0.0.2", 5201),
        netns: 4_026_531_840,
    };
    let a2 = Skb { tskey: 6448, ..a1 };
    let a3 = Skb {
        cookie: 0x8000_0000_0000_0001,
        tskey: u32::MAX,
        flow: flow("192.168.1.10", 33000, "192.168.1.20", 443),
        netns: 4_026_532_001,
    };
    // Same cookie and tskey as a1, on the other agent.
    let b1 = Skb {
        cookie: 1001,
        tskey: 5000,
        flow: flow("fd00::1", 50000, "fd00:0:0:1::2", 8080),
        netns: 4_026_532_100,
    };
    let b2 = Skb {
        cookie: 3003,
        tskey: 1,
        flow: flow("2001:db8::10", 1, "2001:db8::20", 65535),
        netns: 4_026_532_100,
    };
    let b3 = Skb {
        cookie: 3004,
        tskey: 77,
        flow: flow("127.0.0.1", 45000, "127.0.0.1", 7000),
        netns: 4_026_532_100,
    };

    let t = |us: u64, ns: u64| T0 + us * 1000 + ns;
    let tx = |ev: TxEvent| Record::Tx { ev, extra: vec![] };
    let clock = |ev: ClockEvent| Record::Clock { ev, extra: vec![] };
    // mono_ns of host A / host B: boot-relative, odd, A's above 2^53.
    let mono_a = |g: u64| g - T0 + 9_007_199_254_740_993;
    let mono_b = |g: u64| g - T0 + 86_400_000_000_123;
    // B, sink, LOCKED: the Info example of the README.
    let c1 = clock_event(
        SRC_SINK,
        LOCKED,
        mono_b(t(9, 1)),
        t(9, 1),
        t(9, 1) + 13,
        -12,
        3.4,
        789,
        394,
        1_501,
    );
    // A, phc, UNLOCKED: a PHC that was never set (reference behind the
    // monotonic clock), unknown error.
    let c2 = clock_event(
        SRC_PHC,
        UNLOCKED,
        mono_a(t(21, 0)),
        t(21, 0),
        1_000_000_007,
        0,
        0.0,
        0,
        0,
        u64::MAX,
    );
    // A, phc, JUMP: stepped by a large negative offset; newer fields follow.
    let c3 = clock_event(
        SRC_PHC,
        JUMP,
        mono_a(t(34, 1)),
        t(34, 1),
        t(34, 1) + 1_234_567_890_123,
        -1_234_567_890_123,
        -12.375,
        40_001,
        20_000,
        9_007_199_254_740_995,
    );
    // B, sink, LOCKED_STABLE: an offset above 2^53, tiny negative freq.
    let c4 = clock_event(
        SRC_SINK,
        LOCKED_STABLE,
        mono_b(t(45, 0)),
        t(45, 0),
        t(45, 0) - 9_007_199_254_740_993,
        9_007_199_254_740_993,
        -0.05,
        18_014_398_509_481_985,
        3,
        17,
    );
    // B, system, LOCKED_STABLE: an offset below -2^53, large fractional freq.
    let c5 = clock_event(
        SRC_SYSTEM,
        LOCKED_STABLE,
        mono_b(t(53, 0)),
        t(53, 0),
        t(53, 0) + 9_007_199_254_740_993,
        -9_007_199_254_740_993,
        123_456.789_012_345,
        1,
        1,
        1,
    );
    let mut sendmsg_b2 = b2.at(SENDMSG, t(40, 1), 1);
    sendmsg_b2.comm = comm("curl-with-a-long"); // all 16 bytes used, no NUL
    let groups: Vec<(Agent, Vec<(Record, u64)>)> = vec![
        (
            AGENT_A,
            vec![
                (tx(a1.at(SENDMSG, t(0, 0), 0)), t(0, 0)),
                (tx(a1.at(SCHED, t(1, 337), 0)), t(1, 337)),
                (tx(a2.at(SENDMSG, t(2, 1), 1)), t(2, 1)),
                (tx(a1.at(SND_SW, t(4, 501), 1)), t(4, 501)),
                (
                    Record::Unknown {
                        kind: 77,
                        body: vec![1, 2, 3, 4, 5, 6, 7, 8, 9],
                    },
                    t(4, 501),
                ),
                (tx(a1.at(SND_HW, t(5, 3), 1)), t(5, 3)),
            ],
        ),
        (
            AGENT_B,
            vec![
                (clock(c1), t(9, 1)),
                (tx(b1.at(SCHED, t(10, 7), 1)), t(10, 7)),
                (tx(b1.at(SND_SW, t(12, 999), 1)), t(12, 999)),
            ],
        ),
        (
            AGENT_A,
            vec![
                (tx(a2.at(SCHED, t(20, 3), 0)), t(20, 3)),
                (clock(c2), t(21, 0)),
                (tx(a1.at(ACK, t(30, 11), 0)), t(30, 11)),
                (tx(a3.at(SENDMSG, t(31, 0), 1)), t(31, 0)),
                (tx(a3.at(SCHED, t(31, 901), 1)), t(31, 901)),
                (
                    Record::Tx {
                        ev: a3.at(SND_SW, t(33, 17), 1),
                        extra: vec![0xaa, 0xbb, 0xcc, 0xdd, 0xee],
                    },
                    t(33, 17),
                ),
                (
                    Record::Clock {
                        ev: c3,
                        extra: vec![0x11, 0x22, 0x33],
                    },
                    t(34, 1),
                ),
                // No SND_SW for a2: ACK - SCHED.
                (tx(a2.at(ACK, t(35, 5), 0)), t(35, 5)),
                (tx(a3.at(ACK, t(39, 123), 1)), t(39, 123)),
            ],
        ),
        (
            AGENT_B,
            vec![
                (tx(sendmsg_b2), t(40, 1)),
                (tx(b2.at(SCHED, t(41, 2), 0)), t(41, 2)),
                (clock(c4), t(45, 0)),
                (tx(b1.at(ACK, t(50, 0), 1)), t(50, 0)),
                (tx(b3.at(SENDMSG, t(51, 0), 0)), t(51, 0)),
                (tx(b3.at(SND_SW, t(52, 0), 0)), t(52, 0)),
                (clock(c5), t(53, 0)),
            ],
        ),
    ];

    let mut next_seq: HashMap<u64, u64> =
        HashMap::from([(AGENT_A.agent_id, 100), (AGENT_B.agent_id, 0)]);
    groups
        .into_iter()
        .map(|(agent, recs)| {
            let seq = next_seq.get_mut(&agent.agent_id).unwrap();
            let sent = recs
                .into_iter()
                .map(|(record, time_ns)| {
                    let s = Sent {
                        agent: agent.clone(),
                        event_seq: *seq,
                        record,
                        time_ns,
                    };
                    *seq += 1;
                    s
                })
                .collect();
            (agent, sent)
        })
        .collect()
}

/// Incarnation of every test agent's datagrams (version 2).
pub const INCARNATION: u64 = 0x1234_5678_9abc_def1;
/// The sink instance every version-3 datagram of the fixtures is bound to.
pub const BOUND_SINK: u64 = 0x0bad_cafe_0000_0001;
/// The agent clock every version-3 datagram of the fixtures was sent at.
pub const SENT_MONO_NS: u64 = 987_654_321_000;

/// A real datagram (tracer_codec::DatagramBuilder) holding `events`.
pub fn datagram(agent: &Agent, seq: u64, lost_events: u64, events: &[Sent]) -> Vec<u8> {
    datagram_with(agent, seq, lost_events, events, WIRE_VERSION, None)
}

/// [`datagram`] in wire `version`, tagged with `key` when given.
pub fn datagram_with(
    agent: &Agent,
    seq: u64,
    lost_events: u64,
    events: &[Sent],
    version: u16,
    key: Option<&tracer_auth::MacKey>,
) -> Vec<u8> {
    datagram_padded(agent, seq, lost_events, events, version, key, None)
}

/// [`datagram_with`], padded to `pad_to` bytes as an agent pads the
/// datagrams of a UDP GSO batch.
pub fn datagram_padded(
    agent: &Agent,
    seq: u64,
    lost_events: u64,
    events: &[Sent],
    version: u16,
    key: Option<&tracer_auth::MacKey>,
    pad_to: Option<usize>,
) -> Vec<u8> {
    let mut b = DatagramBuilder::for_version(agent.host, 65_000, version).with_mac_room();
    for s in events {
        let (kind, body) = s.record.kind_body();
        let pushed = match &s.record {
            Record::Tx { ev, extra } if extra.is_empty() => b.push_tx(ev),
            Record::Clock { ev, extra } if extra.is_empty() => b.push_clock(ev),
            _ => b.push_raw(kind, &body),
        };
        assert!(pushed, "record fits");
    }
    let header = DatagramHeader {
        version,
        agent_id: agent.agent_id,
        boot_id: agent.boot_id,
        seq,
        lost_events,
        first_event_seq: events.first().map_or(0, |s| s.event_seq),
        clock_source: agent.clock_source,
        clock_state: agent.clock_state,
        event_count: 0, // set by the builder
        flags: 0,
        incarnation: INCARNATION,
        sink_instance: BOUND_SINK,
        sent_mono_ns: SENT_MONO_NS,
        hostname: agent.host.to_owned(),
    };
    let mut out = Vec::new();
    b.finish_into(&header, pad_to, key.map(|k| |d: &[u8]| k.tag(d)), &mut out);
    out
}

/// The pcapng frame payload the sink writes for `s`.
pub fn capture_payload(s: &Sent) -> Vec<u8> {
    let mut out = Vec::new();
    tracer_codec::CaptureRecord::encode(
        &mut out,
        s.agent.agent_id,
        s.event_seq,
        s.agent.clock_source,
        s.agent.clock_state,
        s.agent.host,
        &s.record.bytes(),
    );
    out
}

/// One frame to write: interface index, time, bytes.
pub struct Frame {
    pub interface: u32,
    pub time_ns: u64,
    pub data: Vec<u8>,
}

/// Write a pcapng file with pcap-file: one IDB per name in `interfaces`
/// (link type `link`, nanosecond resolution), then the frames.
pub fn write_pcapng(path: &Path, link: DataLink, interfaces: &[&str], frames: &[Frame]) {
    let file = BufWriter::new(File::create(path).expect("create pcapng"));
    let mut w = PcapNgWriter::new(file).expect("pcapng header");
    for name in interfaces {
        w.write_pcapng_block(InterfaceDescriptionBlock {
            linktype: link,
            snaplen: 0,
            options: vec![
                InterfaceDescriptionOption::IfName(Cow::Borrowed(name)),
                InterfaceDescriptionOption::IfTsResol(InterfaceTsResolution::NANO),
            ],
        })
        .expect("IDB");
    }
    for f in frames {
        w.write_pcapng_block(EnhancedPacketBlock {
            interface_id: f.interface,
            timestamp: Duration::from_nanos(f.time_ns),
            original_len: f.data.len() as u32,
            data: Cow::Borrowed(&f.data),
            options: vec![],
        })
        .expect("EPB");
    }
    use std::io::Write;
    w.into_inner().flush().expect("flush pcapng");
}

/// Ethernet + IPv4 + UDP (127.0.0.1:50000 -> 127.0.0.2:`dport`) around
/// `payload`, with a correct IPv4 header checksum and no UDP checksum.
pub fn ethernet_udp(payload: &[u8], dport: u16) -> Vec<u8> {
    let udp_len = 8 + payload.len();
    let ip_len = 20 + udp_len;
    let mut f = Vec::with_capacity(14 + ip_len);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00]);
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
    ip[6] = 0x40; // don't fragment
    ip[8] = 64;
    ip[9] = 17; // UDP
    ip[12..16].copy_from_slice(&[127, 0, 0, 1]);
    ip[16..20].copy_from_slice(&[127, 0, 0, 2]);
    let sum = ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum::<u32>();
    let folded = (sum & 0xffff) + (sum >> 16);
    let csum = !(((folded & 0xffff) + (folded >> 16)) as u16);
    ip[10..12].copy_from_slice(&csum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&50000u16.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

/// Expected stage latencies of one event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Latency {
    pub sched_ns: Option<i64>,
    pub snd_sw_ns: Option<i64>,
    pub snd_hw_ns: Option<i64>,
    pub ack_ns: Option<i64>,
    pub total_ns: Option<i64>,
}

/// The latency rule of the README, written again here from its definition
/// (not from the Lua code): events in file order; per (agent, cookie, tskey)
/// the latest event of each stage and the latency it got. An event shows
/// its own stage latency and those of the skb's stages seen before it.
#[derive(Default)]
pub struct LatencyModel {
    seen: HashMap<SkbKey, HashMap<u8, StageSeen>>,
}

/// (agent_id, cookie, tskey): one skb of one agent.
type SkbKey = (u64, u64, u32);
/// A stage's latest global_ns and the latency it got.
type StageSeen = (u64, Option<i64>);

impl LatencyModel {
    /// Latencies of the next event in file order.
    pub fn next(&mut self, agent_id: u64, ev: &TxEvent) -> Latency {
        let stages = self
            .seen
            .entry((agent_id, ev.cookie, ev.tskey))
            .or_default();
        let since = |from: u8| {
            stages
                .get(&from)
                .map(|&(t, _)| ev.global_ns as i64 - t as i64)
        };
        let own = match ev.stage {
            SCHED => since(SENDMSG),
            SND_SW | SND_HW => since(SCHED),
            ACK => since(SND_SW).or(since(SND_HW)).or(since(SCHED)),
            _ => None,
        };
        let total = if ev.stage == SENDMSG {
            None
        } else {
            since(SENDMSG)
        };
        stages.insert(ev.stage, (ev.global_ns, own));
        let of = |stage: u8| stages.get(&stage).and_then(|&(_, lat)| lat);
        Latency {
            sched_ns: of(SCHED),
            snd_sw_ns: of(SND_SW),
            snd_hw_ns: of(SND_HW),
            ack_ns: of(ACK),
            total_ns: total,
        }
    }
}

/// Nanoseconds since the epoch of tshark's absolute time text, e.g.
/// "Nov 13, 2025 02:13:20.000009000 UTC".
pub fn parse_abs_time(s: &str) -> u64 {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let parts: Vec<&str> = s.split_whitespace().collect();
    assert_eq!(parts.len(), 5, "absolute time {s:?}");
    assert_eq!(parts[4], "UTC", "absolute time {s:?} not in UTC");
    let month = MONTHS.iter().position(|m| *m == parts[0]).expect("month") as i64 + 1;
    let day: i64 = parts[1].trim_end_matches(',').parse().expect("day");
    let year: i64 = parts[2].parse().expect("year");
    let (hms, frac) = parts[3].split_once('.').expect("fraction");
    let hms: Vec<i64> = hms.split(':').map(|x| x.parse().expect("hms")).collect();
    assert_eq!(frac.len(), 9, "nanosecond digits in {s:?}");
    let secs = days_from_civil(year, month, day) * 86_400 + hms[0] * 3600 + hms[1] * 60 + hms[2];
    secs as u64 * 1_000_000_000 + frac.parse::<u64>().expect("fraction")
}

/// Days since 1970-01-01 of a proleptic Gregorian date (eras of 400 years).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12; // March = 0
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Every field of the TX event display filter names, for `-e`.
pub const TX_FIELDS: &[&str] = &[
    "nettrace.mono_ns",
    "nettrace.global_ns",
    "nettrace.global_time",
    "nettrace.hw_ns",
    "nettrace.cookie",
    "nettrace.tskey",
    "nettrace.seq",
    "nettrace.netns",
    "nettrace.cpu",
    "nettrace.pid",
    "nettrace.tid",
    "nettrace.stage",
    "nettrace.family",
    "nettrace.sport",
    "nettrace.dport",
    "nettrace.saddr",
    "nettrace.daddr",
    "nettrace.saddr6",
    "nettrace.daddr6",
    "nettrace.comm",
    "nettrace.extra",
];

/// Every field of a clock update, for `-e`.
pub const CLOCK_FIELDS: &[&str] = &[
    "nettrace.clock.mono_ns",
    "nettrace.clock.global_ns",
    "nettrace.clock.global_time",
    "nettrace.clock.ref_ns",
    "nettrace.clock.offset_ns",
    "nettrace.clock.freq_ppb",
    "nettrace.clock.delay_ns",
    "nettrace.clock.uncertainty_ns",
    "nettrace.clock.error_estimate_ns",
    "nettrace.clock.source",
    "nettrace.clock.state",
    "nettrace.clock.ref_minus_mono_ns",
];

/// Latency fields, for `-e`.
pub const LAT_FIELDS: &[&str] = &[
    "nettrace.lat.sched_ns",
    "nettrace.lat.snd_sw_ns",
    "nettrace.lat.snd_hw_ns",
    "nettrace.lat.ack_ns",
    "nettrace.lat.total_ns",
];

/// Capture-record (pcapng frame) header fields, for `-e`.
pub const CAPTURE_FIELDS: &[&str] = &[
    "nettrace.capture.version",
    "nettrace.capture.header_len",
    "nettrace.agent_id",
    "nettrace.event_seq",
    "nettrace.clock_source",
    "nettrace.clock_state",
    "nettrace.host_len",
    "nettrace.host",
    "nettrace.kind",
    "nettrace.len",
    "nettrace.unknown",
];

/// `fields` + `more`, for one `-e` list.
pub fn field_list(groups: &[&[&'static str]]) -> Vec<&'static str> {
    groups.iter().flat_map(|g| g.iter().copied()).collect()
}

/// Lower-case hex without separators, as tshark prints bytes fields.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Value `i` of a field that occurs once per TX event of the frame. A
/// string field whose values are all empty is printed as nothing at all.
fn nth<'a>(row: &'a Row, field: &str, i: usize) -> &'a str {
    let all = row.all(field);
    if all.is_empty() {
        return "";
    }
    all.get(i)
        .unwrap_or_else(|| panic!("{field}: no occurrence {i} in {row:?}"))
}

/// Compare the TX fields of the `i`-th TX event of `row` with `ev`; its
/// addresses are the `addr_i`-th of its family (IPv4 and IPv6 addresses are
/// separate fields). `what` names the event in failure messages.
pub fn check_tx(row: &Row, i: usize, addr_i: usize, ev: &TxEvent, what: &str) {
    let eq = |field: &str, want: String| {
        assert_eq!(nth(row, field, i), want, "{what}: {field}");
    };
    eq("nettrace.mono_ns", ev.mono_ns.to_string());
    eq("nettrace.global_ns", ev.global_ns.to_string());
    assert_eq!(
        parse_abs_time(nth(row, "nettrace.global_time", i)),
        ev.global_ns,
        "{what}: nettrace.global_time"
    );
    eq("nettrace.hw_ns", ev.hw_ns.to_string());
    eq("nettrace.cookie", ev.cookie.to_string());
    eq("nettrace.tskey", ev.tskey.to_string());
    eq("nettrace.seq", ev.seq.to_string());
    eq("nettrace.netns", ev.netns.to_string());
    eq("nettrace.cpu", ev.cpu.to_string());
    eq("nettrace.pid", ev.pid.to_string());
    eq("nettrace.tid", ev.tid.to_string());
    eq("nettrace.stage", ev.stage.to_string());
    eq("nettrace.family", ev.family.to_string());
    eq("nettrace.sport", ev.sport.to_string());
    eq("nettrace.dport", ev.dport.to_string());
    eq("nettrace.comm", ev.comm_str());
    let f = ev.flow();
    let (s, d) = match (f.saddr, f.daddr) {
        (IpAddr::V4(_), _) => ("nettrace.saddr", "nettrace.daddr"),
        _ => ("nettrace.saddr6", "nettrace.daddr6"),
    };
    assert_eq!(nth(row, s, addr_i), f.saddr.to_string(), "{what}: {s}");
    assert_eq!(nth(row, d, addr_i), f.daddr.to_string(), "{what}: {d}");
}

/// ref_ns - mono_ns, exact (the golden values keep it inside i64).
pub fn ref_minus_mono(ev: &ClockEvent) -> i64 {
    i64::try_from(i128::from(ev.ref_ns) - i128::from(ev.mono_ns)).expect("ref - mono fits i64")
}

/// Compare the clock fields of the `i`-th clock update of `row` with `ev`.
pub fn check_clock(row: &Row, i: usize, ev: &ClockEvent, what: &str) {
    let eq = |field: &str, want: String| {
        assert_eq!(nth(row, field, i), want, "{what}: {field}");
    };
    eq("nettrace.clock.mono_ns", ev.mono_ns.to_string());
    eq("nettrace.clock.global_ns", ev.global_ns.to_string());
    assert_eq!(
        parse_abs_time(nth(row, "nettrace.clock.global_time", i)),
        ev.global_ns,
        "{what}: nettrace.clock.global_time"
    );
    eq("nettrace.clock.ref_ns", ev.ref_ns.to_string());
    eq("nettrace.clock.offset_ns", ev.offset_ns.to_string());
    // tshark prints a double with 15 significant digits ("%.15g"); the
    // golden values need no more, so Rust's shortest form is the same text
    // and parses back to the very same double.
    let freq = nth(row, "nettrace.clock.freq_ppb", i);
    assert_eq!(freq, ev.freq_ppb.to_string(), "{what}: freq_ppb text");
    assert_eq!(
        freq.parse::<f64>().expect("freq_ppb").to_bits(),
        ev.freq_ppb.to_bits(),
        "{what}: freq_ppb bits"
    );
    eq("nettrace.clock.delay_ns", ev.delay_ns.to_string());
    eq(
        "nettrace.clock.uncertainty_ns",
        ev.uncertainty_ns.to_string(),
    );
    eq(
        "nettrace.clock.error_estimate_ns",
        ev.error_estimate_ns.to_string(),
    );
    eq("nettrace.clock.source", ev.source.to_string());
    eq("nettrace.clock.state", ev.state.to_string());
    eq(
        "nettrace.clock.ref_minus_mono_ns",
        ref_minus_mono(ev).to_string(),
    );
}

/// Compare a row's latency fields with `lat` (the row holds one event).
pub fn check_latency(row: &Row, lat: &Latency, what: &str) {
    let eq = |field: &str, want: Option<i64>| {
        assert_eq!(
            row.opt(field).map(|v| v.parse::<i64>().expect("latency")),
            want,
            "{what}: {field}"
        );
    };
    eq("nettrace.lat.sched_ns", lat.sched_ns);
    eq("nettrace.lat.snd_sw_ns", lat.snd_sw_ns);
    eq("nettrace.lat.snd_hw_ns", lat.snd_hw_ns);
    eq("nettrace.lat.ack_ns", lat.ack_ns);
    eq("nettrace.lat.total_ns", lat.total_ns);
}

/// Compare one decoded pcapng frame (a capture record) with the event
/// that was sent, every field, and its latencies with the model's.
pub fn check_capture_frame(row: &Row, s: &Sent, model: &mut LatencyModel) {
    let what = format!("{} event {}", s.agent.host, s.event_seq);
    let (kind, body) = s.record.kind_body();
    let eq = |field: &str, want: String| {
        assert_eq!(row.one(field), want, "{what}: {field}");
    };
    eq("nettrace.capture.version", "1".into());
    eq(
        "nettrace.capture.header_len",
        (23 + s.agent.host.len()).to_string(),
    );
    eq("nettrace.agent_id", format!("0x{:016x}", s.agent.agent_id));
    eq("nettrace.event_seq", s.event_seq.to_string());
    eq("nettrace.clock_source", s.agent.clock_source.to_string());
    eq("nettrace.clock_state", s.agent.clock_state.to_string());
    eq("nettrace.host_len", s.agent.host.len().to_string());
    eq("nettrace.host", s.agent.host.into());
    eq("nettrace.kind", kind.to_string());
    eq("nettrace.len", body.len().to_string());
    match &s.record {
        Record::Tx { ev, extra } => {
            check_tx(row, 0, 0, ev, &what);
            // Exactly one address pair, the one of the event's family.
            let pairs = ["nettrace.saddr", "nettrace.saddr6"]
                .iter()
                .filter(|f| row.has(f))
                .count();
            assert_eq!(pairs, 1, "{what}: one address family");
            assert_eq!(
                row.opt("nettrace.extra"),
                (!extra.is_empty()).then(|| hex(extra)).as_deref(),
                "{what}: nettrace.extra"
            );
            assert!(!row.has("nettrace.unknown"), "{what}: not unknown");
            check_latency(row, &model.next(s.agent.agent_id, ev), &what);
            for f in CLOCK_FIELDS {
                assert!(!row.has(f), "{what}: TX event has no {f}");
            }
        }
        Record::Clock { ev, extra } => {
            check_clock(row, 0, ev, &what);
            assert_eq!(
                row.opt("nettrace.extra"),
                (!extra.is_empty()).then(|| hex(extra)).as_deref(),
                "{what}: nettrace.extra"
            );
            assert!(!row.has("nettrace.unknown"), "{what}: not unknown");
            for f in TX_FIELDS.iter().chain(LAT_FIELDS) {
                if *f != "nettrace.extra" {
                    assert!(!row.has(f), "{what}: clock update has no {f}");
                }
            }
        }
        Record::Unknown { body, .. } => {
            assert_eq!(row.one("nettrace.unknown"), hex(body), "{what}: body");
            for f in TX_FIELDS.iter().chain(LAT_FIELDS).chain(CLOCK_FIELDS) {
                assert!(!row.has(f), "{what}: unknown kind has no {f}");
            }
        }
    }
}
