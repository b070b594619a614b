//! Loss accounting: skipped datagrams, agent-side losses, a late datagram
//! that fills a gap, duplicates; in the stats and in the ISB drop counts.

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gaps_late_fills_duplicates_and_agent_losses() {
    let sink = TestSink::start(|c| c).await;
    let tx = sender();
    let mut a = SimAgent::new(0xA, "lossy");
    let mut b = SimAgent::new(0xB, "clean");

    let ev = |i: u64| tx_event(BASE_NS + i * 1000, i, 1);
    // a: seq 0 (3 events), [seq 1 (4 events) held back], [seq 2 (2) lost],
    //    seq 3 (1 event, lost_events=7), seq 3 again (duplicate),
    //    then seq 1 arrives late, then seq 4 (lost_events=5: an older,
    //    smaller cumulative value must not lower the max).
    let d0 = a.datagram(&[ev(0), ev(1), ev(2)]);
    let d1 = a.datagram(&[ev(3), ev(4), ev(5), ev(6)]);
    let _d2_lost = a.datagram(&[ev(7), ev(8)]);
    a.lost_events = 7;
    let d3 = a.datagram(&[ev(9)]);
    a.lost_events = 5;
    let d4 = a.datagram(&[ev(10), ev(11)]);
    for d in [&d0, &d3, &d3, &d1, &d4, &d0] {
        tx.send_to(d, sink.addr).unwrap();
    }
    // b: clean stream of 3 datagrams.
    for i in 0..3 {
        let d = b.datagram(&[ev(100 + i)]);
        tx.send_to(&d, sink.addr).unwrap();
    }

    let (stats, dir) = sink.stop().await;
    let sa = &stats.agents[0];
    assert_eq!(sa.host, "lossy");
    assert_eq!(sa.datagrams, 4, "d0, d3, d1 (late), d4");
    assert_eq!(sa.events, 3 + 1 + 4 + 2);
    assert_eq!(sa.datagram_gaps, 1, "only d2 is still missing");
    assert_eq!(sa.event_gaps, 2, "d2 held 2 events");
    assert_eq!(sa.agent_lost, 7);
    assert_eq!(sa.duplicates, 2, "d3 and d0 again");
    assert_eq!(sa.late_datagrams, 1);
    assert_eq!(sa.dropped(), 9);
    let sb = &stats.agents[1];
    assert_eq!(
        (
            sb.datagrams,
            sb.events,
            sb.datagram_gaps,
            sb.event_gaps,
            sb.duplicates
        ),
        (3, 3, 0, 0, 0)
    );
    assert_eq!(stats.rejects["duplicate"], 2);
    assert_eq!(stats.datagrams_rejected, 2);
    assert_eq!(stats.events_written, 13);
    let src = stats
        .rejects_by_source
        .values()
        .next()
        .expect("per-source rejects");
    assert_eq!(src["duplicate"], 2);

    let f = files(&dir.path().join("out"));
    let s = &read_file(&f[0])[0];
    assert_eq!(s.epbs.len(), 13);
    // The late datagram's events are in time order with the rest.
    let ts: Vec<u64> = s.epbs.iter().map(|e| ns(e.timestamp)).collect();
    assert!(ts.windows(2).all(|w| w[0] <= w[1]));
    for isb in &s.isbs {
        let (recv, drop, comment) = isb_counts(isb);
        let comment = comment.unwrap();
        if iface_agent(s, isb.interface_id) == format!("{:016x}", 0xA) {
            assert_eq!((recv, drop), (Some(10), Some(9)));
            assert!(
                comment.contains("datagram_gaps=1 event_gaps=2 agent_lost=7"),
                "{comment}"
            );
            assert!(comment.contains("duplicates=2"), "{comment}");
        } else {
            assert_eq!((recv, drop), (Some(3), Some(0)));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_restart_is_a_new_interface() {
    let sink = TestSink::start(|c| c).await;
    let tx = sender();
    let mut first = SimAgent::new(0x100, "host");
    tx.send_to(&first.datagram(&[tx_event(BASE_NS, 1, 0)]), sink.addr)
        .unwrap();
    // Restarted agent process: new random id, sequence from 0 again.
    let mut second = SimAgent::new(0x200, "host");
    tx.send_to(&second.datagram(&[tx_event(BASE_NS + 5, 2, 0)]), sink.addr)
        .unwrap();
    let (stats, dir) = sink.stop().await;
    assert_eq!(stats.agents.len(), 2, "{stats:#?}");
    assert_eq!(stats.rejects["duplicate"], 0);
    let s = &read_file(&files(&dir.path().join("out"))[0])[0];
    assert_eq!(s.idbs.len(), 2);
    assert_eq!(s.epbs.len(), 2);
}
