//! Authenticated ingest and the sink's trust accounting, driving the real
//! sink on 127.0.0.1:0: a keyed sink takes only datagrams tagged with its
//! key (untagged, wrongly keyed, altered and replayed ones are counted by
//! reason and never reach the file); a keyless sink takes old and new
//! agents, tagged or not; source addresses are recorded and changes
//! counted; a forgery at a future sequence number does not turn the real
//! datagram into a "duplicate"; a restarted agent is a new incarnation;
//! every agent gets acknowledgements of what reached the file.

mod common;

use std::net::UdpSocket;
use std::time::Duration;

use common::*;
use tracer_auth::{Purpose, SharedKey};
use tracer_codec::{Ack, TxEvent, WIRE_VERSION_1};
use tracer_sink::{SinkConfig, SinkKeys};

fn key(seed: u8) -> SharedKey {
    SharedKey::from_bytes(&[seed; 32]).unwrap()
}

fn ev(i: u64) -> TxEvent {
    tx_event(BASE_NS + i * 1000, i, 1)
}

/// ISB comment of the only file's interface `i`.
fn isb_comment(dir: &std::path::Path, i: usize) -> String {
    let f = files(dir);
    let s = read_file(&f[0]);
    isb_counts(&s[0].isbs[i]).2.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_sink_refuses_missing_wrong_altered_and_replayed_datagrams() {
    let k = key(1);
    let sink = TestSink::start(|c| SinkConfig {
        keys: Some(SinkKeys::from_shared(&k)),
        ..c
    })
    .await;
    let tx = sender();
    let mut good = SimAgent::new(0xA, "good").with_key(&k);
    let mut nokey = SimAgent::new(0xB, "nokey");
    let mut wrong = SimAgent::new(0xC, "wrong").with_key(&key(2));
    let mut old = SimAgent::new(0xD, "old");
    old.version = WIRE_VERSION_1;

    let d0 = good.datagram(&[ev(1), ev(2)]);
    let d1 = good.datagram(&[ev(3)]);
    for d in [&d0, &d1] {
        tx.send_to(d, sink.addr).unwrap();
    }
    // Held until the agent binds to this sink; taken when it has.
    good.bind(&tx);
    tx.send_to(&nokey.datagram(&[ev(10)]), sink.addr).unwrap();
    tx.send_to(&old.datagram(&[ev(11)]), sink.addr).unwrap();
    tx.send_to(&wrong.datagram(&[ev(12)]), sink.addr).unwrap();
    // One bit changed anywhere, header, record or tag: refused.
    let d2 = good.datagram(&[ev(4)]);
    let mut altered = Vec::new();
    for at in [5, 33, 49, 61, 70, d2.len() - 30, d2.len() - 1] {
        let mut b = d2.clone();
        b[at] ^= 0x01;
        altered.push(b);
    }
    // The tag cut off and the flag cleared: an untagged datagram now.
    let mut stripped = d2[..d2.len() - tracer_codec::MAC_LEN].to_vec();
    stripped[61] = 0;
    for b in altered.iter().chain([&stripped]) {
        tx.send_to(b, sink.addr).unwrap();
    }
    tx.send_to(&d2, sink.addr).unwrap();
    // Replays: the same bytes again, from the agent's address and another.
    tx.send_to(&d0, sink.addr).unwrap();
    sender().send_to(&d1, sink.addr).unwrap();

    let (stats, dir) = sink.stop().await;
    assert!(stats.authenticated);
    let r = |k: &str| stats.rejects[k];
    // The header is read first: the change at offset 5 makes version 259
    // (`bad_version`), the one at 61 clears the tag flag ("untagged").
    assert_eq!(r("bad_version"), 1);
    assert_eq!(
        r("auth_missing"),
        4,
        "unkeyed v2, old v1, stripped, flag cleared"
    );
    assert_eq!(
        r("auth_bad"),
        1 + altered.len() as u64 - 2,
        "wrong key, altered"
    );
    assert_eq!(r("replay"), 2);
    assert_eq!(r("duplicate"), 0, "replays are caught before the tracker");
    assert_eq!(stats.datagrams_accepted, 3);
    assert_eq!(stats.agents.len(), 1, "no interface for a refused sender");
    assert_eq!(stats.agents[0].host, "good");
    assert_eq!(stats.agents[0].events, 4);
    assert_eq!(written_cookies(&dir.path().join("out")), [1, 2, 3, 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_sink_takes_old_and_new_agents_tagged_or_not() {
    let sink = TestSink::start(|c| c).await;
    let tx = sender();
    let mut old = SimAgent::new(0x1, "old");
    old.version = WIRE_VERSION_1;
    let mut plain = SimAgent::new(0x2, "plain");
    let mut tagged = SimAgent::new(0x3, "tagged").with_key(&key(7));
    for i in 0..3 {
        tx.send_to(&old.datagram(&[ev(10 + i)]), sink.addr).unwrap();
        tx.send_to(&plain.datagram(&[ev(20 + i)]), sink.addr)
            .unwrap();
        tx.send_to(&tagged.datagram(&[ev(30 + i)]), sink.addr)
            .unwrap();
    }
    let (stats, dir) = sink.stop().await;
    assert!(!stats.authenticated);
    assert_eq!(stats.datagrams_rejected, 0, "{:?}", stats.rejects);
    assert_eq!(stats.tags_unchecked, 3);
    assert_eq!(stats.agents.len(), 3);
    assert_eq!(stats.agents[0].incarnation, "0000000000000000", "v1");
    for a in &stats.agents {
        assert_eq!((a.datagrams, a.events, a.event_gaps), (3, 3, 0), "{a:?}");
    }
    let mut want: Vec<u64> = (10..13).chain(20..23).chain(30..33).collect();
    want.sort();
    assert_eq!(written_cookies(&dir.path().join("out")), want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_changes_are_recorded_and_counted() {
    let sink = TestSink::start(|c| c).await;
    let (first, second) = (sender(), sender());
    let mut a = SimAgent::new(0x5, "moving");
    first.send_to(&a.datagram(&[ev(1)]), sink.addr).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    second.send_to(&a.datagram(&[ev(2)]), sink.addr).unwrap();
    second.send_to(&a.datagram(&[ev(3)]), sink.addr).unwrap();
    let (stats, dir) = sink.stop().await;
    let s = &stats.agents[0];
    assert_eq!(s.source_changes, 1);
    assert_eq!(s.source, second.local_addr().unwrap().to_string());
    let out = dir.path().join("out");
    let sec = read_file(&files(&out)[0]);
    let desc = idb_desc(&sec[0].idbs[0]);
    assert!(
        desc.ends_with(&format!("from {}", first.local_addr().unwrap())),
        "{desc}"
    );
    let c = isb_comment(&out, 0);
    assert!(c.contains("source_changes=1"), "{c}");
    assert!(
        c.contains(&format!("source={}", second.local_addr().unwrap())),
        "{c}"
    );
}

/// Defect: a forged datagram at a future sequence number made the real
/// datagram with that number a "duplicate" (its events vanished). Without
/// a key the sink cannot tell which is real: it keeps both, counts a
/// conflict and warns; an exact copy is still a duplicate. With a key the
/// forgery is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_future_datagram_does_not_hide_the_real_one() {
    for keyed in [false, true] {
        let k = key(3);
        let sink = TestSink::start(|c| SinkConfig {
            keys: keyed.then(|| SinkKeys::from_shared(&k)),
            ..c
        })
        .await;
        let (agent_sock, forger_sock) = (sender(), sender());
        let mut real = SimAgent::new(0x77, "victim");
        if keyed {
            real = real.with_key(&k);
        }
        // The forger copies the victim's identity (all visible on the wire)
        // and claims sequence 5 before the agent gets there.
        let mut forger = SimAgent::new(0x77, "victim");
        forger.incarnation = real.incarnation;
        forger.seq = 5;
        forger.event_seq = 5;
        for i in 0..3 {
            agent_sock
                .send_to(&real.datagram(&[ev(i)]), sink.addr)
                .unwrap();
        }
        if keyed {
            real.bind(&agent_sock);
        }
        forger_sock
            .send_to(&forger.datagram(&[ev(999)]), sink.addr)
            .unwrap();
        let mut last = Vec::new();
        for i in 3..8 {
            last = real.datagram(&[ev(i)]);
            agent_sock.send_to(&last, sink.addr).unwrap();
        }
        agent_sock.send_to(&last, sink.addr).unwrap(); // a true duplicate
        let (stats, dir) = sink.stop().await;
        let s = &stats.agents[0];
        let cookies = written_cookies(&dir.path().join("out"));
        assert!(
            (0..8).all(|c| cookies.contains(&c)),
            "keyed={keyed}: every real event is in the file: {cookies:?}"
        );
        if keyed {
            assert_eq!(stats.rejects["auth_missing"], 1);
            assert_eq!(stats.rejects["replay"], 1, "the true copy");
            assert_eq!(s.duplicates, 0);
            assert!(!cookies.contains(&999));
            assert_eq!((s.seq_conflicts, s.source_changes), (0, 0));
        } else {
            assert_eq!(s.duplicates, 1, "only the true copy");
            assert!(cookies.contains(&999), "both are kept");
            assert_eq!(s.seq_conflicts, 1);
            assert_eq!(s.source_changes, 2, "to the forger and back");
            let c = isb_comment(&dir.path().join("out"), 0);
            assert!(c.contains("seq_conflicts=1"), "{c}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_is_a_new_incarnation_not_duplicates() {
    let sink = TestSink::start(|c| c).await;
    let tx = sender();
    let mut a = SimAgent::new(0x42, "fixed-id");
    for i in 0..3 {
        tx.send_to(&a.datagram(&[ev(i)]), sink.addr).unwrap();
    }
    // Same --agent-id, same boot, new process: sequences start again.
    let mut b = SimAgent::new(0x42, "fixed-id");
    b.incarnation = a.incarnation + 1;
    for i in 10..13 {
        tx.send_to(&b.datagram(&[ev(i)]), sink.addr).unwrap();
    }
    let (stats, dir) = sink.stop().await;
    assert_eq!(stats.datagrams_rejected, 0, "{:?}", stats.rejects);
    assert_eq!(stats.agents.len(), 2);
    assert_ne!(stats.agents[0].incarnation, stats.agents[1].incarnation);
    assert_eq!(stats.agents[0].agent_id, stats.agents[1].agent_id);
    assert_eq!(
        written_cookies(&dir.path().join("out")),
        [0, 1, 2, 10, 11, 12]
    );
}

/// Acknowledgements received on `sock` until `want(ack)` or 10 s.
fn ack_until(sock: &UdpSocket, want: impl Fn(&Ack) -> bool) -> (Ack, Vec<u8>) {
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let end = std::time::Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 256];
    while std::time::Instant::now() < end {
        if let Ok(n) = sock.recv(&mut buf) {
            let (ack, _) = Ack::parse(&buf[..n]).expect("an acknowledgement");
            if want(&ack) {
                return (ack, buf[..n].to_vec());
            }
        }
    }
    panic!("no acknowledgement as wanted within 10 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_get_tagged_acknowledgements_of_what_reached_the_file() {
    let k = key(9);
    let sink = TestSink::start(|c| SinkConfig {
        keys: Some(SinkKeys::from_shared(&k)),
        reorder_window: Duration::from_millis(20),
        ..c
    })
    .await;
    let sock = sender();
    sock.connect(sink.addr).unwrap();
    // An agent the sink first hears from at event 1000 (it was sending
    // before this sink started), with one datagram lost on the way.
    let mut a = SimAgent::new(0x99, "acked").with_key(&k);
    a.seq = 100;
    a.event_seq = 1000;
    sock.send(&a.datagram(&[ev(1), ev(2)])).unwrap();
    a.bind(&sock);
    let _lost = a.datagram(&[ev(3), ev(4), ev(5)]);
    sock.send(&a.datagram(&[ev(6)])).unwrap();
    let (ack, bytes) = ack_until(&sock, |a| a.delivered_events == 3);
    assert_eq!(
        (
            ack.preceding_events,
            ack.delivered_events,
            ack.lost_events,
            ack.received_events
        ),
        (1000, 3, 3, 3)
    );
    assert_eq!(
        (ack.agent_id, ack.boot_id, ack.incarnation),
        (a.agent_id, a.boot_id, a.incarnation)
    );
    let (_, tagged) = Ack::parse(&bytes).unwrap();
    let (signed, tag) = tagged.expect("a keyed sink tags its acks");
    assert!(k.mac_key(Purpose::Ack).verify(signed, tag));
    assert!(!k.mac_key(Purpose::Datagram).verify(signed, tag));
    let (stats, dir) = sink.stop().await;
    assert!(stats.acks_sent >= 1);
    let s = &stats.agents[0];
    assert_eq!((s.preceding_events, s.delivered_events), (1000, 3));
    let c = isb_comment(&dir.path().join("out"), 0);
    assert!(c.contains("preceding_events=1000"), "{c}");
}

/// The tag and the replay window come before the bounded agent table: a
/// flood of forged agents (no key, wrong key) from one source spends none
/// of that source's new-agent budget, a forged far-future sequence number
/// moves nothing, and replays of a real agent's datagrams are `replay`,
/// never `duplicate` or `seq_jump`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgeries_spend_no_admission_budget_and_move_no_sequence() {
    let k = key(3);
    let sink = TestSink::start(|c| SinkConfig {
        keys: Some(SinkKeys::from_shared(&k)),
        ..c
    })
    .await;
    let tx = sender();
    let burst = tracer_sink::limits::SOURCE_BURST as u64;
    for id in 0..(4 * burst) {
        let mut unkeyed = SimAgent::new(0x1000 + id, "forged");
        tx.send_to(&unkeyed.datagram(&[ev(900)]), sink.addr)
            .unwrap();
        let mut wrong = SimAgent::new(0x2000 + id, "forged").with_key(&key(4));
        tx.send_to(&wrong.datagram(&[ev(901)]), sink.addr).unwrap();
    }
    // A forged datagram of a real agent id far ahead in sequence.
    let mut real = SimAgent::new(0xAA, "real").with_key(&k);
    let mut forged_ahead = SimAgent::new(0xAA, "real");
    forged_ahead.incarnation = real.incarnation;
    forged_ahead.seq = 1 << 40;
    let first = real.datagram(&[ev(1)]);
    tx.send_to(&first, sink.addr).unwrap();
    real.bind(&tx);
    tx.send_to(&forged_ahead.datagram(&[ev(902)]), sink.addr)
        .unwrap();
    // The source's whole burst is still there for real agents (each binds
    // to the sink, then its datagrams are taken).
    let mut others: Vec<SimAgent> = (1..burst)
        .map(|i| SimAgent::new(0xAA + i, "real").with_key(&k))
        .collect();
    for (i, a) in others.iter_mut().enumerate() {
        tx.send_to(&a.datagram(&[ev(10 + i as u64)]), sink.addr)
            .unwrap();
        a.bind(&tx);
        tx.send_to(&a.datagram(&[ev(30 + i as u64)]), sink.addr)
            .unwrap();
    }
    let second = real.datagram(&[ev(2)]);
    for d in [&second, &first, &second] {
        tx.send_to(d, sink.addr).unwrap();
    }
    let (stats, _dir) = sink.stop().await;
    let r = |k: &str| stats.rejects[k];
    assert_eq!(r("auth_missing"), 4 * burst + 1, "{:?}", stats.rejects);
    assert_eq!(r("auth_bad"), 4 * burst);
    assert_eq!(r("new_agent_rate"), 0, "forgeries spent no budget");
    assert_eq!(r("replay"), 2);
    assert_eq!(r("duplicate") + r("seq_jump") + r("stale"), 0);
    assert_eq!(stats.agents_seen, burst);
    let a = stats
        .agents
        .iter()
        .find(|a| a.agent_id == "00000000000000aa");
    let a = a.expect("the real agent is listed");
    assert_eq!(
        (a.datagrams, a.events, a.datagram_gaps, a.seq_jumps),
        (2, 2, 0, 0)
    );
}
