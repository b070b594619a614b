//! CPU events (kind 6) through the in-process sink: accepted, ordered and
//! stamped with their own global time like every other known kind, with
//! the codec's summary as the frame comment; a CPU body shorter than its
//! layout rejects its datagram; and a kind this build does not know is
//! still kept and stamped with the sink's receive time, as before.

mod common;

use common::*;
use tracer_codec::{CaptureRecord, CpuEvent, Event, EventKind};
use tracer_sink::SinkConfig;

fn cpu_event(global_ns: u64, cpu: u32, net_rx_ns: u64) -> CpuEvent {
    CpuEvent {
        mono_ns: global_ns - BASE_NS + 5_000,
        global_ns,
        interval_ns: 1_000_000_000,
        net_rx_ns,
        net_tx_ns: 1_000_000,
        sock_send_ns: 50_000_000,
        sock_recv_ns: 22_000_000,
        cpu,
    }
}

fn body<E: tracer_codec::WireEvent>(ev: &E) -> Vec<u8> {
    let mut b = Vec::new();
    ev.encode_body(&mut b);
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_events_are_written_at_their_global_time_with_their_summary() {
    let sink = TestSink::start(|c| SinkConfig {
        comments: true,
        ..c
    })
    .await;
    let tx = sender();
    let mut agent = SimAgent::new(0xC0C0_0000_0000_0001, "cpuhost");

    // Two reads of two CPUs, the later read sent first, a TX event between
    // them in time: the file is in global-time order.
    let second = [
        cpu_event(BASE_NS + 2_000_000_000, 0, 300_000_000),
        cpu_event(BASE_NS + 2_000_000_001, 1, 0),
    ];
    let first = [
        cpu_event(BASE_NS + 1_000_000_000, 0, 234_000_000),
        cpu_event(BASE_NS + 1_000_000_001, 1, 7),
    ];
    let between = tx_event(BASE_NS + 1_500_000_000, 9, 0);
    let d1 = agent.datagram_raw(&[
        (EventKind::CPU, body(&second[0])),
        (EventKind::CPU, body(&second[1])),
    ]);
    let d2 = agent.datagram_raw(&[
        (EventKind::CPU, body(&first[0])),
        (EventKind::TX, body(&between)),
        (EventKind::CPU, body(&first[1])),
    ]);
    // Unknown to this build: kept, stamped with the receive time.
    let d3 = agent.datagram_raw(&[(99, vec![7u8; 12])]);
    for d in [&d1, &d2, &d3] {
        tx.send_to(d, sink.addr).unwrap();
    }
    // A CPU body one byte short, from another agent: the datagram is
    // refused whole, by reason.
    let mut short = body(&first[0]);
    short.pop();
    let mut bad_agent = SimAgent::new(0xC0C0_0000_0000_0002, "badhost");
    let bad = bad_agent.datagram_raw(&[(EventKind::TX, body(&between)), (EventKind::CPU, short)]);
    tx.send_to(&bad, sink.addr).unwrap();

    let (stats, dir) = sink.stop().await;
    assert_eq!(stats.datagrams_accepted, 3);
    assert_eq!(stats.events_written, 6);
    assert_eq!(stats.rejects.get("body_too_short"), Some(&1), "{stats:?}");
    assert_eq!(stats.agents[0].event_gaps, 0);

    let files = files(&dir.path().join("out"));
    assert_eq!(files.len(), 1);
    let sections = read_file(&files[0]);
    let s = &sections[0];
    assert_eq!(s.epbs.len(), 6);
    let mut got = Vec::new();
    for e in &s.epbs {
        let cap = CaptureRecord::decode(&e.data).expect("capture record");
        assert_eq!(cap.host, "cpuhost");
        got.push((ns(e.timestamp), cap.record.decode().expect("record"), e));
    }
    let want = [first[0], first[1], second[0], second[1]];
    let cpus: Vec<(u64, CpuEvent)> = got
        .iter()
        .filter_map(|(ts, ev, _)| match ev {
            Event::Cpu(c) => Some((*ts, *c)),
            _ => None,
        })
        .collect();
    assert_eq!(
        cpus,
        want.iter().map(|c| (c.global_ns, *c)).collect::<Vec<_>>(),
        "each CPU event at its own global time, in time order"
    );
    // The TX event sits between the two reads.
    let kinds: Vec<u16> = got.iter().map(|(_, ev, _)| ev.kind().as_u16()).collect();
    assert_eq!(kinds[..5], [6, 6, 1, 6, 6]);
    for (_, ev, e) in &got[..5] {
        assert_eq!(epb_comment(e), Some(ev.summary()));
    }
    assert_eq!(
        epb_comment(got[0].2).as_deref(),
        Some("CPU 0: NET_RX 23.4% NET_TX 0.1% send 5.0% recv 2.2% of 1.000 s")
    );
    let (ts, ev, e) = &got[5];
    assert_eq!(*ev, Event::Unknown { kind: 99, len: 12 });
    assert!(
        *ts > BASE_NS + 3600 * 1_000_000_000,
        "an unknown kind still gets the receive time"
    );
    assert_eq!(
        epb_comment(e).as_deref(),
        Some("unknown event kind 99 (12 bytes)")
    );
}
