//! The dissector's cross-host peer links on a crafted two-host trace: each
//! sender SND_SW (or SND_HW) frame and the receiver's STACK_ENTRY frame of
//! the same TCP bytes point at each other (`nettrace.peer_frame`) with the
//! one-way latency (`nettrace.oneway_ns`); a receive before its send is a
//! causality violation (a flag and an expert warning on both frames). The
//! links tshark shows, in two passes and in one, are compared with the rule
//! of docs/reading-a-trace.md computed here independently; GRO skbs,
//! retransmissions, sequence wrap-around, IPv4-mapped senders, IPv6, SND_HW
//! and unmatched packets are covered.

mod dissector_common;

use std::net::IpAddr;

use dissector_common::{write_pcapng, Agent, Frame, Skb, AGENT_A, AGENT_B, SCHED, SENDMSG, T0};
use pcap_file::DataLink;
use tracer_codec::{EventKind, Flow, RxEvent, RxStage, TxEvent, TxStage};
use tracer_e2e::tshark::{Query, Row, Tshark};

const SND_SW: u8 = TxStage::SndSw as u8;
const SND_HW: u8 = TxStage::SndHw as u8;

/// One event of the trace, in file order.
#[derive(Clone)]
enum Ev {
    Tx(TxEvent),
    Rx(RxEvent),
}

struct Step {
    agent: &'static Agent,
    ev: Ev,
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

/// A TX event of the sender (host A) at `us`.
fn tx(f: &Flow, stage: u8, tskey: u32, us: u64) -> Step {
    tx_on(&AGENT_A, f, stage, tskey, us)
}

fn tx_on(agent: &'static Agent, f: &Flow, stage: u8, tskey: u32, us: u64) -> Step {
    let skb = Skb {
        cookie: 77,
        tskey,
        flow: *f,
        netns: 4_026_531_840,
    };
    Step {
        agent,
        ev: Ev::Tx(skb.at(stage, at(us), 0)),
    }
}

/// An RX event of the receiver (host B) at `us`; `f` in the data's
/// direction (sender first), as the RX probe writes it.
fn rx(f: &Flow, stage: RxStage, seq: u32, end_seq: u32, us: u64) -> Step {
    let put = |ip: IpAddr| match ip {
        IpAddr::V4(v4) => {
            let mut a = [0u8; 16];
            a[..4].copy_from_slice(&v4.octets());
            a
        }
        IpAddr::V6(v6) => v6.octets(),
    };
    let ev = RxEvent {
        mono_ns: at(us) - 1_700_000_000_000_000_000,
        global_ns: at(us),
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
        agent: &AGENT_B,
        ev: Ev::Rx(ev),
    }
}

/// The trace, in file order (frame n = index n - 1). Sequence numbers of
/// F1 start at ISN = 1,000,000 with 1000-byte segments.
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
    let wrap = u32::MAX - 999; // 1000 bytes before 2^32
    let mut udp = rx(&f1, StackEntry, 0, 0, 395);
    if let Ev::Rx(e) = &mut udp.ev {
        e.protocol = 17;
    }
    vec![
        tx(&f1, SENDMSG, 1_001_999, 1),                 // 1: not a send
        tx(&f1, SCHED, 1_001_999, 2),                   // 2
        tx(&f1, SND_SW, 1_001_999, 10),                 // 3: k1
        tx(&f1, SND_SW, 1_003_999, 12),                 // 4: k2
        tx(&f1, SND_SW, 1_004_999, 14),                 // 5: k3
        rx(&f1, StackEntry, 1_000_000, 1_005_000, 30),  // 6: GRO of k1..k3
        rx(&f1, TcpInput, 1_000_000, 1_005_000, 31),    // 7: not a peer
        tx(&f1, SND_SW, 1_006_999, 40),                 // 8: k4, lost
        tx(&f1, SND_SW, 1_007_999, 42),                 // 9: k5
        rx(&f1, StackEntry, 1_007_000, 1_008_000, 50),  // 10: k5 (send 9)
        tx(&f1, SND_SW, 1_006_999, 240),                // 11: k4 again
        tx(&f1, SND_SW, 1_007_999, 241),                // 12: k5 again (spurious)
        rx(&f1, StackEntry, 1_005_000, 1_007_000, 250), // 13: k4 (send 11)
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
        tx(&f4, SND_SW, 4999, 500),                     // 30: IPv6
        rx(&f4, StackEntry, 4000, 5000, 510),           // 31
        rx(&f4, StackEntry, 2000, 5000, 520),           // 32: overlapping resend
        tx(&f4, SND_SW, 5999, 530),                     // 33
        rx(&f4, StackEntry, 5000, 6000, 529), // 34: 1 µs before its send, after it in the file
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
    tskey: u32,
    hw: bool,
    ns: u64,
}

/// A received TCP data skb: an RX STACK_ENTRY frame with a range.
struct Recv {
    frame: usize,
    conn: Conn,
    seq: u32,
    end_seq: u32,
    ns: u64,
}

impl Recv {
    /// Whether this skb carries sequence number `b` (mod 2^32).
    fn carries(&self, b: u32) -> bool {
        b.wrapping_sub(self.seq) < self.end_seq.wrapping_sub(self.seq)
    }
}

/// What one frame shows of its peers, in tree order.
#[derive(Debug, Default, PartialEq)]
struct Shown {
    peer_frames: Vec<u64>,
    oneway_ns: Vec<i64>,
    tskeys: Vec<u32>,
    /// nettrace.peer_sends: only where a skb was sent more than once.
    sends: Vec<u32>,
    receptions: Option<u32>,
    count: Option<u32>,
    violations: usize,
}

/// The rule of docs/reading-a-trace.md ("Across hosts") over the frames
/// before `upto` (frame numbers from 1; a single pass knows only those).
struct Rule {
    sends: Vec<Send>,
    recvs: Vec<Recv>,
}

impl Rule {
    fn new(steps: &[Step], upto: usize) -> Self {
        let mut sends = Vec::new();
        let mut recvs = Vec::new();
        for (i, st) in steps.iter().take(upto).enumerate() {
            match &st.ev {
                Ev::Tx(e) if e.stage == SND_SW || e.stage == SND_HW => sends.push(Send {
                    frame: i + 1,
                    conn: conn(e.flow()),
                    tskey: e.tskey,
                    hw: e.stage == SND_HW,
                    ns: e.global_ns,
                }),
                Ev::Rx(e)
                    if e.stage == RxStage::StackEntry as u8
                        && e.protocol == 6
                        && e.seq != e.end_seq =>
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
        Rule { sends, recvs }
    }

    /// The sends that count for skb (`conn`, `tskey`): SND_SW frames, else
    /// SND_HW; by time.
    fn attempts(&self, c: Conn, tskey: u32) -> Vec<&Send> {
        let of = |hw: bool| -> Vec<&Send> {
            let mut v: Vec<&Send> = self
                .sends
                .iter()
                .filter(|s| s.conn == c && s.tskey == tskey && s.hw == hw)
                .collect();
            v.sort_by_key(|s| (s.ns, s.frame));
            v
        };
        let sw = of(false);
        if sw.is_empty() {
            of(true)
        } else {
            sw
        }
    }

    /// The send a receive at `ns` links to: the latest at or before it,
    /// else the earliest.
    fn choose<'a>(att: &[&'a Send], ns: u64) -> &'a Send {
        att.iter().rev().find(|s| s.ns <= ns).unwrap_or(&att[0])
    }

    fn shown(&self, frame: usize) -> Shown {
        let mut out = Shown::default();
        if let Some(r) = self.recvs.iter().find(|r| r.frame == frame) {
            let mut tskeys: Vec<u32> = self
                .sends
                .iter()
                .filter(|s| s.conn == r.conn && r.carries(s.tskey))
                .map(|s| s.tskey)
                .collect();
            tskeys.sort_by_key(|t| t.wrapping_sub(r.seq));
            tskeys.dedup();
            for t in &tskeys {
                let att = self.attempts(r.conn, *t);
                let s = Self::choose(&att, r.ns);
                let oneway = r.ns as i64 - s.ns as i64;
                out.peer_frames.push(s.frame as u64);
                out.oneway_ns.push(oneway);
                out.tskeys.push(*t);
                if att.len() > 1 {
                    out.sends.push(att.len() as u32);
                }
                out.violations += usize::from(oneway < 0);
            }
            out.count = (!tskeys.is_empty()).then_some(tskeys.len() as u32);
        }
        if let Some(s) = self.sends.iter().find(|s| s.frame == frame) {
            let att = self.attempts(s.conn, s.tskey);
            if !att.iter().any(|a| a.frame == frame) {
                return out; // an SND_HW of an skb that has SND_SW
            }
            let mine: Vec<&Recv> = self
                .recvs
                .iter()
                .filter(|r| {
                    r.conn == s.conn
                        && r.carries(s.tskey)
                        && Self::choose(&att, r.ns).frame == frame
                })
                .collect();
            if let Some(r) = mine.iter().min_by_key(|r| (r.ns, r.frame)) {
                let oneway = r.ns as i64 - s.ns as i64;
                out.peer_frames.push(r.frame as u64);
                out.oneway_ns.push(oneway);
                out.receptions = (mine.len() > 1).then_some(mine.len() as u32);
                if att.len() > 1 {
                    out.sends.push(att.len() as u32);
                }
                out.violations = usize::from(oneway < 0);
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
    }
}

/// The capture record of one step.
fn payload(st: &Step, event_seq: u64) -> Vec<u8> {
    let mut body = Vec::new();
    let kind = match &st.ev {
        Ev::Tx(e) => {
            e.encode_body(&mut body);
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

fn global_ns(st: &Step) -> u64 {
    match &st.ev {
        Ev::Tx(e) => e.global_ns,
        Ev::Rx(e) => e.global_ns,
    }
}

/// The scenario as a sink would write it: one interface per host.
fn write_scenario(path: &std::path::Path, steps: &[Step]) {
    let frames: Vec<Frame> = steps
        .iter()
        .enumerate()
        .map(|(i, st)| Frame {
            interface: u32::from(st.agent.agent_id == AGENT_B.agent_id),
            time_ns: global_ns(st),
            data: payload(st, i as u64),
        })
        .collect();
    write_pcapng(
        path,
        DataLink::USER0,
        &[AGENT_A.host, AGENT_B.host],
        &frames,
    );
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
    let gro = s(6);
    assert_eq!(
        gro.peer_frames,
        [3, 4, 5],
        "GRO: every sender skb it carries"
    );
    assert_eq!(gro.oneway_ns, [us(10, 30), us(12, 30), us(14, 30)]);
    assert_eq!(gro.count, Some(3));
    for f in [3, 4, 5] {
        assert_eq!(s(f).peer_frames, [6], "frame {f} links forward");
    }
    assert!(s(1).peer_frames.is_empty() && s(2).peer_frames.is_empty());
    assert!(s(7).peer_frames.is_empty(), "only STACK_ENTRY is a peer");
    assert!(s(8).peer_frames.is_empty(), "a lost send links nowhere");
    assert_eq!(
        (s(13).peer_frames.as_slice(), s(13).oneway_ns[0]),
        ([11u64].as_slice(), us(240, 250)),
        "the retransmission's receive links to the resend"
    );
    assert_eq!(s(13).sends, [2]);
    assert_eq!(s(10).peer_frames, [9], "latest send before the receive");
    assert_eq!(s(14).peer_frames, [12]);
    assert_eq!((s(9).peer_frames[0], s(12).peer_frames[0]), (10, 14));
    let late = s(15);
    assert_eq!(late.peer_frames, [16], "a receive before its send");
    assert_eq!((late.oneway_ns[0], late.violations), (-us(300, 305), 1));
    assert_eq!((s(16).peer_frames[0], s(16).violations), (15, 1));
    assert!(s(17).peer_frames.is_empty() && s(18).peer_frames.is_empty());
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
    assert_eq!(s(30).peer_frames, [31], "earliest of two receptions");
    assert_eq!(s(30).receptions, Some(2));
    assert_eq!(s(32).peer_frames, [30]);
    assert_eq!((s(34).peer_frames[0], s(34).violations), (33, 1));

    // Filterable: exactly the frames of the violations, both ends, two
    // passes; in one pass only the later frame of each pair knows.
    let numbers = |q: Query| -> Vec<String> {
        tshark
            .fields(&file, &["frame.number"], &q)
            .expect("clean decode")
            .iter()
            .map(|r| r.one("frame.number").to_owned())
            .collect()
    };
    let q = Query::default().filter("nettrace.causality_violation");
    assert_eq!(numbers(q.clone().two_pass()), ["15", "16", "33", "34"]);
    assert_eq!(numbers(q), ["16", "34"]);
    assert_eq!(
        numbers(
            Query::default()
                .two_pass()
                .filter("nettrace.peer_frame == 6")
        ),
        ["3", "4", "5"]
    );
    assert_eq!(
        numbers(
            Query::default()
                .two_pass()
                .filter("nettrace.stage == SND_SW && !nettrace.peer_frame")
        ),
        ["8", "17", "25"]
    );
    let slow: Vec<String> = (1..=steps.len())
        .filter(|&f| rule.shown(f).oneway_ns.iter().any(|&v| v > 19_000))
        .map(|f| f.to_string())
        .collect();
    assert_eq!(slow, ["3", "6", "27", "29", "32"]);
    assert_eq!(
        numbers(
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

    // The Info column names the peer.
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
    // sends 8, 17, 25; GRO receptions 6, 22, 29.
    let want = [4, 0, 3, 3];
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
        .filter("nettrace.peer_frame || nettrace.oneway_ns || nettrace.causality_violation");
    let rows = tshark
        .fields(&file, &["frame.number"], &q)
        .expect("clean decode");
    assert!(rows.is_empty(), "{rows:?}");
}
