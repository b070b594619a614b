//! The Lua dissector on RX events (wire kind 3): known events written as
//! pcapng, decoded by tshark, every `nettrace.rx.*` field compared with the
//! event; a bad stage is flagged malformed, never a Lua error.

mod dissector_common;

use dissector_common::{parse_abs_time, write_pcapng, Frame, AGENT_A, T0};
use pcap_file::DataLink;
use tracer_codec::{EventKind, RxEvent, RxStage};
use tracer_e2e::tshark::{Query, Tshark};

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
    let mut rec = Vec::new();
    rec.extend_from_slice(&kind.to_le_bytes());
    rec.extend_from_slice(&(body.len() as u16).to_le_bytes());
    rec.extend_from_slice(body);
    let mut out = Vec::new();
    tracer_codec::CaptureRecord::encode(
        &mut out,
        AGENT_A.agent_id,
        seq,
        AGENT_A.clock_source,
        AGENT_A.clock_state,
        AGENT_A.host,
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
    write_pcapng(&file, DataLink::USER0, &["host-a"], &frames);
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
        DataLink::USER0,
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
    write_pcapng(&file, DataLink::USER0, &["host-a"], &frames);
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
