//! The Lua dissector on RX events (wire kind 3): known events written as
//! pcapng, decoded by tshark, every `nettrace.rx.*` field compared with the
//! event; a bad stage is flagged malformed, never a Lua error; the frames of
//! one TCP skb link to each other with their stage latencies, equal to the
//! linking rule computed here.

mod dissector_common;

use dissector_common::{parse_abs_time, write_pcapng, Agent, Frame, AGENT_A, AGENT_B, T0};
use tracer_codec::{EventKind, RxEvent, RxStage};
use tracer_e2e::tshark::{Query, Tshark};
use tracer_sink::LinkType;

const FIELDS: &[&str] = &[
    "nettrace.kind",
    "nettrace.rx.mono_ns",
    "nettrace.rx.global_ns",
    "nettrace.rx.global_time",
    "nettrace.rx.rx_stamp_ns",
    "nettrace.rx.rx_stamp_global_ns",
    "nettrace.rx.rx_stamp_time",
    "nettrace.rx.hw_ns",
    "nettrace.rx.cookie",
    "nettrace.rx.seq",
    "nettrace.rx.end_seq",
    "nettrace.rx.len",
    "nettrace.rx.netns",
    "nettrace.rx.ifindex",
    "nettrace.rx.cpu",
    "nettrace.rx.pid",
    "nettrace.rx.tid",
    "nettrace.rx.stage",
    "nettrace.rx.family",
    "nettrace.rx.protocol",
    "nettrace.rx.tstamp_type",
    "nettrace.rx.sport",
    "nettrace.rx.dport",
    "nettrace.rx.saddr",
    "nettrace.rx.daddr",
    "nettrace.rx.saddr6",
    "nettrace.rx.daddr6",
    "nettrace.rx.comm",
    "nettrace.rx.since_rx_stamp_ns",
    "_ws.col.Info",
];

fn events() -> Vec<RxEvent> {
    let v4 = |a: [u8; 4]| {
        let mut x = [0u8; 16];
        x[..4].copy_from_slice(&a);
        x
    };
    vec![
        // A GRO-merged TCP skb at stack entry, with its RX stamp.
        RxEvent {
            mono_ns: 1_000_000_001,
            global_ns: T0,
            rx_stamp_ns: 1_763_000_000_000_000_000,
            rx_stamp_global_ns: T0 - 4_321,
            hw_ns: 0,
            seq: 4_000_000_000,
            end_seq: 4_000_043_440,
            len: 43_492,
            netns: 4_026_531_840,
            ifindex: 7,
            cpu: 1,
            stage: RxStage::StackEntry as u8,
            family: 4,
            protocol: 6,
            sport: 40_000,
            dport: 5201,
            saddr: v4([10, 0, 0, 1]),
            daddr: v4([10, 0, 0, 2]),
            ..Default::default()
        },
        // The read completion over IPv6: reader, cookie, no skb stamp.
        RxEvent {
            mono_ns: 1_000_050_001,
            global_ns: T0 + 50_000,
            cookie: u64::MAX - 1,
            end_seq: 4_000_043_440,
            len: 131_072,
            netns: 4_026_531_840,
            cpu: 0,
            pid: 4242,
            tid: 4243,
            stage: RxStage::ReadDone as u8,
            family: 6,
            protocol: 6,
            sport: 40_000,
            dport: 5201,
            saddr: "fd00::1".parse::<std::net::Ipv6Addr>().unwrap().octets(),
            daddr: "fd00::2".parse::<std::net::Ipv6Addr>().unwrap().octets(),
            comm: *b"iperf3\0\0\0\0\0\0\0\0\0\0",
            ..Default::default()
        },
    ]
}

fn payload(seq: u64, kind: u16, body: &[u8]) -> Vec<u8> {
    payload_of(&AGENT_A, seq, kind, body)
}

fn payload_of(agent: &Agent, seq: u64, kind: u16, body: &[u8]) -> Vec<u8> {
    let mut rec = Vec::new();
    rec.extend_from_slice(&kind.to_le_bytes());
    rec.extend_from_slice(&(body.len() as u16).to_le_bytes());
    rec.extend_from_slice(body);
    let mut out = Vec::new();
    tracer_codec::CaptureRecord::encode(
        &mut out,
        agent.agent_id,
        seq,
        agent.clock_source,
        agent.clock_state,
        agent.host,
        &rec,
    );
    out
}

#[test]
fn rx_fields_decode_and_filter() {
    let Some(tshark) = Tshark::or_skip("rx_fields_decode_and_filter") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rx.pcapng");
    let evs = events();
    let frames: Vec<Frame> = evs
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let mut body = Vec::new();
            e.encode_body(&mut body);
            Frame {
                interface: 0,
                time_ns: e.global_ns,
                data: payload(i as u64, EventKind::RX, &body),
            }
        })
        .collect();
    write_pcapng(&file, LinkType::User0, &["host-a"], &frames);
    let rows = tshark
        .fields(&file, FIELDS, &Query::default())
        .expect("clean decode");
    assert_eq!(rows.len(), 2);
    for (row, e) in rows.iter().zip(&evs) {
        let f = |n: &str| row.one(&format!("nettrace.rx.{n}")).to_owned();
        assert_eq!(row.one("nettrace.kind"), "3");
        for (name, v) in [
            ("mono_ns", e.mono_ns),
            ("global_ns", e.global_ns),
            ("rx_stamp_ns", e.rx_stamp_ns),
            ("rx_stamp_global_ns", e.rx_stamp_global_ns),
            ("hw_ns", e.hw_ns),
            ("cookie", e.cookie),
            ("seq", e.seq.into()),
            ("end_seq", e.end_seq.into()),
            ("len", e.len.into()),
            ("netns", e.netns.into()),
            ("ifindex", e.ifindex.into()),
            ("cpu", e.cpu.into()),
            ("pid", e.pid.into()),
            ("tid", e.tid.into()),
            ("stage", e.stage.into()),
            ("family", e.family.into()),
            ("protocol", e.protocol.into()),
            ("tstamp_type", e.tstamp_type.into()),
            ("sport", e.sport.into()),
            ("dport", e.dport.into()),
        ] {
            assert_eq!(f(name), v.to_string(), "nettrace.rx.{name}");
        }
        assert_eq!(parse_abs_time(&f("global_time")), e.global_ns);
        let flow = e.flow();
        let (s, d) = if e.family == 6 {
            ("saddr6", "daddr6")
        } else {
            ("saddr", "daddr")
        };
        assert_eq!(f(s), flow.saddr.to_string());
        assert_eq!(f(d), flow.daddr.to_string());
        // An empty name prints as no value.
        assert_eq!(
            row.opt("nettrace.rx.comm").unwrap_or(""),
            e.comm_str(),
            "nettrace.rx.comm"
        );
        match e.since_rx_stamp_ns() {
            Some(since) => {
                assert_eq!(f("since_rx_stamp_ns"), since.to_string());
                assert_eq!(parse_abs_time(&f("rx_stamp_time")), e.rx_stamp_global_ns);
            }
            None => {
                assert!(!row.has("nettrace.rx.since_rx_stamp_ns"));
                assert!(!row.has("nettrace.rx.rx_stamp_time"));
            }
        }
        let info = row.one("_ws.col.Info");
        let stage = e.stage().unwrap().name();
        assert!(info.contains(&format!("RX {stage}")), "{info}");
    }
    assert!(rows[0]
        .one("_ws.col.Info")
        .contains("seq=4000000000..4000043440"));

    // Every field filters: one filter per frame's distinguishing values.
    for (filter, want) in [
        (
            "nettrace.rx.stage == 0 && nettrace.rx.end_seq - nettrace.rx.seq == 43440",
            1,
        ),
        (
            "nettrace.rx.comm == \"iperf3\" && nettrace.rx.saddr6 == fd00::1",
            1,
        ),
        ("nettrace.rx.since_rx_stamp_ns == 4321", 1),
        ("nettrace.rx.dport == 5201", 2),
    ] {
        let rows = tshark
            .fields(&file, &["frame.number"], &Query::default().filter(filter))
            .expect("clean decode");
        assert_eq!(rows.len(), want, "{filter}");
    }

    // The filter examples of docs/reading-a-trace.md's RX section parse and
    // match what they say.
    let doc = std::fs::read_to_string(
        tracer_e2e::bins::repo_root()
            .join("docs")
            .join("reading-a-trace.md"),
    )
    .unwrap();
    let section = doc.split("## RX stages").nth(1).expect("RX section");
    let block = section.split("```").nth(1).expect("filter code block");
    let filters: Vec<&str> = block
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(filters.len(), 3, "{filters:?}");
    for (filter, want) in filters.iter().zip([1, 0, 1]) {
        let rows = tshark
            .fields(&file, &["frame.number"], &Query::default().filter(filter))
            .unwrap_or_else(|e| panic!("docs filter {filter:?}: {e}"));
        assert_eq!(rows.len(), want, "{filter}");
    }
}

#[test]
fn an_unknown_rx_stage_is_malformed_not_a_lua_error() {
    let Some(tshark) = Tshark::or_skip("an_unknown_rx_stage_is_malformed_not_a_lua_error") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.pcapng");
    let mut body = Vec::new();
    events()[0].encode_body(&mut body);
    let stage = RxEvent::LAYOUT.field("stage").expect("described").offset;
    body[stage] = 9;
    write_pcapng(
        &file,
        LinkType::User0,
        &["host-a"],
        &[Frame {
            interface: 0,
            time_ns: T0,
            data: payload(0, EventKind::RX, &body),
        }],
    );
    let q = Query::default().allow_expert_errors();
    let flagged = tshark.flagged_frames(&file, &q).expect("no Lua error");
    assert_eq!(flagged.len(), 1, "{flagged:?}");
    assert!(!flagged[0].lua_error, "{flagged:?}");
    assert!(
        flagged[0]
            .messages
            .iter()
            .any(|m| m.contains("Unknown RX stage 9")),
        "{flagged:?}"
    );
    let rows = tshark
        .fields(&file, &["_ws.col.Info", "nettrace.rx.stage"], &q)
        .expect("no Lua error");
    assert!(rows[0].one("_ws.col.Info").contains("[Malformed]"));
}

#[test]
fn newer_and_short_rx_bodies() {
    let Some(tshark) = Tshark::or_skip("newer_and_short_rx_bodies") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("versions.pcapng");
    let mut newer = Vec::new();
    events()[0].encode_body(&mut newer);
    newer.extend_from_slice(&[0xee; 12]);
    let short = newer[..RxEvent::BODY_LEN - 1].to_vec();
    let frames: Vec<Frame> = [newer, short]
        .iter()
        .enumerate()
        .map(|(i, body)| Frame {
            interface: 0,
            time_ns: T0 + i as u64,
            data: payload(i as u64, EventKind::RX, body),
        })
        .collect();
    write_pcapng(&file, LinkType::User0, &["host-a"], &frames);
    let q = Query::default().allow_expert_errors();
    let rows = tshark
        .fields(
            &file,
            &[
                "nettrace.rx.seq",
                "nettrace.extra",
                "nettrace.body_too_short",
            ],
            &q,
        )
        .expect("no Lua error");
    // A newer body: the known fields decode, the rest is `extra`.
    assert_eq!(rows[0].one("nettrace.rx.seq"), events()[0].seq.to_string());
    assert!(rows[0].has("nettrace.extra"));
    // A short one: flagged, nothing decoded from it.
    assert!(!rows[1].has("nettrace.rx.seq"));
    let flagged = tshark.flagged_frames(&file, &q).expect("no Lua error");
    assert_eq!(flagged.iter().map(|f| f.number).collect::<Vec<_>>(), [2]);
    assert!(flagged.iter().all(|f| !f.lua_error));
}

/// One RX event of the linking scenario: which agent recorded it.
struct Step {
    agent: &'static Agent,
    ev: RxEvent,
}

/// A TCP RX event of flow 10.0.0.1:`sport` -> 10.0.0.2:5201.
fn tcp(stage: RxStage, sport: u16, seq: u32, end_seq: u32) -> RxEvent {
    let v4 = |a: [u8; 4]| {
        let mut x = [0u8; 16];
        x[..4].copy_from_slice(&a);
        x
    };
    RxEvent {
        seq,
        end_seq,
        len: end_seq.wrapping_sub(seq),
        stage: stage as u8,
        family: 4,
        protocol: 6,
        sport,
        dport: 5201,
        saddr: v4([10, 0, 0, 1]),
        daddr: v4([10, 0, 0, 2]),
        ..Default::default()
    }
}

/// Received skbs of several flows and agents, interleaved, with the cases
/// the linking rule must get right: a COPY and a READ_DONE covering two
/// skbs, a partial read, the same range on another flow and another agent,
/// a pure ACK, a retransmitted range, sequence wrap-around, a TCP_INPUT
/// without STACK_ENTRY, UDP (never linked).
fn link_scenario() -> Vec<Step> {
    use RxStage::*;
    const F1: u16 = 40_000;
    const F2: u16 = 40_001;
    const F3: u16 = 40_002;
    const F4: u16 = 40_003;
    let a = &AGENT_A;
    let b = &AGENT_B;
    let wrap = 4_294_966_848u32; // 1448 bytes before 2^32
    let mut udp = tcp(StackEntry, F1, 0, 0);
    udp.protocol = 17;
    let mut udp_ready = udp;
    udp_ready.stage = DataReady as u8;
    let steps = [
        (a, tcp(StackEntry, F1, 1000, 2448)), // 1: skb1
        (a, tcp(TcpInput, F1, 1000, 2448)),   // 2
        (a, tcp(StackEntry, F1, 2448, 5344)), // 3: skb2 (GRO, 2 segments)
        (a, tcp(StackEntry, F2, 1000, 2448)), // 4: same range, other flow
        (a, tcp(TcpInput, F1, 2448, 5344)),   // 5
        (a, tcp(DataReady, F1, 0, 2448)),     // 6: skb1
        (a, tcp(TcpInput, F2, 1000, 2448)),   // 7
        (a, tcp(DataReady, F1, 0, 5344)),     // 8: skb2
        (b, tcp(StackEntry, F1, 1000, 2448)), // 9: other agent
        (a, tcp(Copy, F1, 1000, 5344)),       // 10: skb1 and skb2
        (a, tcp(ReadDone, F1, 0, 3000)),      // 11: skb1 (read ends in skb2)
        (b, tcp(TcpInput, F1, 1000, 2448)),   // 12
        (a, tcp(ReadDone, F1, 0, 5344)),      // 13: skb2, after COPY 10
        (a, tcp(StackEntry, F1, 5344, 5344)), // 14: pure ACK
        (a, tcp(TcpInput, F1, 5344, 5344)),   // 15
        (a, tcp(DataReady, F1, 0, 5344)),     // 16: nothing left
        (a, tcp(StackEntry, F1, 1000, 2448)), // 17: retransmission
        (a, tcp(TcpInput, F1, 1000, 2448)),   // 18: of the new skb
        (a, tcp(StackEntry, F3, wrap, 1000)), // 19: wraps
        (a, tcp(StackEntry, F3, 1000, 3000)), // 20
        (a, tcp(TcpInput, F3, wrap, 1000)),   // 21
        (a, tcp(DataReady, F3, 0, 1000)),     // 22: skb 19 only
        (a, udp),                             // 23
        (a, udp_ready),                       // 24
        (a, tcp(TcpInput, F4, 7000, 8448)),   // 25: no STACK_ENTRY
        (a, tcp(ReadDone, F4, 0, 8448)),      // 26
        (a, tcp(ReadDone, F3, 0, 3000)),      // 27: skbs 19 and 20
    ];
    steps
        .into_iter()
        .enumerate()
        .map(|(i, (agent, mut ev))| {
            let i = i as u64 + 1;
            // Uneven gaps, above 2^53 ns: a float anywhere shows.
            ev.global_ns = T0 + i * 1_000 + i * i * 7;
            ev.mono_ns = 1_000_000_000 + i * 1_000;
            if ev.stage == StackEntry as u8 {
                ev.rx_stamp_global_ns = ev.global_ns - 3_001;
            }
            Step { agent, ev }
        })
        .collect()
}

/// The link one frame shows, as the test computes it.
#[derive(Debug, PartialEq, Default)]
struct Link {
    first: u64,
    prev: Option<u64>,
    prev_ns: Option<i64>,
    /// (stage name lower-case, ns since STACK_ENTRY), in stage order.
    since_entry: Vec<(String, i64)>,
    skb_seq: u32,
    skb_end_seq: u32,
    count: u32,
}

/// The linking rule of docs/reading-a-trace.md, written out over the whole
/// trace: skbs start at STACK_ENTRY (or an unmatched TCP_INPUT); TCP_INPUT
/// joins the latest skb of its agent, flow and exact range that lacks one;
/// a socket stage is the stage of every data skb of its agent and flow,
/// lacking that stage, whose end_seq the event's end_seq reaches (mod 2^32);
/// its frame shows the oldest of them.
fn expected_links(steps: &[Step]) -> Vec<Option<Link>> {
    struct Skb {
        key: (u64, u16),
        seq: u32,
        end_seq: u32,
        at: [Option<usize>; 5],
    }
    let mut skbs: Vec<Skb> = Vec::new();
    let mut out = Vec::new();
    let reaches = |e: u32, s: u32| e.wrapping_sub(s) < 1 << 31;
    for (i, st) in steps.iter().enumerate() {
        let e = &st.ev;
        let key = (st.agent.agent_id, e.sport);
        let stage = e.stage as usize;
        if e.protocol != 6 {
            out.push(None);
            continue;
        }
        let start = || Skb {
            key,
            seq: e.seq,
            end_seq: e.end_seq,
            at: {
                let mut at = [None; 5];
                at[stage] = Some(i);
                at
            },
        };
        let mine: Vec<usize> = match stage {
            0 => {
                skbs.push(start());
                vec![]
            }
            1 => match skbs
                .iter()
                .rposition(|s| s.key == key && (s.seq, s.end_seq) == (e.seq, e.end_seq))
            {
                Some(j) if skbs[j].at[1].is_none() => vec![j],
                _ => {
                    skbs.push(start());
                    vec![]
                }
            },
            _ => (0..skbs.len())
                .filter(|&j| {
                    let s = &skbs[j];
                    s.key == key
                        && s.seq != s.end_seq
                        && s.at[stage].is_none()
                        && reaches(e.end_seq, s.end_seq)
                })
                .collect(),
        };
        let Some(&shown) = mine.first() else {
            out.push(None);
            continue;
        };
        let s = &skbs[shown];
        let ns = |f: usize| steps[f].ev.global_ns as i64;
        let prev = (0..stage).rev().find_map(|p| s.at[p]);
        let first = s.at.iter().flatten().min().copied().unwrap();
        let mut since_entry = Vec::new();
        if let Some(entry) = s.at[0] {
            for p in 1..=stage {
                let at = if p == stage { Some(i) } else { s.at[p] };
                if let Some(f) = at {
                    let name = RxStage::from_u8(p as u8).unwrap().name().to_lowercase();
                    since_entry.push((name, ns(f) - ns(entry)));
                }
            }
        }
        out.push(Some(Link {
            first: first as u64 + 1,
            prev: prev.map(|p| p as u64 + 1),
            prev_ns: prev.map(|p| ns(i) - ns(p)),
            since_entry,
            skb_seq: s.seq,
            skb_end_seq: s.end_seq,
            count: mine.len() as u32,
        }));
        for j in mine {
            skbs[j].at[stage] = Some(i);
        }
    }
    out
}

const LINK_FIELDS: &[&str] = &[
    "frame.number",
    "nettrace.rx.first_frame",
    "nettrace.rx.prev_frame",
    "nettrace.rx.lat.prev_ns",
    "nettrace.rx.lat.tcp_input_ns",
    "nettrace.rx.lat.data_ready_ns",
    "nettrace.rx.lat.copy_ns",
    "nettrace.rx.lat.read_done_ns",
    "nettrace.rx.skb_seq",
    "nettrace.rx.skb_end_seq",
    "nettrace.rx.skb_count",
];

/// The link tshark shows on one row, or None when it shows none.
fn shown_link(row: &tracer_e2e::tshark::Row) -> Option<Link> {
    let first = row.opt("nettrace.rx.first_frame")?;
    let num = |f: &str| row.opt(f).map(|v| v.parse::<i64>().unwrap());
    let since_entry = ["tcp_input", "data_ready", "copy", "read_done"]
        .into_iter()
        .filter_map(|s| num(&format!("nettrace.rx.lat.{s}_ns")).map(|v| (s.to_owned(), v)))
        .collect();
    Some(Link {
        first: first.parse().unwrap(),
        prev: num("nettrace.rx.prev_frame").map(|v| v as u64),
        prev_ns: num("nettrace.rx.lat.prev_ns"),
        since_entry,
        skb_seq: row.one("nettrace.rx.skb_seq").parse().unwrap(),
        skb_end_seq: row.one("nettrace.rx.skb_end_seq").parse().unwrap(),
        count: row.one("nettrace.rx.skb_count").parse().unwrap(),
    })
}

#[test]
fn rx_frames_of_one_skb_link_with_stage_latencies() {
    let Some(tshark) = Tshark::or_skip("rx_frames_of_one_skb_link_with_stage_latencies") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("links.pcapng");
    let steps = link_scenario();
    let frames: Vec<Frame> = steps
        .iter()
        .enumerate()
        .map(|(i, st)| {
            let mut body = Vec::new();
            st.ev.encode_body(&mut body);
            Frame {
                interface: u32::from(st.agent.agent_id == AGENT_B.agent_id),
                time_ns: st.ev.global_ns,
                data: payload_of(st.agent, i as u64, EventKind::RX, &body),
            }
        })
        .collect();
    write_pcapng(&file, LinkType::User0, &["host-a", "host-b"], &frames);
    let want = expected_links(&steps);

    // One pass (as Wireshark's first load) and two (as a re-dissection):
    // the same links, memoized from the first pass.
    for q in [Query::default(), Query::default().two_pass()] {
        let rows = tshark.fields(&file, LINK_FIELDS, &q).expect("clean decode");
        assert_eq!(rows.len(), steps.len());
        for (i, (row, want)) in rows.iter().zip(&want).enumerate() {
            assert_eq!(
                shown_link(row),
                *want,
                "frame {} (two-pass: {})",
                i + 1,
                q.two_pass
            );
        }
    }

    // What the rule means, stated by hand for the cases that matter.
    let w = |f: usize| want[f - 1].as_ref();
    let gap = |a: usize, b: usize| (steps[b - 1].ev.global_ns - steps[a - 1].ev.global_ns) as i64;
    assert_eq!(
        w(2).unwrap().prev,
        Some(1),
        "TCP_INPUT after its STACK_ENTRY"
    );
    assert_eq!(w(2).unwrap().prev_ns, Some(gap(1, 2)));
    assert_eq!(w(7).unwrap().first, 4, "same range, other flow");
    assert_eq!(w(12).unwrap().first, 9, "same flow, other agent");
    let copy = w(10).unwrap();
    assert_eq!((copy.first, copy.count, copy.prev), (1, 2, Some(6)));
    assert_eq!(
        copy.since_entry.last().unwrap(),
        &("copy".to_owned(), gap(1, 10))
    );
    assert_eq!(
        w(11).unwrap().first,
        1,
        "a read into skb2 completes skb1 only"
    );
    let done = w(13).unwrap();
    assert_eq!((done.first, done.prev, done.count), (3, Some(10), 1));
    assert_eq!(
        done.since_entry,
        [
            ("tcp_input".to_owned(), gap(3, 5)),
            ("data_ready".to_owned(), gap(3, 8)),
            ("copy".to_owned(), gap(3, 10)),
            ("read_done".to_owned(), gap(3, 13)),
        ]
    );
    assert_eq!(w(15).unwrap().prev, Some(14), "pure ACK: TCP_INPUT only");
    assert!(
        w(16).is_none(),
        "a DATA_READY with nothing left to complete"
    );
    assert_eq!(
        w(18).unwrap().first,
        17,
        "a retransmitted range starts anew"
    );
    let wrapped = w(22).unwrap();
    assert_eq!(
        (wrapped.first, wrapped.count),
        (19, 1),
        "end_seq 1000 reaches a wrapped skb only"
    );
    assert_eq!((w(27).unwrap().first, w(27).unwrap().count), (19, 2));
    assert!(w(23).is_none() && w(24).is_none(), "UDP is not linked");
    let orphan = w(26).unwrap();
    assert_eq!((orphan.first, orphan.prev), (25, Some(25)));
    assert!(
        orphan.since_entry.is_empty(),
        "no STACK_ENTRY, no latency from it"
    );

    // The fields filter, and the Info column names the previous stage.
    let rows = tshark
        .fields(
            &file,
            &["frame.number", "_ws.col.Info"],
            &Query::default().filter("nettrace.rx.prev_frame == 10"),
        )
        .expect("clean decode");
    let numbers: Vec<&str> = rows.iter().map(|r| r.one("frame.number")).collect();
    assert_eq!(numbers, ["11", "13"]);
    assert!(
        rows[1].one("_ws.col.Info").contains("since COPY"),
        "{:?}",
        rows[1]
    );
    tshark
        .check_clean(&file, &Query::default().two_pass())
        .expect("no Lua error, nothing malformed");
}
