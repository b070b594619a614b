//! The dissector on CPU cost frames (kind 6): every field decoded exactly
//! (u64 values above 2^53 included), each share of the interval a
//! filterable double, none for an empty interval, the Info column the
//! codec's summary, the host as Source; once from a file written here with
//! the sink's `TraceWriter`, once from a real `tracer-sink` fed real UDP
//! datagrams (frame
//! time = the event's global time, frame comment = Info).

mod dissector_common;

use std::process::Command;
use std::time::Duration;

use dissector_common::*;
use tracer_codec::{CpuEvent, EventKind, WireEvent};
use tracer_e2e::procs::Proc;
use tracer_e2e::tshark::{Query, Row, Tshark};
use tracer_sink::LinkType;

/// Every field of a CPU event, for `-e`.
const CPU_FIELDS: &[&str] = &[
    "nettrace.cpu.cpu",
    "nettrace.cpu.mono_ns",
    "nettrace.cpu.global_ns",
    "nettrace.cpu.global_time",
    "nettrace.cpu.interval_ns",
    "nettrace.cpu.net_rx_ns",
    "nettrace.cpu.net_tx_ns",
    "nettrace.cpu.sock_send_ns",
    "nettrace.cpu.sock_recv_ns",
    "nettrace.cpu.net_rx_pct",
    "nettrace.cpu.net_tx_pct",
    "nettrace.cpu.sock_send_pct",
    "nettrace.cpu.sock_recv_pct",
];

/// The share fields and the event's value for each, in summary order.
fn shares(ev: &CpuEvent) -> [(&'static str, u64); 4] {
    [
        ("nettrace.cpu.net_rx_pct", ev.net_rx_ns),
        ("nettrace.cpu.net_tx_pct", ev.net_tx_ns),
        ("nettrace.cpu.sock_send_pct", ev.sock_send_ns),
        ("nettrace.cpu.sock_recv_pct", ev.sock_recv_ns),
    ]
}

/// The CPU events of the test, each with its agent: a plain one-second
/// read, values above 2^53 (a double cannot hold them), an empty interval,
/// and a CPU number at u32::MAX with a share that is an exact decimal tie
/// (0.25 %: printed 0.2 by Rust and by C alike) and one above 100 %.
fn events() -> Vec<(Agent, CpuEvent)> {
    let t = |s: u64| T0 + s * 1_000_000_000;
    vec![
        (
            AGENT_A,
            CpuEvent {
                mono_ns: 5_000_000_123,
                global_ns: t(1),
                interval_ns: 1_000_000_000,
                net_rx_ns: 234_000_000,
                net_tx_ns: 1_000_000,
                sock_send_ns: 50_000_000,
                sock_recv_ns: 22_000_000,
                cpu: 0,
            },
        ),
        (
            AGENT_A,
            CpuEvent {
                mono_ns: 9_007_199_254_740_993,
                global_ns: t(1) + 1,
                interval_ns: 9_007_199_254_740_995,
                net_rx_ns: 4_503_599_627_370_497,
                net_tx_ns: 18_014_398_509_481_985,
                sock_send_ns: 1,
                sock_recv_ns: u64::MAX,
                cpu: 1,
            },
        ),
        (
            AGENT_B,
            CpuEvent {
                mono_ns: 86_400_000_000_123,
                global_ns: t(2),
                interval_ns: 0,
                net_rx_ns: 17,
                cpu: 3,
                ..CpuEvent::default()
            },
        ),
        (
            AGENT_B,
            CpuEvent {
                mono_ns: 86_401_000_000_123,
                global_ns: t(3),
                interval_ns: 1_000_000_000,
                net_rx_ns: 1_250_000_000,
                net_tx_ns: 2_500_000,
                sock_send_ns: 0,
                sock_recv_ns: 999_999_999,
                cpu: u32::MAX,
            },
        ),
    ]
}

fn record(ev: &CpuEvent) -> Record {
    let mut body = Vec::new();
    ev.encode_body(&mut body);
    Record::Unknown {
        kind: CpuEvent::KIND,
        body,
    }
}

fn sent(events: &[(Agent, CpuEvent)]) -> Vec<Sent> {
    events
        .iter()
        .enumerate()
        .map(|(i, (agent, ev))| Sent {
            agent: agent.clone(),
            event_seq: 40 + i as u64,
            record: record(ev),
            time_ns: ev.global_ns,
        })
        .collect()
}

fn fields() -> Vec<&'static str> {
    field_list(&[
        &[
            "frame.time_epoch",
            "_ws.col.Info",
            "_ws.col.Source",
            "nettrace.kind",
            "nettrace.len",
            "nettrace.host",
            "nettrace.event_seq",
            "nettrace.extra",
        ],
        CPU_FIELDS,
        TX_FIELDS,
        CLOCK_FIELDS,
    ])
}

/// Compare one decoded frame with the CPU event it carries.
fn check_cpu_frame(row: &Row, agent: &Agent, ev: &CpuEvent) {
    let what = format!("{} cpu {}", agent.host, ev.cpu);
    let eq = |field: &str, want: String| assert_eq!(row.one(field), want, "{what}: {field}");
    eq("_ws.col.Info", ev.summary());
    eq("_ws.col.Source", agent.host.to_owned());
    eq("nettrace.kind", EventKind::CPU.to_string());
    eq("nettrace.len", CpuEvent::BODY_LEN.to_string());
    eq("nettrace.host", agent.host.to_owned());
    eq("nettrace.cpu.cpu", ev.cpu.to_string());
    eq("nettrace.cpu.mono_ns", ev.mono_ns.to_string());
    eq("nettrace.cpu.global_ns", ev.global_ns.to_string());
    assert_eq!(
        parse_abs_time(row.one("nettrace.cpu.global_time")),
        ev.global_ns,
        "{what}: global_time"
    );
    eq("nettrace.cpu.interval_ns", ev.interval_ns.to_string());
    eq("nettrace.cpu.net_rx_ns", ev.net_rx_ns.to_string());
    eq("nettrace.cpu.net_tx_ns", ev.net_tx_ns.to_string());
    eq("nettrace.cpu.sock_send_ns", ev.sock_send_ns.to_string());
    eq("nettrace.cpu.sock_recv_ns", ev.sock_recv_ns.to_string());
    for (field, ns) in shares(ev) {
        // tshark prints a double with 15 significant digits.
        let got = row.opt(field).map(|v| v.parse::<f64>().expect("a double"));
        match (got, ev.share_pct(ns)) {
            (Some(g), Some(w)) => assert!(
                (g - w).abs() <= w.abs() * 1e-14,
                "{what}: {field} {g} vs {w}"
            ),
            (None, None) => {}
            other => panic!("{what}: {field}: {other:?}"),
        }
    }
    assert!(!row.has("nettrace.extra"), "{what}: no newer fields");
    for f in TX_FIELDS.iter().chain(CLOCK_FIELDS) {
        if *f != "nettrace.extra" {
            assert!(!row.has(f), "{what}: a CPU event has no {f}");
        }
    }
}

/// Event sequence numbers of the frames matching `filter`.
fn seqs(tshark: &Tshark, file: &std::path::Path, filter: &str) -> Vec<String> {
    let rows = tshark
        .fields(
            file,
            &["nettrace.event_seq"],
            &Query::default().filter(filter),
        )
        .unwrap_or_else(|e| panic!("{filter}: {e}"));
    rows.iter()
        .map(|r| r.one("nettrace.event_seq").to_owned())
        .collect()
}

#[test]
fn cpu_frames_decode_field_by_field_and_filter() {
    let Some(tshark) = Tshark::or_skip("cpu_frames_decode_field_by_field_and_filter") else {
        return;
    };
    let events = events();
    let frames: Vec<Frame> = sent(&events)
        .iter()
        .map(|s| Frame {
            interface: u32::from(s.agent.agent_id != AGENT_A.agent_id),
            time_ns: s.time_ns,
            data: capture_payload(s),
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cpu.pcapng");
    write_pcapng(
        &file,
        LinkType::User0,
        &[AGENT_A.host, AGENT_B.host],
        &frames,
    );

    let rows = tshark
        .fields(&file, &fields(), &Query::default())
        .expect("tshark");
    assert_eq!(rows.len(), events.len());
    for (row, (agent, ev)) in rows.iter().zip(&events) {
        check_cpu_frame(row, agent, ev);
    }
    // The summaries as the issue asks for them.
    assert_eq!(
        rows[0].one("_ws.col.Info"),
        "CPU 0: NET_RX 23.4% NET_TX 0.1% send 5.0% recv 2.2% of 1.000 s"
    );
    assert_eq!(
        rows[2].one("_ws.col.Info"),
        "CPU 3: NET_RX - NET_TX - send - recv - of 0.000 s"
    );
    assert_eq!(
        rows[3].one("_ws.col.Info"),
        "CPU 4294967295: NET_RX 125.0% NET_TX 0.2% send 0.0% recv 100.0% of 1.000 s"
    );

    // Filterable, the shares as numbers.
    assert_eq!(seqs(&tshark, &file, "nettrace.kind == CPU").len(), 4);
    assert_eq!(
        seqs(&tshark, &file, "nettrace.cpu.net_rx_pct > 20"),
        ["40", "41", "43"]
    );
    assert_eq!(
        seqs(&tshark, &file, "nettrace.cpu.net_rx_pct > 100"),
        ["43"]
    );
    assert_eq!(
        seqs(
            &tshark,
            &file,
            "nettrace.cpu.cpu == 3 && !nettrace.cpu.net_rx_pct"
        ),
        ["42"]
    );
    assert_eq!(
        seqs(
            &tshark,
            &file,
            "nettrace.cpu.sock_send_ns > 1000000 && nettrace.host == \"host-a\""
        ),
        ["40"]
    );
    // TX events' own `nettrace.cpu` field is not on these frames.
    assert!(seqs(&tshark, &file, "nettrace.cpu").is_empty());
}

/// Agent datagrams -> the real sink -> its pcapng -> tshark: the CPU
/// frames read as sent, at their global time, with the sink's comment.
#[test]
fn cpu_frames_through_the_sink() {
    let Some(tshark) = Tshark::or_skip("cpu_frames_through_the_sink") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = Command::new(tracer_e2e::bins::bin("tracer-sink"));
    cmd.args(["--listen", &format!("127.0.0.1:{port}"), "--comments"])
        .arg("--output")
        .arg(&out)
        .env("RUST_LOG", "info");
    let mut sink = Proc::spawn("tracer-sink", cmd);
    sink.wait_stderr("tracer-sink started", Duration::from_secs(30));

    let events = events();
    let sent = sent(&events);
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    // One datagram per agent, each agent's events in order.
    for (k, agent) in [AGENT_A, AGENT_B].iter().enumerate() {
        let mine: Vec<Sent> = sent
            .iter()
            .filter(|s| s.agent.agent_id == agent.agent_id)
            .cloned()
            .collect();
        tx.send_to(&datagram(agent, k as u64, 0, &mine), ("127.0.0.1", port))
            .unwrap();
    }
    // Queued on loopback before send_to returned; the sink drains its
    // socket before it stops.
    std::thread::sleep(Duration::from_millis(200));
    let (status, _) = sink.stop(libc::SIGTERM, Duration::from_secs(30));
    assert!(status.success(), "{}", sink.stderr.join("\n"));

    let files = tracer_e2e::pcap::pcapng_files(&out);
    assert_eq!(files.len(), 1, "{files:?}");
    let mut f = fields();
    f.push("frame.comment");
    let rows = tshark
        .fields(&files[0], &f, &Query::default())
        .expect("tshark");
    assert_eq!(rows.len(), events.len(), "{rows:#?}");
    for (row, (agent, ev)) in rows.iter().zip(&events) {
        check_cpu_frame(row, agent, ev);
        let g = ev.global_ns;
        assert_eq!(
            row.one("frame.time_epoch"),
            format!("{}.{:09}", g / 1_000_000_000, g % 1_000_000_000),
            "the frame is stamped with the event's global time"
        );
        assert_eq!(row.one("frame.comment"), ev.summary());
    }
}

/// A CPU body shorter than its layout is flagged malformed, not decoded
/// and not a Lua error; one longer (a newer version) decodes, the rest
/// shown as newer fields.
#[test]
fn short_and_longer_cpu_bodies() {
    let Some(tshark) = Tshark::or_skip("short_and_longer_cpu_bodies") else {
        return;
    };
    let (agent, ev) = events().remove(0);
    let mut short = Vec::new();
    ev.encode_body(&mut short);
    let mut longer = short.clone();
    short.pop();
    longer.extend_from_slice(&[0xab, 0xcd]);
    let frames: Vec<Frame> = [short, longer]
        .into_iter()
        .enumerate()
        .map(|(i, body)| Frame {
            interface: 0,
            time_ns: ev.global_ns + i as u64,
            data: capture_payload(&Sent {
                agent: agent.clone(),
                event_seq: i as u64,
                record: Record::Unknown {
                    kind: CpuEvent::KIND,
                    body,
                },
                time_ns: 0,
            }),
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cpu-bodies.pcapng");
    write_pcapng(&file, LinkType::User0, &[agent.host], &frames);
    let flagged = tshark
        .flagged_frames(&file, &Query::default().allow_expert_errors())
        .expect("tshark");
    assert_eq!(flagged.len(), 1, "{flagged:#?}");
    assert_eq!(flagged[0].number, 1);
    assert!(!flagged[0].lua_error);
    assert_eq!(
        flagged[0].messages,
        ["CPU body has 59 bytes, version 1 needs 60"]
    );
    let rows = tshark
        .fields(
            &file,
            &["_ws.col.Info", "nettrace.cpu.cpu", "nettrace.extra"],
            &Query::default().allow_expert_errors(),
        )
        .expect("tshark");
    assert_eq!(rows[0].one("_ws.col.Info"), "CPU [body too short]");
    assert!(!rows[0].has("nettrace.cpu.cpu"));
    assert_eq!(rows[1].one("_ws.col.Info"), ev.summary());
    assert_eq!(rows[1].one("nettrace.extra"), "abcd");
}
