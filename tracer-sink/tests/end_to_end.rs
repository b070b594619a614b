//! In-process sink: three simulated agents send real UDP datagrams; the
//! pcapng read back has one IDB per agent, one EPB per event in global-time
//! order with packet id, comment and a decodable capture record, and ISBs.

mod common;

use std::collections::HashMap;

use common::*;
use tracer_codec::{CaptureRecord, Event, RawRecord, TxEvent};
use tracer_sink::SinkConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_agents_round_trip() {
    let sink = TestSink::start(|c| SinkConfig {
        comments: true,
        ..c
    })
    .await;
    let tx = sender();

    let mut agents = [
        SimAgent::new(0x1111_0000_0000_0001, "alpha"),
        SimAgent::new(0x2222_0000_0000_0002, "beta.example.org"),
        SimAgent::new(0x3333_0000_0000_0003, "gamma"),
    ];
    agents[1].clock_source = 1; // phc
    agents[1].clock_state = 3;
    agents[2].clock_source = 2; // sink

    // Each agent sends 10 datagrams of 5 events; the agents' clocks
    // interleave, and every datagram is sent a little out of time order
    // relative to the others (as from several CPUs).
    let mut sent: HashMap<(u64, u64), TxEvent> = HashMap::new();
    let mut datagrams = Vec::new();
    for round in 0..10u64 {
        for (ai, a) in agents.iter_mut().enumerate() {
            let evs: Vec<TxEvent> = (0..5u64)
                .map(|k| {
                    // Later rounds are earlier in time for agent 2: the
                    // writer must reorder.
                    let t = if ai == 2 { 100 - round } else { round };
                    tx_event(
                        BASE_NS + t * 10_000 + k * 100 + ai as u64,
                        round * 10 + k,
                        (k % 5) as u8,
                    )
                })
                .collect();
            for (k, e) in evs.iter().enumerate() {
                sent.insert((a.agent_id, a.event_seq + k as u64), *e);
            }
            datagrams.push(a.datagram(&evs));
        }
    }
    // One record of a kind this build does not know: kept, stamped with
    // the sink's receive time.
    let unknown = agents[0].datagram_raw(&[(99, vec![7u8; 33])]);
    datagrams.push(unknown);
    for d in &datagrams {
        tx.send_to(d, sink.addr).unwrap();
    }

    let (stats, dir) = sink.stop().await;
    assert_eq!(stats.datagrams_received, 31);
    assert_eq!(stats.datagrams_accepted, 31);
    assert_eq!(stats.events_accepted, 151);
    assert_eq!(stats.events_written, 151);
    assert_eq!(stats.sink_write_lost, 0);
    assert_eq!(stats.events_out_of_order, 0);
    assert_eq!(stats.files, 1);
    assert_eq!(stats.agents.len(), 3);
    for (a, s) in agents.iter().zip(&stats.agents) {
        assert_eq!(s.agent_id, format!("{:016x}", a.agent_id));
        assert_eq!(s.host, a.host);
        assert_eq!(
            (s.datagram_gaps, s.event_gaps, s.agent_lost, s.duplicates),
            (0, 0, 0, 0)
        );
    }
    assert_eq!(stats.agents[1].clock_source, "phc");
    assert_eq!(stats.agents[1].clock_state, "LOCKED_STABLE");

    let out = dir.path().join("out");
    let files = files(&out);
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_string_lossy().to_string();
    assert!(
        name.starts_with("trace-")
            && name.ends_with("-000.pcapng.zst")
            && name.len() == "trace-20240101T000000Z-000.pcapng.zst".len(),
        "{name}"
    );
    let sections = read_file(&files[0]);
    assert_eq!(sections.len(), 1);
    let s = &sections[0];
    assert_eq!(
        s.shb_app.as_deref(),
        Some(concat!("tracer-sink ", env!("CARGO_PKG_VERSION")))
    );

    // One IDB per agent, before any EPB.
    assert_eq!(s.idbs.len(), 3);
    assert_eq!(&s.order[..4], &['S', 'I', 'I', 'I']);
    for (a, idb) in agents.iter().zip(&s.idbs) {
        assert_eq!(idb.linktype, pcap_file::DataLink::USER0);
        assert_eq!(idb_name(idb), a.host);
        let clock = ["system", "phc", "sink"][a.clock_source as usize];
        assert_eq!(
            idb_desc(idb),
            format!(
                "agent {:016x} clock {clock} incarnation {:016x} from {}",
                a.agent_id,
                a.incarnation,
                tx.local_addr().unwrap()
            )
        );
        assert_eq!(
            idb.ts_resolution(),
            pcap_file::pcapng::blocks::interface_description::InterfaceTsResolution::NANO
        );
    }

    // One EPB per event, in timestamp order, each decoding to what was sent.
    assert_eq!(s.epbs.len(), 151);
    let mut last = 0;
    let mut unknown_seen = 0;
    for e in &s.epbs {
        let ts = ns(e.timestamp);
        assert!(ts >= last, "events out of order");
        last = ts;
        let cap = CaptureRecord::decode(&e.data).expect("capture record");
        assert_eq!(e.original_len as usize, e.data.len());
        let agent = &agents[e.interface_id as usize];
        assert_eq!(cap.agent_id, agent.agent_id);
        assert_eq!(cap.host, agent.host);
        assert_eq!(cap.clock_source, agent.clock_source);
        assert_eq!(cap.clock_state, agent.clock_state);
        assert_eq!(epb_packet_id(e), Some(cap.event_seq));
        let rec: RawRecord = cap.record;
        match rec.decode().expect("record") {
            Event::Tx(tx) => {
                let want = sent[&(cap.agent_id, cap.event_seq)];
                assert_eq!(tx, want);
                assert_eq!(ts, want.global_ns);
                assert_eq!(epb_comment(e), Some(want.summary()));
            }
            Event::Clock(c) => panic!("no clock event was sent: {c:?}"),
            Event::Rx(r) => panic!("no RX event was sent: {r:?}"),
            Event::Drop(d) => panic!("no drop event was sent: {d:?}"),
            Event::Tcp(t) => panic!("no tcp event was sent: {t:?}"),
            Event::Cpu(c) => panic!("no cpu event was sent: {c:?}"),
            Event::Unknown { kind, len } => {
                unknown_seen += 1;
                assert_eq!((kind, len), (99, 33));
                assert_eq!(rec.body, &[7u8; 33][..]);
                // Receive time on the sink's TAI clock: now-ish.
                assert!(
                    ts > BASE_NS + 3600 * 1_000_000_000,
                    "unknown kind stamped with receive time"
                );
                assert_eq!(
                    epb_comment(e).as_deref(),
                    Some("unknown event kind 99 (33 bytes)")
                );
            }
        }
    }
    assert_eq!(unknown_seen, 1);

    // One ISB per interface at the end, with counters.
    assert_eq!(s.isbs.len(), 3);
    assert!(s.order.ends_with(&['T', 'T', 'T']));
    for isb in &s.isbs {
        let (recv, drop, comment) = isb_counts(isb);
        let want = if isb.interface_id == 0 { 51 } else { 50 };
        assert_eq!(recv, Some(want));
        assert_eq!(drop, Some(0));
        assert!(comment.unwrap().contains("datagram_gaps=0"));
    }

    // tshark, when installed, must read the file without complaint.
    if let Ok(out) = std::process::Command::new("tshark")
        .args([
            "-r",
            files[0].to_str().unwrap(),
            "-T",
            "fields",
            "-e",
            "frame.number",
        ])
        .output()
    {
        assert!(
            out.status.success(),
            "tshark: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 151);
    } else {
        tracer_e2e::skip::skip("tshark not installed: the file was not read back by tshark");
    }
}
