//! Replays beyond one sink process and one agent-table entry, driving the
//! real sink on 127.0.0.1:0 with a key: datagrams recorded from a keyed
//! agent and sent again to a new sink on the same output directory, or to
//! the same sink after the agent's entry expired, are refused and counted;
//! the live agent's own datagrams, also those it sent before it heard
//! from the new sink, are taken (docs/security.md).

mod common;

use std::time::Duration;

use common::*;
use tracer_auth::SharedKey;
use tracer_codec::TxEvent;
use tracer_sink::{SinkConfig, SinkKeys};

fn key() -> SharedKey {
    SharedKey::from_bytes(&[0x5a; 32]).unwrap()
}

fn ev(i: u64) -> TxEvent {
    tx_event(BASE_NS + i * 1000, i, 1)
}

fn keyed(c: SinkConfig) -> SinkConfig {
    SinkConfig {
        keys: Some(SinkKeys::from_shared(&key())),
        reorder_window: Duration::from_millis(20),
        ..c
    }
}

/// A keyed agent that has bound to the sink at `addr` and sent `n`
/// datagrams of one event each (cookies `first..first + n`): the agent,
/// its socket and every datagram's bytes, as a recorder on the path saw
/// them.
fn bound_agent(
    addr: std::net::SocketAddr,
    first: u64,
    n: u64,
) -> (SimAgent, std::net::UdpSocket, Vec<Vec<u8>>) {
    let sock = sender();
    let mut a = SimAgent::new(0x5eed, "recorded").with_key(&key());
    let mut recorded = Vec::new();
    for i in 0..n {
        let d = a.datagram(&[ev(first + i)]);
        sock.send_to(&d, addr).unwrap();
        recorded.push(d);
        if i == 0 {
            a.bind(&sock);
        }
    }
    (a, sock, recorded)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_into_a_restarted_sink_are_refused_and_the_live_agent_is_taken() {
    let a_sink = TestSink::start(keyed).await;
    let (mut agent, sock, recorded) = bound_agent(a_sink.addr, 0, 20);
    let (a_stats, dir) = a_sink.stop().await;
    assert_eq!(a_stats.events_accepted, 20, "{:?}", a_stats.rejects);
    // The sink restarts on the same output directory (another port here).
    std::thread::sleep(Duration::from_millis(200));
    let b_sink = TestSink::start_in(dir, keyed).await;
    let replayer = sender();
    for d in &recorded {
        replayer.send_to(d, b_sink.addr).unwrap();
    }
    // The live agent goes on, still bound to the sink before: its
    // datagrams are held until it binds to the new one, then taken.
    for i in 100..105 {
        sock.send_to(&agent.datagram(&[ev(i)]), b_sink.addr)
            .unwrap();
    }
    agent.bind(&sock);
    for i in 105..110 {
        sock.send_to(&agent.datagram(&[ev(i)]), b_sink.addr)
            .unwrap();
    }
    let (b, dir) = b_sink.stop().await;
    println!("restarted sink: rejects {:?}", b.rejects);
    assert_eq!(b.rejects["stale"], 20, "every replay refused");
    assert_eq!(b.datagrams_held, 0);
    assert_eq!(b.datagrams_accepted, 10);
    let cookies = written_cookies(&dir.path().join("out"));
    let (before, after): (Vec<u64>, Vec<u64>) = cookies.iter().partition(|&&c| c < 100);
    assert_eq!(before, (0..20).collect::<Vec<_>>(), "the first sink's file");
    assert_eq!(
        after,
        (100..110).collect::<Vec<_>>(),
        "no replay in the new file"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_of_a_finished_agent_into_a_new_sink_are_never_taken() {
    let a_sink = TestSink::start(keyed).await;
    let (_agent, _sock, recorded) = bound_agent(a_sink.addr, 0, 12);
    let (_, dir) = a_sink.stop().await;
    std::thread::sleep(Duration::from_millis(200));
    let b_sink = TestSink::start_in(dir, keyed).await;
    let replayer = sender();
    for d in &recorded {
        replayer.send_to(d, b_sink.addr).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    let (b, dir) = b_sink.stop().await;
    // Nothing binds (the agent is gone): held, then refused at the latest
    // when the sink stops (after the hold timeout while it runs).
    assert_eq!(b.rejects["unconfirmed"], 12, "{:?}", b.rejects);
    assert_eq!((b.datagrams_accepted, b.datagrams_held), (0, 0));
    assert_eq!(b.agents_seen, 0, "no interface for a replayed agent");
    assert_eq!(
        written_cookies(&dir.path().join("out")),
        (0..12).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_after_the_agents_entry_expired_are_refused() {
    let sink = TestSink::start(|c| SinkConfig {
        agent_idle_timeout: Some(Duration::from_secs(1)),
        ..keyed(c)
    })
    .await;
    let (mut agent, sock, recorded) = bound_agent(sink.addr, 0, 10);
    // Quiet for longer than the idle timeout: the entry expires.
    std::thread::sleep(Duration::from_millis(2_500));
    let replayer = sender();
    for d in &recorded {
        replayer.send_to(d, sink.addr).unwrap();
    }
    // The agent itself comes back and is taken.
    for i in 10..15 {
        sock.send_to(&agent.datagram(&[ev(i)]), sink.addr).unwrap();
    }
    let (s, dir) = sink.stop().await;
    println!("rejects {:?}", s.rejects);
    assert_eq!(s.rejects["replay"], 10, "{:?}", s.rejects);
    assert_eq!(s.datagrams_accepted, 15);
    assert_eq!(s.agents_seen, 2, "the agent again after it expired");
    assert_eq!(
        written_cookies(&dir.path().join("out")),
        (0..15).collect::<Vec<_>>()
    );
}
