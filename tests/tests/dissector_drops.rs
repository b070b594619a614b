//! The dissector on DROP and TCP anomaly frames written the way the sink
//! writes them (no root needed): every field decoded and filterable, the
//! summary equal to the codec's, a drop a warning with its reason, a
//! retransmission a note, a reset a warning, and a bad family flagged.

mod dissector_common;

use dissector_common::*;
use tracer_codec::drop::padded;
use tracer_codec::{DropEvent, EventKind, TcpAnomaly, TcpEvent};
use tracer_e2e::tshark::{Query, Tshark};
use tracer_sink::LinkType;

const PI_NOTE: &str = "4194304";
const PI_WARN: &str = "6291456";
const PI_ERROR: &str = "8388608";

fn raw<E: tracer_codec::WireEvent>(ev: &E) -> Record {
    let mut body = Vec::new();
    ev.encode_body(&mut body);
    Record::Unknown {
        kind: E::KIND,
        body,
    }
}

fn drop_v4() -> DropEvent {
    let mut d = DropEvent {
        mono_ns: 11,
        global_ns: 1_700_000_000_000_000_001,
        location: 0xffff_ffff_8123_4567,
        reason: 3,
        netns: 4026531840,
        ifindex: 2,
        cpu: 1,
        len: 26,
        protocol: 0x0800,
        family: 4,
        l4proto: 17,
        sport: 47100,
        dport: 47001,
        reason_name: padded("NO_SOCKET"),
        location_sym: padded("__udp4_lib_rcv+0x4bc"),
        ..Default::default()
    };
    d.saddr[..4].copy_from_slice(&[10, 241, 0, 2]);
    d.daddr[..4].copy_from_slice(&[10, 241, 0, 1]);
    d
}

fn drop_v6_unnamed() -> DropEvent {
    let mut d = DropEvent {
        global_ns: 1_700_000_000_000_000_002,
        location: 0xffff_ffff_8100_0010,
        reason: 999,
        protocol: 0x86dd,
        family: 6,
        l4proto: 6,
        sport: 1,
        dport: 2,
        ..Default::default()
    };
    d.saddr = "2001:db8::1"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    d.daddr = "2001:db8::2"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    d
}

fn tcp(anomaly: TcpAnomaly, cookie: u64) -> TcpEvent {
    let mut t = TcpEvent {
        global_ns: 1_700_000_000_000_000_003,
        cookie,
        seq: 4_294_967_000,
        end_seq: 1_152, // wraps: 1448 bytes
        anomaly: anomaly as u8,
        state: 1,
        sport: 40000,
        dport: 5301,
        ..Default::default()
    };
    t.saddr[..4].copy_from_slice(&[10, 242, 0, 1]);
    t.daddr[..4].copy_from_slice(&[10, 242, 0, 2]);
    t
}

#[test]
fn drop_and_tcp_frames_decode_with_their_experts() {
    let Some(tshark) = Tshark::or_skip("drop_and_tcp_frames_decode_with_their_experts") else {
        return;
    };
    let records = [
        raw(&drop_v4()),
        raw(&drop_v6_unnamed()),
        raw(&tcp(TcpAnomaly::Retransmit, 77)),
        raw(&tcp(TcpAnomaly::ResetReceived, 77)),
        raw(&tcp(TcpAnomaly::RcvqueueFull, 78)),
    ];
    let frames: Vec<Frame> = records
        .iter()
        .enumerate()
        .map(|(i, r)| Frame {
            interface: 0,
            time_ns: 1_700_000_000_000_000_000 + i as u64,
            data: capture_payload(&Sent {
                agent: AGENT_A,
                event_seq: i as u64,
                record: r.clone(),
                time_ns: 0,
            }),
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("drops.pcapng");
    write_pcapng(&file, LinkType::User0, &["host-a"], &frames);

    let fields = [
        "_ws.col.Info",
        "nettrace.kind",
        "nettrace.drop.reason",
        "nettrace.drop.reason_code",
        "nettrace.drop.location",
        "nettrace.drop.location_addr",
        "nettrace.drop.netns",
        "nettrace.drop.ifindex",
        "nettrace.drop.len",
        "nettrace.drop.protocol",
        "nettrace.drop.family",
        "nettrace.drop.l4proto",
        "nettrace.drop.sport",
        "nettrace.drop.dport",
        "nettrace.drop.saddr",
        "nettrace.drop.daddr",
        "nettrace.drop.saddr6",
        "nettrace.drop.daddr6",
        "nettrace.tcp.anomaly",
        "nettrace.tcp.cookie",
        "nettrace.tcp.seq",
        "nettrace.tcp.end_seq",
        "nettrace.tcp.len",
        "nettrace.tcp.state",
        "nettrace.tcp.saddr",
        "nettrace.tcp.dport",
        "_ws.expert.severity",
        "_ws.expert.message",
    ];
    let rows = tshark
        .fields(&file, &fields, &Query::default())
        .expect("tshark");
    assert_eq!(rows.len(), 5);
    // Each frame's only expert (these frames carry no pcapng comment):
    // (severity, message).
    let expert = |i: usize| -> (String, String) {
        let r = &rows[i];
        (
            r.one("_ws.expert.severity").to_owned(),
            r.one("_ws.expert.message").to_owned(),
        )
    };

    let (d, r) = (drop_v4(), &rows[0]);
    assert!(r.one("_ws.col.Info").contains(&d.summary()), "{r:?}");
    assert_eq!(r.one("nettrace.kind"), EventKind::DROP.to_string());
    assert_eq!(r.one("nettrace.drop.reason"), "NO_SOCKET");
    assert_eq!(r.one("nettrace.drop.reason_code"), "3");
    assert_eq!(r.one("nettrace.drop.location"), "__udp4_lib_rcv+0x4bc");
    assert_eq!(r.one("nettrace.drop.location_addr"), "0xffffffff81234567");
    assert_eq!(r.one("nettrace.drop.netns"), "4026531840");
    assert_eq!(r.one("nettrace.drop.ifindex"), "2");
    assert_eq!(r.one("nettrace.drop.len"), "26");
    assert_eq!(r.one("nettrace.drop.protocol"), "0x0800");
    assert_eq!(r.one("nettrace.drop.family"), "4");
    assert_eq!(r.one("nettrace.drop.l4proto"), "17");
    assert_eq!(r.one("nettrace.drop.sport"), "47100");
    assert_eq!(r.one("nettrace.drop.dport"), "47001");
    assert_eq!(r.one("nettrace.drop.saddr"), "10.241.0.2");
    assert_eq!(r.one("nettrace.drop.daddr"), "10.241.0.1");
    assert_eq!(
        expert(0),
        (
            PI_WARN.to_owned(),
            "Dropped: NO_SOCKET at __udp4_lib_rcv+0x4bc".to_owned()
        )
    );

    // A reason this host's kernel did not name: the number, the address.
    let (d, r) = (drop_v6_unnamed(), &rows[1]);
    assert!(
        r.one("_ws.col.Info").contains(&d.summary()),
        "{r:?} vs {}",
        d.summary()
    );
    // An empty name (tshark prints an empty string field as nothing).
    assert!(r.all("nettrace.drop.reason").iter().all(String::is_empty));
    assert_eq!(r.one("nettrace.drop.reason_code"), "999");
    assert_eq!(r.one("nettrace.drop.saddr6"), "2001:db8::1");
    assert_eq!(r.one("nettrace.drop.daddr6"), "2001:db8::2");
    assert_eq!(
        expert(1),
        (
            PI_WARN.to_owned(),
            "Dropped: reason 999 at 0xffffffff81000010".to_owned()
        )
    );

    let (t, r) = (tcp(TcpAnomaly::Retransmit, 77), &rows[2]);
    assert!(r.one("_ws.col.Info").contains(&t.summary()), "{r:?}");
    assert_eq!(r.one("nettrace.kind"), EventKind::TCP.to_string());
    assert_eq!(r.one("nettrace.tcp.anomaly"), "0");
    assert_eq!(r.one("nettrace.tcp.cookie"), "77");
    assert_eq!(r.one("nettrace.tcp.seq"), "4294967000");
    assert_eq!(r.one("nettrace.tcp.end_seq"), "1152");
    assert_eq!(r.one("nettrace.tcp.len"), "1448");
    assert_eq!(r.one("nettrace.tcp.state"), "1");
    assert_eq!(r.one("nettrace.tcp.saddr"), "10.242.0.1");
    assert_eq!(r.one("nettrace.tcp.dport"), "5301");
    assert_eq!(expert(2).0, PI_NOTE);
    assert!(expert(2)
        .1
        .starts_with("Retransmission of seq 4294967000..1152"));
    assert_eq!(
        expert(3),
        (
            PI_WARN.to_owned(),
            "Connection reset: RESET_RECEIVED".to_owned()
        )
    );
    assert!(!rows[3].has("nettrace.tcp.len"), "only retransmissions");
    assert_eq!(expert(4), (PI_WARN.to_owned(), "RCVQUEUE_FULL".to_owned()));

    // Filterable by name.
    let named = tshark
        .fields(
            &file,
            &["frame.number"],
            &Query::default().filter("nettrace.drop.reason == \"NO_SOCKET\""),
        )
        .expect("tshark");
    assert_eq!(named.len(), 1);
}

#[test]
fn bad_families_and_anomalies_are_flagged() {
    let Some(tshark) = Tshark::or_skip("bad_families_and_anomalies_are_flagged") else {
        return;
    };
    // Bodies the codec refuses, so built by hand from a good one.
    let bad_drop = {
        let mut body = Vec::new();
        drop_v4().encode_body(&mut body);
        body[DropEvent::LAYOUT.field("family").unwrap().offset] = 5;
        Record::Unknown {
            kind: EventKind::DROP,
            body,
        }
    };
    let bad_tcp = {
        let mut body = Vec::new();
        tcp(TcpAnomaly::Retransmit, 1).encode_body(&mut body);
        body[TcpEvent::LAYOUT.field("anomaly").unwrap().offset] = 200;
        Record::Unknown {
            kind: EventKind::TCP,
            body,
        }
    };
    let frames: Vec<Frame> = [bad_drop, bad_tcp]
        .iter()
        .enumerate()
        .map(|(i, r)| Frame {
            interface: 0,
            time_ns: 1_700_000_000_000_000_000 + i as u64,
            data: capture_payload(&Sent {
                agent: AGENT_A,
                event_seq: i as u64,
                record: r.clone(),
                time_ns: 0,
            }),
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.pcapng");
    write_pcapng(&file, LinkType::User0, &["host-a"], &frames);
    let flagged = tshark
        .flagged_frames(&file, &Query::default().allow_expert_errors())
        .expect("tshark");
    assert_eq!(flagged.len(), 2, "{flagged:#?}");
    assert!(flagged.iter().all(|f| !f.lua_error));
    assert!(flagged[0].messages.iter().any(|m| m == "Bad flow family 5"));
    assert!(flagged[1]
        .messages
        .iter()
        .any(|m| m == "Unknown TCP anomaly 200"));
    // Malformed frames raise no drop or anomaly expert of their own.
    let rows = tshark
        .fields(
            &file,
            &["_ws.expert.severity"],
            &Query::default().allow_expert_errors(),
        )
        .expect("tshark");
    for r in &rows {
        assert_eq!(r.all("_ws.expert.severity"), [PI_ERROR], "{r:?}");
    }
}

/// Drop and TCP anomaly frames fill Source/Destination and the port
/// columns from their flow, as TX frames do.
#[test]
fn drop_and_tcp_frames_fill_the_flow_columns() {
    let Some(tshark) = Tshark::or_skip("drop_and_tcp_frames_fill_the_flow_columns") else {
        return;
    };
    let records = [
        raw(&drop_v4()),
        raw(&drop_v6_unnamed()),
        raw(&tcp(TcpAnomaly::Retransmit, 77)),
    ];
    let frames: Vec<Frame> = records
        .iter()
        .enumerate()
        .map(|(i, r)| Frame {
            interface: 0,
            time_ns: 1_700_000_000_000_000_000 + i as u64,
            data: capture_payload(&Sent {
                agent: AGENT_A,
                event_seq: i as u64,
                record: r.clone(),
                time_ns: 0,
            }),
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("drop-columns.pcapng");
    write_pcapng(&file, LinkType::User0, &["host-a"], &frames);
    let columns = r#""Source","%s","Destination","%d","SrcPort","%S","DstPort","%D""#;
    let rows = tshark
        .fields(
            &file,
            &[
                "_ws.col.Source",
                "_ws.col.Destination",
                "_ws.col.SrcPort",
                "_ws.col.DstPort",
            ],
            &Query::default().pref("gui.column.format", columns),
        )
        .expect("tshark");
    let got: Vec<[&str; 4]> = rows
        .iter()
        .map(|r| {
            [
                r.one("_ws.col.Source"),
                r.one("_ws.col.Destination"),
                r.one("_ws.col.SrcPort"),
                r.one("_ws.col.DstPort"),
            ]
        })
        .collect();
    assert_eq!(
        got,
        [
            ["10.241.0.2", "10.241.0.1", "47100", "47001"],
            ["2001:db8::1", "2001:db8::2", "1", "2"],
            ["10.242.0.1", "10.242.0.2", "40000", "5301"],
        ]
    );
}
