//! The dissector's cross-host peer links on crafted two-host traces: each
//! sender SND_SW (or SND_HW) frame and the receiver's STACK_ENTRY frame it
//! pairs with point at each other (`nettrace.peer_frame`) with the one-way
//! latency (`nettrace.oneway_ns`); a receive before its send is a causality
//! violation (a flag and an expert warning on both frames); a send whose
//! byte was received but not once per recorded send is ambiguous
//! (`nettrace.peer_ambiguous`, an expert note) and links nowhere.
//!
//! The links tshark shows, in two passes and in one, are compared with the
//! rule of docs/reading-a-trace.md ("Across hosts") computed here
//! independently; GRO skbs, retransmissions, ranges past the tskey,
//! SENDMSG tags of skbs already sent, the window, sequence wrap-around,
//! IPv4-mapped senders, IPv6, version-1 events, SND_HW and unmatched
//! packets are covered. The same rule is nettrace-match's: on a synthetic
//! trace with losses, retransmissions and GRO, every pair the matcher makes
//! (`--pairs`) is exactly one link of the dissector, and nothing else is.

mod dissector_common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;

use dissector_common::{write_pcapng, Agent, Frame, Skb, AGENT_A, AGENT_B, SCHED, SENDMSG, T0};
use tracer_codec::{
    EventKind, Flow, RxEvent, RxStage, TxEvent, TxStage, TX_FLAG_RANGE, TX_FLAG_SENT,
};
use tracer_e2e::tshark::{Query, Row, Tshark};
use tracer_sink::LinkType;

const SND_SW: u8 = TxStage::SndSw as u8;
const SND_HW: u8 = TxStage::SndHw as u8;

/// The peer window of the dissector's preference and of nettrace-match's
/// `--window`, by default (ns).
const WINDOW_NS: u64 = 250_000_000;

/// Longest range taken as one (the dissector's PEER_MAX_SPAN, the
/// matcher's MAX_SKB_SPAN).
const MAX_SPAN: u32 = 4 << 20;

/// One event of the trace, in file order.
#[derive(Clone)]
enum Ev {
    Tx(TxEvent),
    Rx(RxEvent),
}

#[derive(Clone)]
struct Step {
    agent: &'static Agent,
    ev: Ev,
    /// Written as a version-1 TX body (no `end_seq`, no `tx_flags`).
    v1: bool,
}

impl Step {
    /// A TX step holding the bytes `[seq, end_seq)` at its callback
    /// (version 2, RANGE).
    fn bytes(mut self, seq: u32, end_seq: u32) -> Self {
        if let Ev::Tx(e) = &mut self.ev {
            e.seq = seq;
            e.end_seq = end_seq;
            e.tx_flags |= TX_FLAG_RANGE;
        }
        self
    }

    /// A SENDMSG that tagged an skb already sent.
    fn tagged_sent(mut self) -> Self {
        if let Ev::Tx(e) = &mut self.ev {
            e.tx_flags |= TX_FLAG_SENT;
        }
        self
    }

    /// Written as a version-1 body.
    fn v1(mut self) -> Self {
        self.v1 = true;
        self
    }

    fn global_ns(&self) -> u64 {
        match &self.ev {
            Ev::Tx(e) => e.global_ns,
            Ev::Rx(e) => e.global_ns,
        }
    }
}

fn flow(saddr: &str, sport: u16, daddr: &str, dport: u16) -> Flow {
    Flow {
        saddr: saddr.parse().unwrap(),
        daddr: daddr.parse().unwrap(),
        sport,
        dport,
    }
}

/// Global time `us` microseconds (plus a few odd ns) after T0: above 2^53,
/// so a double anywhere in the arithmetic shows.
fn at(us: u64) -> u64 {
    T0 + us * 1000 + us % 7
}

/// A TX event of `agent`'s socket `cookie` at global time `ns`.
fn tx_ns(agent: &'static Agent, cookie: u64, f: &Flow, stage: u8, tskey: u32, ns: u64) -> Step {
    let skb = Skb {
        cookie,
        tskey,
        flow: *f,
        netns: 4_026_531_840,
    };
    Step {
        agent,
        ev: Ev::Tx(skb.at(stage, ns, 0)),
        v1: false,
    }
}

/// A TX event of the sender (host A) at `us`.
fn tx(f: &Flow, stage: u8, tskey: u32, us: u64) -> Step {
    tx_on(&AGENT_A, f, stage, tskey, us)
}

fn tx_on(agent: &'static Agent, f: &Flow, stage: u8, tskey: u32, us: u64) -> Step {
    tx_ns(agent, 77, f, stage, tskey, at(us))
}

/// An RX event of `agent` at global time `ns`; `f` in the data's
/// direction (sender first), as the RX probe writes it.
fn rx_ns(agent: &'static Agent, f: &Flow, stage: RxStage, seq: u32, end_seq: u32, ns: u64) -> Step {
    let put = |ip: IpAddr| match ip {
        IpAddr::V4(v4) => {
            let mut a = [0u8; 16];
            a[..4].copy_from_slice(&v4.octets());
            a
        }
        IpAddr::V6(v6) => v6.octets(),
    };
    let ev = RxEvent {
        mono_ns: ns - 1_700_000_000_000_000_000,
        global_ns: ns,
        seq,
        end_seq,
        len: end_seq.wrapping_sub(seq) + 52,
        netns: 4_026_532_100,
        ifindex: 3,
        stage: stage as u8,
        family: if f.saddr.is_ipv6() { 6 } else { 4 },
        protocol: 6,
        sport: f.sport,
        dport: f.dport,
        saddr: put(f.saddr),
        daddr: put(f.daddr),
        ..Default::default()
    };
    Step {
        agent,
        ev: Ev::Rx(ev),
        v1: false,
    }
}

/// An RX event of the receiver (host B) at `us`.
fn rx(f: &Flow, stage: RxStage, seq: u32, end_seq: u32, us: u64) -> Step {
    rx_ns(&AGENT_B, f, stage, seq, end_seq, at(us))
}

/// The crafted trace, in file order (frame n = index n - 1). Sequence
/// numbers of F1 start at ISN = 1,000,000 with 1000-byte segments.
fn scenario() -> Vec<Step> {
    use RxStage::*;
    let f1 = flow("10.0.0.1", 40000, "10.0.0.2", 5201);
    let f2 = flow("10.0.0.1", 40001, "10.0.0.2", 5201);
    let back = flow("10.0.0.2", 5201, "10.0.0.1", 40000);
    // A dual-stack sender socket: its TX events carry IPv4-mapped IPv6
    // addresses, the packet on the wire (and so STACK_ENTRY) is IPv4.
    let f3_tx = flow("::ffff:10.0.0.1", 40002, "::ffff:10.0.0.2", 5201);
    let f3_rx = flow("10.0.0.1", 40002, "10.0.0.2", 5201);
    let f4 = flow("fd00::1", 50000, "fd00::2", 8080);
    let f5 = flow("10.0.0.1", 40005, "10.0.0.2", 5201);
    let f6 = flow("10.0.0.1", 40006, "10.0.0.2", 5201);
    let f7 = flow("10.0.0.1", 40007, "10.0.0.2", 5201);
    let f8 = flow("10.0.0.1", 40008, "10.0.0.2", 5201);
    let wrap = u32::MAX - 999; // 1000 bytes before 2^32
    let mut udp = rx(&f1, StackEntry, 0, 0, 395);
    if let Ev::Rx(e) = &mut udp.ev {
        e.protocol = 17;
    }
    vec![
        tx(&f1, SENDMSG, 1_001_999, 1),                 // 1: not a send
        tx(&f1, SCHED, 1_001_999, 2),                   // 2
        tx(&f1, SND_SW, 1_001_999, 10).v1(),            // 3: k1 (version 1)
        tx(&f1, SND_SW, 1_003_999, 12).v1(),            // 4: k2 (version 1)
        tx(&f1, SND_SW, 1_004_999, 14),                 // 5: k3
        rx(&f1, StackEntry, 1_000_000, 1_005_000, 30),  // 6: GRO of k1..k3
        rx(&f1, TcpInput, 1_000_000, 1_005_000, 31),    // 7: not a peer
        tx(&f1, SND_SW, 1_006_999, 40),                 // 8: k4, lost
        tx(&f1, SND_SW, 1_007_999, 42),                 // 9: k5
        rx(&f1, StackEntry, 1_007_000, 1_008_000, 50),  // 10: k5 (send 9)
        tx(&f1, SND_SW, 1_006_999, 240),                // 11: k4 again
        tx(&f1, SND_SW, 1_007_999, 241),                // 12: k5 again (spurious)
        rx(&f1, StackEntry, 1_005_000, 1_007_000, 250), // 13: k4: 2 sends, 1 copy
        rx(&f1, StackEntry, 1_007_000, 1_008_000, 252), // 14: k5 (send 12)
        rx(&f1, StackEntry, 1_008_000, 1_009_000, 300), // 15: before its send
        tx(&f1, SND_SW, 1_008_999, 305),                // 16: k6: violation
        tx(&f1, SND_SW, 1_009_999, 310),                // 17: k7, never received
        rx(&f1, StackEntry, 1_020_000, 1_021_000, 320), // 18: no send recorded
        tx(&f1, SND_HW, 1_010_999, 330),                // 19: k8, SND_HW only
        tx(&f1, SND_SW, 1_011_999, 331),                // 20: k9
        tx(&f1, SND_HW, 1_011_999, 333),                // 21: k9's SND_HW
        rx(&f1, StackEntry, 1_010_000, 1_012_000, 340), // 22: k8 and k9
        rx(&f1, StackEntry, 1_012_000, 1_012_000, 341), // 23: pure ACK
        rx(&f2, StackEntry, 1_000_000, 1_005_000, 342), // 24: other flow
        tx_on(&AGENT_B, &back, SND_SW, 1_000_999, 343), // 25: other direction
        udp,                                            // 26: UDP
        tx(&f3_tx, SND_SW, u32::MAX, 400),              // 27: k10, ends at 2^32
        tx(&f3_tx, SND_SW, 999, 401),                   // 28: k11, after the wrap
        rx(&f3_rx, StackEntry, wrap, 1000, 420),        // 29: k10 and k11
        tx(&f4, SND_SW, 4999, 500),                     // 30: IPv6, 1 send, 2 copies
        rx(&f4, StackEntry, 4000, 5000, 510),           // 31
        rx(&f4, StackEntry, 2000, 5000, 520),           // 32: overlapping resend
        tx(&f4, SND_SW, 5999, 530),                     // 33
        rx(&f4, StackEntry, 5000, 6000, 529), // 34: 1 µs before its send, after it in the file
        // Two sends of one range, two copies; the receiver's clock 20 µs
        // ahead, so the second send looks earlier than the first copy.
        tx(&f5, SND_SW, 10_999, 600).bytes(10_000, 11_000), // 35
        tx(&f5, SND_SW, 10_999, 610).bytes(10_000, 11_000), // 36
        rx(&f5, StackEntry, 10_000, 11_000, 615),           // 37: sent at 595
        rx(&f5, StackEntry, 10_000, 11_000, 625),           // 38
        // The skb held bytes past its tskey at the send.
        tx(&f6, SENDMSG, 20_999, 640).bytes(20_000, 21_000), // 39
        tx(&f6, SND_SW, 20_999, 650).bytes(20_000, 22_000),  // 40
        rx(&f6, StackEntry, 20_000, 21_000, 660),            // 41: tskey, not the last byte
        rx(&f6, StackEntry, 21_000, 22_000, 661),            // 42: the last byte
        // A tag on an skb already sent: its first copy went out untagged.
        tx(&f7, SENDMSG, 30_999, 700)
            .bytes(30_000, 31_000)
            .tagged_sent(), // 43
        rx(&f7, StackEntry, 30_000, 31_000, 705), // 44: the untagged copy
        tx(&f7, SND_SW, 30_999, 720).bytes(30_000, 31_000), // 45
        rx(&f7, StackEntry, 30_000, 31_000, 730), // 46
        // A resend 300 ms later, beyond the 250 ms window.
        tx(&f8, SND_SW, 40_999, 800).bytes(40_000, 41_000), // 47: lost
        tx(&f8, SND_SW, 40_999, 300_800).bytes(40_000, 41_000), // 48
        rx(&f8, StackEntry, 40_000, 41_000, 300_810),       // 49
    ]
}

/// The connection of an event as the rule names it: the data's direction,
/// IPv4-mapped IPv6 addresses as IPv4.
type Conn = (IpAddr, IpAddr, u16, u16);

fn conn(f: Flow) -> Conn {
    let plain = |a: IpAddr| match a {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(a, IpAddr::V4),
        v4 => v4,
    };
    (plain(f.saddr), plain(f.daddr), f.sport, f.dport)
}

/// A send: an SND_SW or SND_HW frame.
struct Send {
    frame: usize,
    conn: Conn,
    /// The sender skb: (agent, cookie, tskey).
    skb: (u64, u64, u32),
    tskey: u32,
    hw: bool,
    ns: u64,
    /// The bytes it stands for: `[start, start + len)` (mod 2^32).
    start: u32,
    len: u32,
}

impl Send {
    /// The byte it follows: its last.
    fn last(&self) -> u32 {
        self.start.wrapping_add(self.len - 1)
    }

    fn holds(&self, b: u32) -> bool {
        b.wrapping_sub(self.start) < self.len
    }
}

/// A reception: an RX STACK_ENTRY frame of a TCP skb with data.
struct Recv {
    frame: usize,
    conn: Conn,
    seq: u32,
    end_seq: u32,
    ns: u64,
}

impl Recv {
    /// Whether this skb carries sequence number `b` (mod 2^32).
    fn holds(&self, b: u32) -> bool {
        b.wrapping_sub(self.seq) < self.end_seq.wrapping_sub(self.seq)
    }
}

/// What the rule decides for one send.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fate {
    /// Paired with the reception in this frame.
    Linked(usize),
    /// Receptions of its byte, but not one per recorded send.
    Ambiguous(&'static str),
}

/// A send's pairing: its fate and the sends and receptions of its byte.
#[derive(Debug, Clone, Copy)]
struct Pairing {
    fate: Fate,
    sends: u32,
    recvs: u32,
}

/// What one frame shows of its peers, in tree order.
#[derive(Debug, Default, PartialEq)]
struct Shown {
    peer_frames: Vec<u64>,
    oneway_ns: Vec<i64>,
    tskeys: Vec<u32>,
    /// nettrace.peer_sends.
    sends: Vec<u32>,
    receptions: Option<u32>,
    count: Option<u32>,
    violations: usize,
    /// nettrace.peer_ambiguous: the reasons, in tree order.
    ambiguous: Vec<String>,
}

/// The rule of docs/reading-a-trace.md ("Across hosts") over the frames
/// before `upto` (frame numbers from 1; a single pass knows only those).
struct Rule {
    sends: Vec<Send>,
    recvs: Vec<Recv>,
    /// Sender skbs with an SND_SW frame.
    with_sw: HashSet<(u64, u64, u32)>,
    window_ns: u64,
}

impl Rule {
    fn new(steps: &[Step], upto: usize) -> Self {
        Self::with_window(steps, upto, WINDOW_NS)
    }

    fn with_window(steps: &[Step], upto: usize, window_ns: u64) -> Self {
        let mut sends = Vec::new();
        let mut recvs = Vec::new();
        for (i, st) in steps.iter().take(upto).enumerate() {
            match &st.ev {
                Ev::Tx(e) if e.stage == SND_SW || e.stage == SND_HW => {
                    // Version 2: the range at the send; else the tskey byte.
                    let (start, len) = match e.range() {
                        Some((s, end))
                            if !st.v1 && (1..=MAX_SPAN).contains(&end.wrapping_sub(s)) =>
                        {
                            (s, end.wrapping_sub(s))
                        }
                        _ => (e.tskey, 1),
                    };
                    sends.push(Send {
                        frame: i + 1,
                        conn: conn(e.flow()),
                        skb: (st.agent.agent_id, e.cookie, e.tskey),
                        tskey: e.tskey,
                        hw: e.stage == SND_HW,
                        ns: e.global_ns,
                        start,
                        len,
                    })
                }
                Ev::Rx(e)
                    if e.stage == RxStage::StackEntry as u8
                        && e.protocol == 6
                        && (1..=MAX_SPAN).contains(&e.end_seq.wrapping_sub(e.seq)) =>
                {
                    recvs.push(Recv {
                        frame: i + 1,
                        conn: conn(e.flow()),
                        seq: e.seq,
                        end_seq: e.end_seq,
                        ns: e.global_ns,
                    })
                }
                _ => {}
            }
        }
        let with_sw = sends.iter().filter(|s| !s.hw).map(|s| s.skb).collect();
        Rule {
            sends,
            recvs,
            with_sw,
            window_ns,
        }
    }

    /// Whether a send counts: an SND_SW, or an SND_HW of a sender skb
    /// with no SND_SW at all.
    fn counts(&self, s: &Send) -> bool {
        !s.hw || !self.with_sw.contains(&s.skb)
    }

    /// The pairing of send `t`, or `None` (not a send that counts, or
    /// nothing received its byte).
    fn pairing(&self, t: &Send) -> Option<Pairing> {
        if !self.counts(t) {
            return None;
        }
        let b = t.last();
        let near = |ns: u64| ns.abs_diff(t.ns) <= self.window_ns;
        let mut sends: Vec<&Send> = self
            .sends
            .iter()
            .filter(|s| s.conn == t.conn && s.holds(b) && near(s.ns) && self.counts(s))
            .collect();
        sends.sort_by_key(|s| (s.ns, s.frame));
        let mut recvs: Vec<&Recv> = self
            .recvs
            .iter()
            .filter(|r| r.conn == t.conn && r.holds(b) && near(r.ns))
            .collect();
        recvs.sort_by_key(|r| (r.ns, r.frame));
        if recvs.is_empty() {
            return None;
        }
        let fate = if sends.len() == recvs.len() {
            let k = sends.iter().position(|s| s.frame == t.frame).unwrap();
            Fate::Linked(recvs[k].frame)
        } else if recvs.len() > sends.len() {
            Fate::Ambiguous("unrecorded_send")
        } else {
            Fate::Ambiguous("lost_copy")
        };
        Some(Pairing {
            fate,
            sends: sends.len() as u32,
            recvs: recvs.len() as u32,
        })
    }

    fn shown(&self, frame: usize) -> Shown {
        let mut out = Shown::default();
        if let Some(r) = self.recvs.iter().find(|r| r.frame == frame) {
            // The sends whose byte it holds, in sequence order.
            let mut mine: Vec<(&Send, Pairing)> = self
                .sends
                .iter()
                .filter(|s| {
                    s.conn == r.conn && r.holds(s.last()) && s.ns.abs_diff(r.ns) <= self.window_ns
                })
                .filter_map(|s| Some((s, self.pairing(s)?)))
                .collect();
            mine.sort_by_key(|(s, _)| (s.last().wrapping_sub(r.seq), s.frame));
            let mut count = 0;
            for (s, p) in &mine {
                if p.fate != Fate::Linked(frame) {
                    continue;
                }
                let oneway = r.ns as i64 - s.ns as i64;
                out.peer_frames.push(s.frame as u64);
                out.oneway_ns.push(oneway);
                out.tskeys.push(s.tskey);
                if p.sends > 1 {
                    out.sends.push(p.sends);
                }
                out.violations += usize::from(oneway < 0);
                count += 1;
            }
            out.count = (count > 0).then_some(count);
            for (_, p) in &mine {
                if let Fate::Ambiguous(why) = p.fate {
                    out.ambiguous.push(why.to_owned());
                }
            }
        }
        if let Some(s) = self.sends.iter().find(|s| s.frame == frame) {
            let Some(p) = self.pairing(s) else {
                return out;
            };
            match p.fate {
                Fate::Linked(rf) => {
                    let r = self.recvs.iter().find(|r| r.frame == rf).unwrap();
                    let oneway = r.ns as i64 - s.ns as i64;
                    out.peer_frames.push(rf as u64);
                    out.oneway_ns.push(oneway);
                    if p.sends > 1 {
                        out.sends.push(p.sends);
                        out.receptions = Some(p.recvs);
                    }
                    out.violations = usize::from(oneway < 0);
                }
                Fate::Ambiguous(why) => {
                    out.ambiguous.push(why.to_owned());
                    out.sends.push(p.sends);
                    out.receptions = Some(p.recvs);
                }
            }
        }
        out
    }
}

const FIELDS: &[&str] = &[
    "frame.number",
    "nettrace.peer_frame",
    "nettrace.oneway_ns",
    "nettrace.peer_tskey",
    "nettrace.peer_sends",
    "nettrace.peer_receptions",
    "nettrace.peer_count",
    "nettrace.causality_violation",
    "nettrace.peer_ambiguous",
    "_ws.col.Info",
];

fn parse<T: std::str::FromStr>(row: &Row, field: &str) -> Vec<T>
where
    T::Err: std::fmt::Debug,
{
    row.all(field)
        .iter()
        .map(|v| v.parse().unwrap_or_else(|e| panic!("{field} {v:?}: {e:?}")))
        .collect()
}

fn shown(row: &Row) -> Shown {
    Shown {
        peer_frames: parse(row, "nettrace.peer_frame"),
        oneway_ns: parse(row, "nettrace.oneway_ns"),
        tskeys: parse(row, "nettrace.peer_tskey"),
        sends: parse(row, "nettrace.peer_sends"),
        receptions: parse(row, "nettrace.peer_receptions").first().copied(),
        count: parse(row, "nettrace.peer_count").first().copied(),
        violations: row.all("nettrace.causality_violation").len(),
        ambiguous: row.all("nettrace.peer_ambiguous").to_vec(),
    }
}

/// The capture record of one step.
fn payload(st: &Step, event_seq: u64) -> Vec<u8> {
    let mut body = Vec::new();
    let kind = match &st.ev {
        Ev::Tx(e) => {
            e.encode_body(&mut body);
            if st.v1 {
                let v1 = tracer_codec::layout::EVENTS
                    .iter()
                    .find(|l| l.kind == EventKind::TX)
                    .expect("TX layout")
                    .v1_body_len;
                body.truncate(v1);
            }
            EventKind::TX
        }
        Ev::Rx(e) => {
            e.encode_body(&mut body);
            EventKind::RX
        }
    };
    let mut rec = Vec::new();
    rec.extend_from_slice(&kind.to_le_bytes());
    rec.extend_from_slice(&(body.len() as u16).to_le_bytes());
    rec.extend_from_slice(&body);
    let mut out = Vec::new();
    tracer_codec::CaptureRecord::encode(
        &mut out,
        st.agent.agent_id,
        event_seq,
        st.agent.clock_source,
        st.agent.clock_state,
        st.agent.host,
        &rec,
    );
    out
}

/// The steps as a sink would write them: one interface per host, event
/// numbers per agent.
fn write_scenario(path: &std::path::Path, steps: &[Step]) {
    let mut next: HashMap<u64, u64> = HashMap::new();
    let frames: Vec<Frame> = steps
        .iter()
        .map(|st| {
            let seq = next.entry(st.agent.agent_id).or_insert(0);
            *seq += 1;
            Frame {
                interface: u32::from(st.agent.agent_id == AGENT_B.agent_id),
                time_ns: st.global_ns(),
                data: payload(st, *seq - 1),
            }
        })
        .collect();
    write_pcapng(
        path,
        LinkType::User0,
        &[AGENT_A.host, AGENT_B.host],
        &frames,
    );
}

/// Frame numbers matching `q`.
fn numbers(tshark: &Tshark, file: &std::path::Path, q: Query) -> Vec<usize> {
    tshark
        .fields(file, &["frame.number"], &q)
        .expect("clean decode")
        .iter()
        .map(|r| r.one("frame.number").parse().unwrap())
        .collect()
}

#[test]
fn sends_and_receptions_link_across_hosts() {
    let Some(tshark) = Tshark::or_skip("sends_and_receptions_link_across_hosts") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("peer.pcapng");
    let steps = scenario();
    write_scenario(&file, &steps);

    // Two passes (tshark -2, and the GUI after loading): every link, both
    // ways, from the whole file.
    let rule = Rule::new(&steps, steps.len());
    let rows = tshark
        .fields(&file, FIELDS, &Query::default().two_pass())
        .expect("clean decode");
    assert_eq!(rows.len(), steps.len());
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(shown(row), rule.shown(i + 1), "two passes, frame {}", i + 1);
    }

    // One pass: each frame shows what the rule gives on the file up to it,
    // i.e. each link only on the later of its two frames.
    let rows = tshark
        .fields(&file, FIELDS, &Query::default())
        .expect("clean decode");
    for (i, row) in rows.iter().enumerate() {
        let want = Rule::new(&steps, i + 1).shown(i + 1);
        assert_eq!(shown(row), want, "one pass, frame {}", i + 1);
    }

    // What the rule means, by hand, for the cases that matter.
    let us = |a: u64, b: u64| (at(b) - at(a)) as i64;
    let s = |f: usize| rule.shown(f);
    let amb = |f: usize| s(f).ambiguous;
    let gro = s(6);
    assert_eq!(
        gro.peer_frames,
        [3, 4, 5],
        "GRO: every sender skb it carries (version-1 sends: their tskey byte)"
    );
    assert_eq!(gro.oneway_ns, [us(10, 30), us(12, 30), us(14, 30)]);
    assert_eq!(gro.count, Some(3));
    for f in [3, 4, 5] {
        assert_eq!(s(f).peer_frames, [6], "frame {f} links forward");
    }
    assert!(s(1).peer_frames.is_empty() && s(2).peer_frames.is_empty());
    assert!(s(7).peer_frames.is_empty(), "only STACK_ENTRY is a peer");
    // Two sends of k4's byte, one copy received: which one is not known.
    for f in [8, 11] {
        assert_eq!(
            (s(f).peer_frames.len(), amb(f)),
            (0, vec!["lost_copy".to_owned()]),
            "frame {f}: two sends, one reception"
        );
        assert_eq!(
            (s(f).sends.as_slice(), s(f).receptions),
            ([2].as_slice(), Some(1))
        );
    }
    assert_eq!(amb(13), ["lost_copy", "lost_copy"]);
    assert!(s(13).count.is_none());
    // Two sends and two copies of k5: first with first.
    assert_eq!((s(10).peer_frames[0], s(14).peer_frames[0]), (9, 12));
    assert_eq!((s(9).peer_frames[0], s(12).peer_frames[0]), (10, 14));
    assert_eq!(s(10).sends, [2]);
    let late = s(15);
    assert_eq!(late.peer_frames, [16], "a receive before its send");
    assert_eq!((late.oneway_ns[0], late.violations), (-us(300, 305), 1));
    assert_eq!((s(16).peer_frames[0], s(16).violations), (15, 1));
    assert!(s(17).peer_frames.is_empty() && s(18).peer_frames.is_empty());
    assert!(amb(17).is_empty(), "never received is not ambiguous");
    assert_eq!(s(22).peer_frames, [19, 20], "SND_HW counts without SND_SW");
    assert!(s(21).peer_frames.is_empty(), "SND_HW of an skb with SND_SW");
    assert!(s(23).count.is_none() && s(24).count.is_none() && s(26).count.is_none());
    assert!(
        s(25).peer_frames.is_empty(),
        "the other direction is another flow"
    );
    assert_eq!(
        s(29).peer_frames,
        [27, 28],
        "across 2^32, IPv4-mapped sender"
    );
    // One send of 4999, two copies (the second an overlapping resend that
    // was never stamped).
    assert_eq!(amb(30), ["unrecorded_send"]);
    assert!(s(30).peer_frames.is_empty());
    assert_eq!((amb(31), amb(32)), (amb(30), amb(30)));
    assert_eq!((s(34).peer_frames[0], s(34).violations), (33, 1));
    // (1) The receiver's clock runs ahead: the second send is stamped
    // before the first copy, yet copies pair in order (the old "latest
    // send before the receive" rule paired both copies with frame 36).
    assert_eq!((s(35).peer_frames[0], s(36).peer_frames[0]), (37, 38));
    assert_eq!((s(37).peer_frames[0], s(38).peer_frames[0]), (35, 36));
    assert_eq!(
        (s(37).oneway_ns[0], s(38).oneway_ns[0]),
        (us(600, 615), us(610, 625))
    );
    assert_eq!(s(37).violations + s(38).violations, 0);
    // (2) The send held bytes past its tskey: it follows its last byte.
    assert_eq!(s(40).peer_frames, [42]);
    assert_eq!(
        (s(42).peer_frames.as_slice(), s(42).tskeys.as_slice()),
        ([40u64].as_slice(), [20_999].as_slice())
    );
    assert!(
        s(41).count.is_none() && amb(41).is_empty(),
        "holds the tskey only"
    );
    // (3) A tag on an skb already sent: one recorded send, two copies.
    assert_eq!(amb(45), ["unrecorded_send"]);
    assert!(s(45).peer_frames.is_empty() && s(45).violations == 0);
    assert_eq!(
        (s(45).sends.as_slice(), s(45).receptions),
        ([1].as_slice(), Some(2))
    );
    assert_eq!((amb(44), amb(46)), (amb(45), amb(45)));
    assert!(s(44).violations == 0 && s(43).peer_frames.is_empty());
    // The window: the lost send's resend and its copy are 300 ms away.
    assert!(s(47).peer_frames.is_empty() && amb(47).is_empty());
    assert_eq!((s(48).peer_frames[0], s(49).peer_frames[0]), (49, 48));

    // Filterable: exactly the frames of the violations, both ends, two
    // passes; in one pass only the later frame of each pair knows.
    let q = Query::default().filter("nettrace.causality_violation");
    assert_eq!(
        numbers(&tshark, &file, q.clone().two_pass()),
        [15, 16, 33, 34]
    );
    // One pass decides with the frames so far: send 45 sees only the
    // untagged copy 44 (one send, one copy) and links to it, a violation
    // that copy 46 later shows to be an ambiguity. Two passes see both.
    assert_eq!(numbers(&tshark, &file, q), [16, 34, 45]);
    assert_eq!(
        numbers(
            &tshark,
            &file,
            Query::default()
                .two_pass()
                .filter("nettrace.peer_frame == 6")
        ),
        [3, 4, 5]
    );
    assert_eq!(
        numbers(
            &tshark,
            &file,
            Query::default()
                .two_pass()
                .filter("nettrace.stage == SND_SW && !nettrace.peer_frame")
        ),
        [8, 11, 17, 25, 30, 45, 47]
    );
    assert_eq!(
        numbers(
            &tshark,
            &file,
            Query::default()
                .two_pass()
                .filter("nettrace.peer_ambiguous == \"unrecorded_send\"")
        ),
        [30, 31, 32, 44, 45, 46]
    );
    let slow: Vec<usize> = (1..=steps.len())
        .filter(|&f| rule.shown(f).oneway_ns.iter().any(|&v| v > 19_000))
        .collect();
    assert_eq!(slow, [3, 6, 27, 29]);
    assert_eq!(
        numbers(
            &tshark,
            &file,
            Query::default()
                .two_pass()
                .filter("nettrace.oneway_ns > 19000")
        ),
        slow
    );

    // The expert warning: sequence group, warning severity, on both frames.
    let rows = tshark
        .fields(
            &file,
            &[
                "frame.number",
                "_ws.expert.message",
                "_ws.expert.severity",
                "_ws.expert.group",
            ],
            &Query::default()
                .two_pass()
                .filter("nettrace.causality_violation.expert"),
        )
        .expect("clean decode");
    let flagged: Vec<&str> = rows.iter().map(|r| r.one("frame.number")).collect();
    assert_eq!(flagged, ["15", "16", "33", "34"]);
    for (r, by) in rows.iter().zip(["5.0µs", "5.0µs", "1.0µs", "1.0µs"]) {
        let msg = r.one("_ws.expert.message");
        assert!(
            msg.starts_with(&format!(
                "Causality violation: received {by} before it was sent"
            )),
            "{r:?}"
        );
        assert!(
            r.all("_ws.expert.severity").iter().all(|s| s == "6291456"),
            "{r:?}"
        );
        assert!(
            r.all("_ws.expert.group").iter().all(|g| g == "33554432"),
            "{r:?}"
        );
    }

    // Ambiguity: a note (not a warning) in the sequence group, on the
    // send and on the receptions of its byte.
    let rows = tshark
        .fields(
            &file,
            &[
                "frame.number",
                "_ws.expert.message",
                "_ws.expert.severity",
                "_ws.expert.group",
            ],
            &Query::default()
                .two_pass()
                .filter("nettrace.peer_ambiguous.expert"),
        )
        .expect("clean decode");
    let flagged: Vec<usize> = rows
        .iter()
        .map(|r| r.one("frame.number").parse().unwrap())
        .collect();
    assert_eq!(flagged, [8, 11, 13, 30, 31, 32, 44, 45, 46]);
    for r in &rows {
        assert!(
            r.all("_ws.expert.severity").iter().all(|s| s == "4194304"),
            "{r:?}"
        );
        assert!(
            r.all("_ws.expert.group").iter().all(|g| g == "33554432"),
            "{r:?}"
        );
    }
    let msg45 = rows[7].all("_ws.expert.message").join(" | ");
    assert!(
        msg45.contains("Ambiguous send (unrecorded_send): 1 recorded send and 2 receptions of its last byte within ±250 ms"),
        "{msg45}"
    );

    // The Info column names the peer, or the ambiguity.
    let rows = tshark
        .fields(&file, &["_ws.col.Info"], &Query::default().two_pass())
        .expect("clean decode");
    let info = |f: usize| rows[f - 1].one("_ws.col.Info").to_owned();
    assert!(
        info(3).contains("⇒ frame 6 (one-way +20.0µs)"),
        "{}",
        info(3)
    );
    assert!(
        info(6).contains("⇐ frames 3..5 (3 skbs, one-way +16.0µs..+20.0µs)"),
        "{}",
        info(6)
    );
    assert!(
        info(15).contains("⇐ frame 16 (one-way -5.0µs) [causality violation]"),
        "{}",
        info(15)
    );
    assert!(info(8).ends_with("[ambiguous: lost_copy]"), "{}", info(8));
    assert!(
        info(44).ends_with("[ambiguous: unrecorded_send]"),
        "{}",
        info(44)
    );
}

/// The window is the preference `nettrace.peer_window_ms`: widened past
/// 300 ms, the lost send and its resend of frames 47/48 both hold the byte
/// of the one copy (frame 49), so both are ambiguous.
#[test]
fn peer_window_is_a_preference() {
    let Some(tshark) = Tshark::or_skip("peer_window_is_a_preference") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("peer.pcapng");
    let steps = scenario();
    write_scenario(&file, &steps);
    let rule = Rule::with_window(&steps, steps.len(), 400_000_000);
    let rows = tshark
        .fields(
            &file,
            FIELDS,
            &Query::default()
                .two_pass()
                .pref("nettrace.peer_window_ms", "400"),
        )
        .expect("clean decode");
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(
            shown(row),
            rule.shown(i + 1),
            "window 400 ms, frame {}",
            i + 1
        );
    }
    assert_eq!(rule.shown(47).ambiguous, ["lost_copy"]);
    assert_eq!(rule.shown(48).ambiguous, ["lost_copy"]);
}

/// The filter examples of docs/reading-a-trace.md's "Across hosts" section
/// parse and match what they say on the crafted trace (two passes).
#[test]
fn docs_filters_match() {
    let Some(tshark) = Tshark::or_skip("docs_filters_match") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("peer.pcapng");
    write_scenario(&file, &scenario());
    let doc = std::fs::read_to_string(
        tracer_e2e::bins::repo_root()
            .join("docs")
            .join("reading-a-trace.md"),
    )
    .unwrap();
    let section = doc
        .split("## Across hosts")
        .nth(1)
        .expect("Across hosts section");
    let block = section.split("```").nth(1).expect("filter code block");
    let filters: Vec<&str> = block
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .collect();
    // Violations: frames 15, 16, 33, 34; nothing above 1 ms; unlinked
    // sends 8, 11, 17, 25, 30, 45, 47; GRO receptions 6, 22, 29; ambiguous
    // 8, 11, 13, 30, 31, 32, 44, 45, 46.
    let want = [4, 0, 7, 3, 9];
    assert_eq!(filters.len(), want.len(), "{filters:?}");
    for (filter, want) in filters.iter().zip(want) {
        let rows = tshark
            .fields(
                &file,
                &["frame.number"],
                &Query::default().two_pass().filter(filter),
            )
            .unwrap_or_else(|e| panic!("docs filter {filter:?}: {e}"));
        assert_eq!(rows.len(), want, "{filter}");
    }
}

#[test]
fn peer_links_can_be_turned_off() {
    let Some(tshark) = Tshark::or_skip("peer_links_can_be_turned_off") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("peer.pcapng");
    write_scenario(&file, &scenario());
    let q = Query::default()
        .two_pass()
        .pref("nettrace.peer_links", "FALSE")
        .filter(
            "nettrace.peer_frame || nettrace.oneway_ns || nettrace.causality_violation \
         || nettrace.peer_ambiguous",
        );
    let rows = tshark
        .fields(&file, &["frame.number"], &q)
        .expect("clean decode");
    assert!(rows.is_empty(), "{rows:?}");
}

// ---------------------------------------------------------------------------
// The dissector and nettrace-match on one synthetic trace.
// ---------------------------------------------------------------------------

/// One direction of the synthetic connection.
struct Dir {
    sender: &'static Agent,
    receiver: &'static Agent,
    flow: Flow,
    cookie: u64,
    isn: u32,
}

/// What happens to one sender skb of the synthetic trace.
#[derive(Debug, Clone, Copy, PartialEq)]
enum SkbFate {
    /// Sent once, received in a GRO skb.
    Normal,
    /// The copy is lost; a retransmission 400 µs later arrives alone
    /// (two sends, one copy: ambiguous, lost_copy).
    Lost,
    /// Received in a GRO skb, and retransmitted 300 µs later anyway; the
    /// duplicate arrives too (two and two: paired in order).
    Spurious,
    /// The copy is lost; the resend comes 300 ms later, outside the
    /// window (the first send is unmatched, the resend paired).
    LostFar,
    /// The tag went on an skb already sent (SENDMSG SENT, its first
    /// transmission unstamped, received in a GRO skb); a stamped
    /// retransmission arrives alone (one send, two copies:
    /// unrecorded_send).
    Untagged,
    /// TCP grew the skb from the next one: its SND_SW holds both skbs'
    /// bytes; the next tag never gets an SND_SW.
    Grown,
    /// Sent by an agent of an older build: a version-1 SND_SW.
    V1,
}

fn skb_fate(i: u64, last: bool) -> SkbFate {
    match i {
        _ if i % 29 == 11 => SkbFate::Lost,
        _ if i % 31 == 13 => SkbFate::Spurious,
        _ if i % 97 == 50 => SkbFate::LostFar,
        _ if i % 37 == 19 => SkbFate::Untagged,
        _ if i % 43 == 21 && !last => SkbFate::Grown,
        _ if i % 17 == 5 => SkbFate::V1,
        _ => SkbFate::Normal,
    }
}

/// A small deterministic mix, for jitter.
fn mix(x: u64) -> u64 {
    let h = x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h ^ (h >> 31)).wrapping_mul(0xbf58_476d_1ce4_e5b9) >> 17
}

/// The synthetic trace being written: both hosts' events, stamped.
#[derive(Default)]
struct Trace {
    /// (stamped ns, creation order, step)
    events: Vec<(u64, usize, Step)>,
}

/// A GRO skb being built: its bytes, segments and arrival (true time).
struct Gro {
    start: u32,
    end: u32,
    segs: u32,
    at: u64,
}

impl Trace {
    /// An event of `agent` that happened at true time `true_ns`, stamped
    /// by the host's clock: host A's 5 µs ahead, host B's 12 µs behind.
    fn emit(&mut self, agent: &'static Agent, true_ns: u64, make: impl Fn(u64) -> Step) {
        let off: i64 = if agent.agent_id == AGENT_B.agent_id {
            -12_000
        } else {
            5_000
        };
        let ns = true_ns.checked_add_signed(off).expect("stamp");
        let n = self.events.len();
        self.events.push((ns, n, make(ns)));
    }

    /// A SENDMSG tagging `dir`'s skb `[seq, end)`; `sent`: an skb already
    /// sent.
    fn sendmsg(&mut self, dir: &Dir, t: u64, seq: u32, end: u32, sent: bool) {
        let tskey = end.wrapping_sub(1);
        self.emit(dir.sender, t, |ns| {
            let s = tx_ns(dir.sender, dir.cookie, &dir.flow, SENDMSG, tskey, ns).bytes(seq, end);
            if sent {
                s.tagged_sent()
            } else {
                s
            }
        });
    }

    /// A transmission of `dir`'s tag `tskey` at true time `t` (SCHED,
    /// SND_SW and with `hw` an SND_HW), holding `range` (`None`: version-1
    /// events).
    fn send(&mut self, dir: &Dir, t: u64, tskey: u32, range: Option<(u32, u32)>, hw: bool) {
        let event = |stage: u8| {
            move |ns: u64| {
                let s = tx_ns(dir.sender, dir.cookie, &dir.flow, stage, tskey, ns);
                match range {
                    Some((a, b)) => s.bytes(a, b),
                    None => s.v1(),
                }
            }
        };
        self.emit(dir.sender, t - 1_000, event(SCHED));
        self.emit(dir.sender, t, event(SND_SW));
        if hw {
            self.emit(dir.sender, t + 2_000, event(SND_HW));
        }
    }

    /// A reception of `dir`'s bytes `[seq, end)` at true time `t`
    /// (STACK_ENTRY, then TCP_INPUT).
    fn arrive(&mut self, dir: &Dir, t: u64, seq: u32, end: u32) {
        for (stage, dt) in [(RxStage::StackEntry, 0), (RxStage::TcpInput, 1_000)] {
            self.emit(dir.receiver, t + dt, |ns| {
                rx_ns(dir.receiver, &dir.flow, stage, seq, end, ns)
            });
        }
    }

    /// The GRO skb `run`, if any, arrives.
    fn flush(&mut self, dir: &Dir, run: &mut Option<Gro>) {
        if let Some(g) = run.take() {
            self.arrive(dir, g.at, g.start, g.end);
        }
    }

    /// The steps in global-time order, as the sink writes them.
    fn into_steps(mut self) -> Vec<Step> {
        self.events.sort_by_key(|(ns, n, _)| (*ns, *n));
        self.events.into_iter().map(|(_, _, s)| s).collect()
    }
}

/// A two-way synthetic connection with known truth: 1000-byte skbs every
/// 10 µs each way, GRO of up to three skbs, the fates of [`SkbFate`],
/// SND_HW after some SND_SW (ignored: the skb has an SND_SW), host A's
/// sequence numbers wrapping past 2^32, and clocks off (host A +5 µs,
/// host B -12 µs) so that some A -> B receptions show before their sends.
fn synthetic() -> Vec<Step> {
    const SKBS: u64 = 240;
    const LEN: u32 = 1000;
    let dirs = [
        Dir {
            sender: &AGENT_A,
            receiver: &AGENT_B,
            flow: flow("10.1.0.1", 41000, "10.1.0.2", 5201),
            cookie: 501,
            isn: u32::MAX - 150_000,
        },
        Dir {
            sender: &AGENT_B,
            receiver: &AGENT_A,
            flow: flow("10.1.0.2", 5201, "10.1.0.1", 41000),
            cookie: 502,
            isn: 7_000_000,
        },
    ];
    let mut trace = Trace::default();
    for (d, dir) in dirs.iter().enumerate() {
        let mut run: Option<Gro> = None;
        let mut skip = false;
        for i in 0..SKBS {
            let t = T0 + d as u64 * 3_333 + i * 10_000;
            let seq = dir.isn.wrapping_add(i as u32 * LEN);
            let end = seq.wrapping_add(LEN);
            let tskey = end.wrapping_sub(1);
            let delay = 15_000 + mix(i ^ ((d as u64) << 40)) % 4_000;
            let fate = skb_fate(i, i + 1 == SKBS);
            let hw = d == 1 && i % 5 == 0;
            if skip {
                // Its bytes left in the previous skb: SENDMSG only.
                skip = false;
                trace.sendmsg(dir, t - 3_000, seq, end, false);
                continue;
            }
            trace.sendmsg(dir, t - 3_000, seq, end, fate == SkbFate::Untagged);
            let mut seg_end = end;
            match fate {
                SkbFate::Untagged => {} // its first transmission is not stamped
                SkbFate::Grown => {
                    seg_end = end.wrapping_add(LEN);
                    skip = true;
                    trace.send(dir, t, tskey, Some((seq, seg_end)), hw);
                }
                SkbFate::V1 => trace.send(dir, t, tskey, None, hw),
                _ => trace.send(dir, t, tskey, Some((seq, end)), hw),
            }
            if matches!(fate, SkbFate::Lost | SkbFate::LostFar) {
                trace.flush(dir, &mut run);
                let again = t + if fate == SkbFate::Lost {
                    400_000
                } else {
                    300_000_000
                };
                trace.send(dir, again, tskey, Some((seq, end)), false);
                trace.arrive(dir, again + delay, seq, end);
                continue;
            }
            let segs = if fate == SkbFate::Grown { 2 } else { 1 };
            let g = match run.take() {
                Some(g) => Gro {
                    end: seg_end,
                    segs: g.segs + segs,
                    at: t + delay,
                    ..g
                },
                None => Gro {
                    start: seq,
                    end: seg_end,
                    segs,
                    at: t + delay,
                },
            };
            let full = g.segs >= 3;
            run = Some(g);
            if full {
                trace.flush(dir, &mut run);
            }
            if matches!(fate, SkbFate::Spurious | SkbFate::Untagged) {
                let again = t + if fate == SkbFate::Spurious {
                    300_000
                } else {
                    200_000
                };
                trace.send(dir, again, tskey, Some((seq, end)), false);
                trace.arrive(dir, again + delay, seq, end);
            }
        }
        trace.flush(dir, &mut run);
    }
    trace.into_steps()
}

/// One pair of `nettrace-match --pairs`.
#[derive(Debug)]
struct MatchedPair {
    sender: String,
    receiver: String,
    tskey: u32,
    send_ns: u64,
    rx_range: (u32, u32),
    stack_ns: u64,
    one_way_ns: i64,
}

fn matched_pairs(path: &std::path::Path) -> Vec<MatchedPair> {
    let text = std::fs::read_to_string(path).expect("pairs file");
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("pair JSON");
            let stage = |name: &str| -> u64 {
                v["stages_ns"]
                    .as_array()
                    .expect("stages_ns")
                    .iter()
                    .find(|s| s[0] == name)
                    .unwrap_or_else(|| panic!("{name} in {l}"))[1]
                    .as_u64()
                    .unwrap()
            };
            let u32_at = |x: &serde_json::Value| x.as_u64().unwrap() as u32;
            MatchedPair {
                sender: v["sender"].as_str().unwrap().to_owned(),
                receiver: v["receiver"].as_str().unwrap().to_owned(),
                tskey: u32_at(&v["tskey"]),
                send_ns: stage("SND_SW"),
                rx_range: (u32_at(&v["rx_range"][0]), u32_at(&v["rx_range"][1])),
                stack_ns: stage("STACK_ENTRY"),
                one_way_ns: v["one_way_ns"].as_i64().expect("one_way_ns"),
            }
        })
        .collect()
}

/// The dissector and nettrace-match apply one rule: on a synthetic trace
/// with GRO, losses, spurious and far retransmissions, ranges past the
/// tskey, tags of skbs already sent, version-1 events, SND_HW, a sequence
/// wrap and clocks that disagree, every pair the matcher writes
/// (`--pairs`) is exactly one link of the dissector (same send frame, same
/// reception frame, same one-way latency), the dissector makes no other
/// link, and per direction its links and its ambiguous sends by reason
/// count what the matcher's report counts.
#[test]
fn dissector_links_are_the_matcher_pairs() {
    let Some(tshark) = Tshark::or_skip("dissector_links_are_the_matcher_pairs") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("synthetic.pcapng");
    let steps = synthetic();
    write_scenario(&file, &steps);

    // The matcher.
    let pairs_file = dir.path().join("pairs.jsonl");
    let out = std::process::Command::new(tracer_e2e::bins::bin("nettrace-match"))
        .arg("--json")
        .arg("--pairs")
        .arg(&pairs_file)
        .arg(&file)
        .output()
        .expect("run nettrace-match");
    assert!(
        out.status.success(),
        "nettrace-match: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("report JSON");
    let pairs = matched_pairs(&pairs_file);

    // The dissector, two passes.
    let rows = tshark
        .fields(&file, FIELDS, &Query::default().two_pass())
        .expect("clean decode");
    assert_eq!(rows.len(), steps.len());
    // Its links, from the send frames and from the reception frames.
    let mut send_links: BTreeMap<usize, (usize, i64)> = BTreeMap::new();
    let mut recv_links: BTreeMap<(usize, usize), i64> = BTreeMap::new();
    let mut ambiguous: BTreeMap<(String, String), u64> = BTreeMap::new();
    for (i, row) in rows.iter().enumerate() {
        let frame = i + 1;
        let sh = shown(row);
        match &steps[i].ev {
            Ev::Tx(_) => {
                if let (Some(&p), Some(&o)) = (sh.peer_frames.first(), sh.oneway_ns.first()) {
                    send_links.insert(frame, (p as usize, o));
                }
                for why in sh.ambiguous {
                    *ambiguous
                        .entry((steps[i].agent.host.to_owned(), why))
                        .or_default() += 1;
                }
            }
            Ev::Rx(_) => {
                for (p, o) in sh.peer_frames.iter().zip(&sh.oneway_ns) {
                    recv_links.insert((*p as usize, frame), *o);
                }
            }
        }
    }
    let both: BTreeMap<(usize, usize), i64> =
        send_links.iter().map(|(&s, &(r, o))| ((s, r), o)).collect();

    // Every matcher pair is one dissector link.
    let find = |pred: &dyn Fn(&Step) -> bool, what: &str| -> usize {
        let hits: Vec<usize> = steps
            .iter()
            .enumerate()
            .filter(|(_, s)| pred(s))
            .map(|(i, _)| i + 1)
            .collect();
        assert_eq!(hits.len(), 1, "{what}: frames {hits:?}");
        hits[0]
    };
    let mut per_dir: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut paired = Vec::new();
    for p in &pairs {
        let send = find(
            &|s| {
                s.agent.host == p.sender
                    && matches!(&s.ev, Ev::Tx(e) if e.stage == SND_SW
                        && e.tskey == p.tskey && e.global_ns == p.send_ns)
            },
            &format!("send of {p:?}"),
        );
        let recv = find(
            &|s| {
                s.agent.host == p.receiver
                    && matches!(&s.ev, Ev::Rx(e) if e.stage == RxStage::StackEntry as u8
                        && (e.seq, e.end_seq) == p.rx_range && e.global_ns == p.stack_ns)
            },
            &format!("reception of {p:?}"),
        );
        assert_eq!(
            send_links.get(&send),
            Some(&(recv, p.one_way_ns)),
            "matcher pair {p:?}: send frame {send}, reception frame {recv}"
        );
        paired.push((send, recv));
        *per_dir
            .entry((p.sender.clone(), p.receiver.clone()))
            .or_default() += 1;
    }
    paired.sort_unstable();
    assert_eq!(
        paired,
        both.keys().copied().collect::<Vec<_>>(),
        "the dissector links exactly the matcher's pairs"
    );
    assert_eq!(both, recv_links, "a link shows on both of its frames");

    // Per direction: links = matched; ambiguous sends by reason.
    let directions = report["directions"].as_array().expect("directions");
    assert_eq!(directions.len(), 2, "{directions:?}");
    for d in directions {
        let sender = d["sender"].as_str().unwrap().to_owned();
        let receiver = d["receiver"].as_str().expect("traced receiver").to_owned();
        let matched = d["matched"].as_u64().unwrap();
        let links = send_links
            .keys()
            .filter(|&&f| steps[f - 1].agent.host == sender)
            .count() as u64;
        assert_eq!(links, matched, "{sender} -> {receiver}: links vs matched");
        assert_eq!(
            per_dir
                .get(&(sender.clone(), receiver.clone()))
                .copied()
                .unwrap_or(0),
            matched,
            "{sender} -> {receiver}: pairs written vs matched"
        );
        for why in ["unrecorded_send", "lost_copy"] {
            let n = d["ambiguous"][why].as_u64().unwrap();
            assert_eq!(
                ambiguous
                    .get(&(sender.clone(), why.to_owned()))
                    .copied()
                    .unwrap_or(0),
                n,
                "{sender} -> {receiver}: ambiguous {why}"
            );
            assert!(n > 0, "{sender} -> {receiver}: the trace has {why} sends");
        }
        assert!(d["matched_retransmits"].as_u64().unwrap() > 0, "{d}");
        assert!(d["unmatched"]["no_rx"].as_u64().unwrap() > 0, "{d}");
    }
    let violations = send_links.values().filter(|(_, o)| *o < 0).count();
    assert!(
        violations > 0 && violations < send_links.len() / 2,
        "some receptions show before their sends: {violations}"
    );

    // And every frame shows what the rule of this file gives.
    let rule = Rule::new(&steps, steps.len());
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(shown(row), rule.shown(i + 1), "synthetic, frame {}", i + 1);
    }
}
