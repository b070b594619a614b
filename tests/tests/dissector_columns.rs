//! The packet-list columns and the statistics Wireshark builds from them:
//! Source/Destination (and the port columns) from each event's flow, the
//! host for events without one, Statistics → Conversations / Endpoints and
//! the Flow Graph listing the flows, and the I/O Graph recipe of
//! docs/reading-a-trace.md, all through real tshark on the golden events.

mod dissector_common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use dissector_common::*;
use tracer_codec::Flow;
use tracer_e2e::tshark::{Query, Row, Tshark};
use tracer_sink::LinkType;

/// Columns named for `-e _ws.col.<title>`, set explicitly so that a
/// user's preferences cannot change what the test reads.
const COLUMNS: &str = r#""No.","%m","Source","%s","Destination","%d","SrcPort","%S","DstPort","%D","Protocol","%p","Info","%i""#;

/// The I/O Graph recipe of docs/reading-a-trace.md, as a tshark `io,stat`
/// column: SND_SW latency averaged per interval, over SND_SW frames only
/// (later stages carry the same field as "earlier stage"). tshark builds
/// only the fields its filters name, so the filter names the Y field too:
/// without it every average reads 0.
const IO_RECIPE: &str =
    "AVG(nettrace.lat.snd_sw_ns)nettrace.stage == SND_SW && nettrace.lat.snd_sw_ns";

/// Writes the golden events as the sink would (one interface per agent).
fn golden_file(path: &Path) -> Vec<Sent> {
    let sent: Vec<Sent> = golden_datagrams()
        .into_iter()
        .flat_map(|(_, events)| events)
        .collect();
    write_events(path, &sent);
    sent
}

fn write_events(path: &Path, sent: &[Sent]) {
    let frames: Vec<Frame> = sent
        .iter()
        .map(|s| Frame {
            interface: u32::from(s.agent.agent_id != AGENT_A.agent_id),
            time_ns: s.time_ns,
            data: capture_payload(s),
        })
        .collect();
    write_pcapng(
        path,
        LinkType::User0,
        &[AGENT_A.host, AGENT_B.host],
        &frames,
    );
}

/// The flow of every TX event, in file order, with its frame length.
fn tx_flows(sent: &[Sent]) -> Vec<(Flow, usize)> {
    sent.iter()
        .filter_map(|s| {
            s.record
                .tx()
                .map(|ev| (ev.flow(), capture_payload(s).len()))
        })
        .collect()
}

fn columns_query() -> Query {
    Query::default().pref("gui.column.format", COLUMNS)
}

/// Source/Destination are the flow's addresses (ports in the port columns)
/// for TX frames, IPv4 and IPv6; the host for clock updates and unknown
/// kinds; and the synthesized IP header says the same as the columns.
#[test]
fn columns_from_flow_or_host() {
    let Some(tshark) = Tshark::or_skip("columns_from_flow_or_host") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("golden.pcapng");
    let sent = golden_file(&file);
    let fields = [
        "_ws.col.Source",
        "_ws.col.Destination",
        "_ws.col.SrcPort",
        "_ws.col.DstPort",
        "_ws.col.Protocol",
        "ip.src",
        "ip.dst",
        "ipv6.src",
        "ipv6.dst",
    ];
    let rows = tshark
        .fields(&file, &fields, &columns_query())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rows.len(), sent.len());
    let mut kinds = BTreeSet::new();
    for (row, s) in rows.iter().zip(&sent) {
        let what = format!("{} event {}", s.agent.host, s.event_seq);
        assert_eq!(row.one("_ws.col.Protocol"), "NETTRACE", "{what}");
        match s.record.tx() {
            Some(ev) => {
                let f = ev.flow();
                kinds.insert(if f.saddr.is_ipv4() { "tx4" } else { "tx6" });
                check_flow_columns(row, &f, &what);
                let (src, dst, absent) = if f.saddr.is_ipv4() {
                    ("ip.src", "ip.dst", "ipv6.src")
                } else {
                    ("ipv6.src", "ipv6.dst", "ip.src")
                };
                assert_eq!(row.one(src), f.saddr.to_string(), "{what}: {src}");
                assert_eq!(row.one(dst), f.daddr.to_string(), "{what}: {dst}");
                assert!(!row.has(absent), "{what}: no {absent}");
            }
            None => {
                kinds.insert("host");
                check_host_columns(row, s.agent.host, &what);
            }
        }
    }
    assert_eq!(kinds.len(), 3, "IPv4, IPv6 and flow-less frames: {kinds:?}");

    // Without the IP statistics preference the columns stay, the
    // synthesized header goes.
    let q = columns_query().pref("nettrace.ip_stats", "FALSE");
    let rows = tshark
        .fields(&file, &fields, &q)
        .unwrap_or_else(|e| panic!("{e}"));
    for (row, s) in rows.iter().zip(&sent) {
        let what = format!("{} event {} without ip_stats", s.agent.host, s.event_seq);
        for f in ["ip.src", "ipv6.src"] {
            assert!(!row.has(f), "{what}: no {f}");
        }
        match s.record.tx() {
            Some(ev) => check_flow_columns(row, &ev.flow(), &what),
            None => check_host_columns(row, s.agent.host, &what),
        }
    }
}

fn check_flow_columns(row: &Row, f: &Flow, what: &str) {
    assert_eq!(row.one("_ws.col.Source"), f.saddr.to_string(), "{what}");
    assert_eq!(
        row.one("_ws.col.Destination"),
        f.daddr.to_string(),
        "{what}"
    );
    assert_eq!(row.one("_ws.col.SrcPort"), f.sport.to_string(), "{what}");
    assert_eq!(row.one("_ws.col.DstPort"), f.dport.to_string(), "{what}");
}

fn check_host_columns(row: &Row, host: &str, what: &str) {
    assert_eq!(row.one("_ws.col.Source"), host, "{what}");
    for c in ["_ws.col.Destination", "_ws.col.SrcPort", "_ws.col.DstPort"] {
        assert!(!row.has(c), "{what}: {c} empty, got {row:?}");
    }
}

/// An event whose family is neither 4 nor 6 has no flow: its host is the
/// Source, and no IP header is made up from its address bytes.
#[test]
fn bad_family_shows_host() {
    let Some(tshark) = Tshark::or_skip("bad_family_shows_host") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad-family.pcapng");
    let mut sent: Vec<Sent> = golden_datagrams()
        .into_iter()
        .flat_map(|(_, events)| events)
        .filter(|s| s.record.tx().is_some())
        .take(1)
        .collect();
    if let Record::Tx { ev, .. } = &mut sent[0].record {
        ev.family = 5;
    }
    write_events(&file, &sent);
    let q = columns_query().allow_expert_errors();
    let rows = tshark
        .fields(
            &file,
            &["_ws.col.Source", "_ws.col.Destination", "ip.src"],
            &q,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rows.len(), 1);
    check_host_columns(&rows[0], sent[0].agent.host, "family 5");
    assert!(!rows[0].has("ip.src"));
}

/// Live datagrams keep the columns of the UDP packet that carried them
/// (agent -> sink), and get no synthesized IP header: one datagram holds
/// many events of many flows.
#[test]
fn datagram_columns_are_the_udp_packets() {
    let Some(tshark) = Tshark::or_skip("datagram_columns_are_the_udp_packets") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("udp.pcapng");
    let (agent, events) = golden_datagrams().remove(0);
    let frame = Frame {
        interface: 0,
        time_ns: T0,
        data: ethernet_udp(&datagram(&agent, 0, 0, &events), 7420),
    };
    write_pcapng(&file, LinkType::Ethernet, &["lo"], &[frame]);
    let fields = [
        "_ws.col.Source",
        "_ws.col.Destination",
        "_ws.col.SrcPort",
        "_ws.col.DstPort",
        "ip.src",
        "nettrace.tskey",
    ];
    let rows = tshark
        .fields(&file, &fields, &columns_query())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert!(r.all("nettrace.tskey").len() > 1, "decoded: {r:?}");
    assert_eq!(r.one("_ws.col.Source"), "127.0.0.1");
    assert_eq!(r.one("_ws.col.Destination"), "127.0.0.2");
    assert_eq!(r.one("_ws.col.SrcPort"), "50000");
    assert_eq!(r.one("_ws.col.DstPort"), "7420");
    assert_eq!(r.all("ip.src"), ["127.0.0.1"], "only the real IP header");
}

/// Data lines of the `-z` table titled `title` (after its title, filter
/// and `|`-ruled header lines, up to its closing rule), split on
/// whitespace.
fn table_rows(out: &str, title: &str) -> Vec<Vec<String>> {
    let mut lines = out.lines().skip_while(|l| l.trim() != title);
    assert!(lines.next().is_some(), "no table {title:?} in:\n{out}");
    lines
        .take_while(|l| !l.starts_with("====="))
        .filter(|l| !l.starts_with("Filter:") && !l.contains('|'))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

fn num(s: &str) -> u64 {
    s.parse()
        .unwrap_or_else(|_| panic!("number expected, got {s:?}"))
}

/// Statistics → Conversations (IPv4, IPv6) lists each flow once, with its
/// TX frames in the sender's direction and their bytes; Endpoints counts
/// each address's frames sent and received.
#[test]
fn conversations_and_endpoints() {
    let Some(tshark) = Tshark::or_skip("conversations_and_endpoints") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("golden.pcapng");
    let flows = tx_flows(&golden_file(&file));
    tshark.check_clean(&file, &Query::default()).unwrap();
    let args = [
        "-q",
        "-z",
        "conv,ipv4",
        "-z",
        "conv,ipv6",
        "-z",
        "endpoints,ipv4",
        "-z",
        "endpoints,ipv6",
    ];
    let out = tshark
        .run(&file, &Query::default(), &args)
        .unwrap_or_else(|e| panic!("{e}"));

    // (a, b) -> (frames a -> b, bytes a -> b): every event goes saddr -> daddr.
    let mut want_conv: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    // address -> (frames sent, frames received)
    let mut want_ep: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (f, len) in &flows {
        let c = want_conv
            .entry((f.saddr.to_string(), f.daddr.to_string()))
            .or_default();
        c.0 += 1;
        c.1 += *len as u64;
        want_ep.entry(f.saddr.to_string()).or_default().0 += 1;
        want_ep.entry(f.daddr.to_string()).or_default().1 += 1;
    }
    assert!(want_conv.len() >= 5, "golden flows: {want_conv:?}");

    let mut got_conv = BTreeMap::new();
    for title in ["IPv4 Conversations", "IPv6 Conversations"] {
        for t in table_rows(&out, title) {
            // a <-> b | frames bytes "bytes" (b -> a) | frames bytes "bytes"
            // (a -> b) | total frames bytes "bytes" | start | duration
            assert_eq!(t[1], "<->", "{title}: {t:?}");
            assert_eq!((t[5].as_str(), t[8].as_str()), ("bytes", "bytes"), "{t:?}");
            assert_eq!(num(&t[3]), 0, "{title}: nothing in reverse: {t:?}");
            assert_eq!(num(&t[9]), num(&t[6]), "{title}: total {t:?}");
            let key = (t[0].clone(), t[2].clone());
            assert!(got_conv.insert(key, (num(&t[6]), num(&t[7]))).is_none());
        }
    }
    assert_eq!(got_conv, want_conv, "conversations:\n{out}");

    let mut got_ep = BTreeMap::new();
    for title in ["IPv4 Endpoints", "IPv6 Endpoints"] {
        for t in table_rows(&out, title) {
            // address | packets bytes | tx packets bytes | rx packets bytes
            assert_eq!(t.len(), 7, "{title}: {t:?}");
            assert!(got_ep
                .insert(t[0].clone(), (num(&t[3]), num(&t[5])))
                .is_none());
        }
    }
    assert_eq!(got_ep, want_ep, "endpoints:\n{out}");
}

/// The Flow Graph (any addresses) draws one arrow per TX frame between
/// the flow's addresses, source port to destination port.
#[test]
fn flow_graph_arrows() {
    let Some(tshark) = Tshark::or_skip("flow_graph_arrows") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("golden.pcapng");
    let flows = tx_flows(&golden_file(&file));
    let out = tshark
        .run(&file, &Query::default(), &["-q", "-z", "flow,any,network"])
        .unwrap_or_else(|e| panic!("{e}"));
    let arrows: Vec<&str> = out.lines().filter(|l| l.contains("--->")).collect();
    assert_eq!(arrows.len(), flows.len(), "one arrow per TX frame:\n{out}");
    for (line, (f, _)) in arrows.iter().zip(&flows) {
        let ports = format!("({})", f.sport);
        assert!(line.contains(&ports), "{line:?} from port {}", f.sport);
        assert!(line.contains(&format!("({})", f.dport)), "{line:?}");
    }
    let nodes: String = out
        .lines()
        .skip_while(|l| !l.starts_with("|Time"))
        .take(2)
        .collect();
    for (f, _) in &flows {
        for a in [f.saddr, f.daddr] {
            assert!(nodes.contains(&a.to_string()), "node {a} in {nodes:?}");
        }
    }
}

/// The I/O Graph recipe of docs/reading-a-trace.md is in the doc, parses in
/// tshark 4.0, and averages the SND_SW latency per interval (10 µs here,
/// the golden events spanning 52 µs): the averages of the latency model.
#[test]
fn io_graph_recipe() {
    let Some(tshark) = Tshark::or_skip("io_graph_recipe") else {
        return;
    };
    let doc = std::fs::read_to_string(
        tracer_e2e::bins::repo_root()
            .join("docs")
            .join("reading-a-trace.md"),
    )
    .unwrap();
    let doc_arg = format!("io,stat,0.01,\"{IO_RECIPE}\"");
    assert!(doc.contains(&doc_arg), "the doc shows {doc_arg}");
    for part in ["nettrace.lat.snd_sw_ns", "nettrace.stage == SND_SW", "AVG"] {
        assert!(doc.contains(part), "the doc names {part}");
    }

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("golden.pcapng");
    let sent = golden_file(&file);
    // The doc's own interval parses and runs.
    tshark
        .run(
            &file,
            &Query::default(),
            &["-q", "-z", &format!("io,stat,0.01,{IO_RECIPE}")],
        )
        .unwrap_or_else(|e| panic!("{e}"));

    const INTERVAL_NS: u64 = 10_000;
    let out = tshark
        .run(
            &file,
            &Query::default(),
            &["-q", "-z", &format!("io,stat,0.00001,{IO_RECIPE}")],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let start = sent[0].time_ns;
    let mut model = LatencyModel::default();
    let mut buckets: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    for s in &sent {
        if let Some(ev) = s.record.tx() {
            let lat = model.next(s.agent.agent_id, ev);
            if ev.stage == SND_SW {
                if let Some(ns) = lat.snd_sw_ns {
                    buckets
                        .entry((s.time_ns - start) / INTERVAL_NS)
                        .or_default()
                        .push(ns);
                }
            }
        }
    }
    assert!(buckets.len() >= 2, "latencies in several intervals");
    // "| 0.00001 <> 0.00002 | 2992 |"
    let got: Vec<i64> = out
        .lines()
        .filter(|l| l.contains(" <> "))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            cells[2].parse().expect("AVG cell")
        })
        .collect();
    assert!(got.len() >= 5, "intervals:\n{out}");
    for (i, avg) in got.iter().enumerate() {
        let want = buckets
            .get(&(i as u64))
            .map_or(0, |v| v.iter().sum::<i64>() / v.len() as i64);
        assert_eq!(*avg, want, "interval {i}:\n{out}");
    }
}
