//! Forged sequence numbers: a sender that copies a live agent's
//! agent_id/boot_id (both visible on the wire) and claims a sequence far
//! ahead must neither inflate the agent's loss counters (stats and the
//! file's `isb_ifdrop`), nor freeze its clock state or hostname, nor make
//! the agent's later real datagrams `stale`.

mod common;

use common::*;
use tracer_codec::TxEvent;

/// 2^62: the forged sequence and first event sequence of the report.
const FAR: u64 = 1 << 62;

fn events(a: &SimAgent, n: u64, t0: u64) -> Vec<TxEvent> {
    (0..n)
        .map(|k| tx_event(t0 + (a.event_seq % 1_000_000 + k) * 1000, k, 1))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_far_sequence_neither_inflates_loss_nor_blacks_out_the_agent() {
    let sink = TestSink::start(|c| c).await;
    let tx = sender();
    let attacker = sender();
    let mut victim = SimAgent::new(0xC0FFEE, "victim");
    victim.clock_state = 2;

    // The victim runs normally for a while.
    let mut real_events = 0u64;
    for _ in 0..10 {
        let evs = events(&victim, 3, BASE_NS);
        real_events += evs.len() as u64;
        tx.send_to(&victim.datagram(&evs), sink.addr).unwrap();
    }

    // One forged datagram at seq = first_event_seq = 2^62, claiming a huge
    // agent-side loss, another host name and clock state...
    let mut forger = SimAgent::new(victim.agent_id, "forged\u{7}name");
    forger.boot_id = victim.boot_id;
    forger.seq = FAR;
    forger.event_seq = FAR;
    forger.lost_events = FAR;
    forger.clock_state = 0;
    let evs = events(&forger, 2, BASE_NS + 500);
    attacker.send_to(&forger.datagram(&evs), sink.addr).unwrap();
    // ... and a few thousand more at 2^62 + 2k.
    for k in 1..5000u64 {
        forger.seq = FAR + 2 * k;
        forger.event_seq = FAR + 2 * k;
        let evs = events(&forger, 1, BASE_NS + 700);
        attacker.send_to(&forger.datagram(&evs), sink.addr).unwrap();
        if k % 500 == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }

    // The victim goes on, now with a locked clock.
    victim.clock_state = 3;
    for _ in 0..10 {
        let evs = events(&victim, 3, BASE_NS);
        real_events += evs.len() as u64;
        tx.send_to(&victim.datagram(&evs), sink.addr).unwrap();
    }

    let (stats, dir) = sink.stop().await;
    assert_eq!(stats.agents.len(), 1, "{stats:#?}");
    let a = &stats.agents[0];
    assert_eq!(a.host, "victim");
    assert_eq!(a.clock_state, "LOCKED_STABLE", "clock state frozen: {a:?}");
    assert_eq!(
        (a.datagram_gaps, a.event_gaps, a.agent_lost),
        (0, 0, 0),
        "forgery inflated the loss counters: {a:?}"
    );
    assert_eq!(a.stale, 0, "real datagrams rejected as stale: {a:?}");
    assert_eq!(a.duplicates, 0, "{a:?}");
    assert_eq!(a.datagrams, 20);
    assert_eq!(a.events, real_events);
    assert_eq!(a.seq_jumps, 5000, "every forged datagram counted: {a:?}");
    assert_eq!(stats.rejects["seq_jump"], 5000);
    assert_eq!(stats.events_written, real_events);

    let f = files(&dir.path().join("out"));
    let s = &read_file(&f[0])[0];
    assert_eq!(s.epbs.len() as u64, real_events);
    assert_eq!(s.isbs.len(), 1);
    let (recv, drop, comment) = isb_counts(&s.isbs[0]);
    assert_eq!(recv, Some(real_events));
    assert_eq!(drop, Some(0), "isb_ifdrop inflated: {comment:?}");
    assert!(
        comment.unwrap_or_default().contains("seq_jumps=5000"),
        "the ISB comment counts the suspect datagrams"
    );
}

/// Forged datagrams that claim only a modest jump (within the bound) but
/// an implausible event sequence or agent-side loss are suspect too: the
/// events a datagram skips must fit in the datagrams it skips, and the
/// agent's cumulative loss cannot jump by more than a bounded step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn implausible_event_or_loss_jumps_are_not_trusted() {
    let sink = TestSink::start(|c| c).await;
    let tx = sender();
    let mut victim = SimAgent::new(0xD00D, "victim2");
    for _ in 0..5 {
        let evs = events(&victim, 2, BASE_NS);
        tx.send_to(&victim.datagram(&evs), sink.addr).unwrap();
    }
    // Next datagram number, but an event sequence 2^62 ahead.
    let mut f = SimAgent::new(victim.agent_id, "victim2");
    f.boot_id = victim.boot_id;
    f.seq = victim.seq + 1;
    f.event_seq = FAR;
    tx.send_to(&f.datagram(&events(&f, 1, BASE_NS)), sink.addr)
        .unwrap();
    // Next datagram number and event sequence, but 2^62 events lost.
    let mut g = SimAgent::new(victim.agent_id, "victim2");
    g.boot_id = victim.boot_id;
    g.seq = victim.seq + 2;
    g.event_seq = victim.event_seq + 1;
    g.lost_events = FAR;
    tx.send_to(&g.datagram(&events(&g, 1, BASE_NS)), sink.addr)
        .unwrap();
    let (stats, _dir) = sink.stop().await;
    let a = &stats.agents[0];
    // The first is rejected whole; the second is a plausible gap of two
    // datagrams and one event, its loss claim cut to one step.
    assert_eq!((a.seq_jumps, a.datagrams), (1, 6), "{a:?}");
    assert_eq!((a.datagram_gaps, a.event_gaps), (2, 1), "{a:?}");
    assert_eq!(a.agent_lost, tracer_sink::seq::MAX_LOST_STEP, "{a:?}");
    assert_eq!(a.lost_clamped, 1, "{a:?}");
}

/// Random sequence numbers inside a gap (the largest one the bounds let
/// open) do not grow the sink's gap tracking past its bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_in_gap_datagrams_keep_gap_memory_bounded() {
    use tracer_sink::seq::{MAX_GAP_RANGES, MAX_SEQ_JUMP};
    let sink = TestSink::start(|c| c).await;
    let tx = sender();
    let mut victim = SimAgent::new(0xFEED, "victim3");
    tx.send_to(&victim.datagram(&events(&victim, 1, BASE_NS)), sink.addr)
        .unwrap();
    let mut f = SimAgent::new(victim.agent_id, "victim3");
    f.boot_id = victim.boot_id;
    f.seq = MAX_SEQ_JUMP;
    f.event_seq = MAX_SEQ_JUMP;
    tx.send_to(&f.datagram(&events(&f, 1, BASE_NS)), sink.addr)
        .unwrap();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in 0..50_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        f.seq = 1 + x % (MAX_SEQ_JUMP - 2);
        f.event_seq = f.seq;
        tx.send_to(&f.datagram(&[]), sink.addr).unwrap();
        if i % 1000 == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }
    let (stats, _dir) = sink.stop().await;
    let a = &stats.agents[0];
    assert!(a.gap_ranges <= MAX_GAP_RANGES as u64, "{a:?}");
    assert!(a.uncertain_fills > 0, "{a:?}");
    assert_eq!(a.stale, 0);
}
