//! A sender that invents agent ids must not lock real agents out: new
//! agents are admitted at a limited rate per source address, idle agents
//! expire (their interface stays in the file written so far), the stats
//! list only the busiest agents and add the others up, and the file does
//! not get an interface per invented id.

mod common;

use std::time::Duration;

use common::*;
use tracer_codec::TxEvent;

fn one_event(a: &mut SimAgent, t: u64) -> Vec<u8> {
    a.datagram(&[tx_event(BASE_NS + t, t, 1)])
}

/// 65,536 one-event datagrams with random agent ids from one source
/// address; a real agent on another socket starts in the middle of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_agent_gets_in_during_an_agent_id_spray() {
    let sink = TestSink::start(|c| c).await;
    let spray = sender();
    let real_tx = sender();
    let mut real = SimAgent::new(0x5EA1_0000_0000_0001, "real-host");
    let mut real_events = 0u64;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..65_536u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut fake = SimAgent::new(x, "sprayed");
        spray.send_to(&one_event(&mut fake, i), sink.addr).unwrap();
        if i >= 30_000 && i % 1000 == 0 {
            // The real agent starts after the spray has filled what it can.
            let evs: Vec<TxEvent> = (0..5)
                .map(|k| tx_event(BASE_NS + 1_000_000 + i * 10 + k, k, 2))
                .collect();
            real_events += evs.len() as u64;
            real_tx.send_to(&real.datagram(&evs), sink.addr).unwrap();
        }
        if i % 2000 == 0 {
            // Let the receiver keep up: a kernel drop is not what is tested.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let (stats, dir) = sink.stop().await;
    let r = stats
        .agents
        .iter()
        .find(|a| a.host == "real-host")
        .unwrap_or_else(|| panic!("the real agent is not listed: {:?}", stats.agents));
    assert_eq!(r.events, real_events);
    assert_eq!((r.datagram_gaps, r.event_gaps), (0, 0));
    // The spray added a handful of agents, not 65,536.
    let admitted = tracer_sink::limits::SOURCE_BURST as u64;
    assert_eq!(stats.agents_seen, admitted + 1, "{stats:?}");
    assert_eq!(stats.rejects["new_agent_rate"], 65_536 - admitted);
    assert!(stats.agents.len() <= tracer_sink::SinkConfig::DEFAULT_STATS_MAX_AGENTS);
    let f = files(&dir.path().join("out"));
    let s = &read_file(&f[0])[0];
    assert_eq!(s.idbs.len() as u64, admitted + 1);
    let written_real = s
        .epbs
        .iter()
        .filter(|e| iface_agent(s, e.interface_id) == format!("{:016x}", real.agent_id))
        .count() as u64;
    assert_eq!(written_real, real_events);
}

/// Beyond the configured number of listed agents, the stats (JSON and the
/// human table) add the others up instead of listing them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_list_the_busiest_agents_and_add_up_the_rest() {
    let sink = TestSink::start(|c| tracer_sink::SinkConfig {
        stats_max_agents: 3,
        ..c
    })
    .await;
    // Eight agents from eight sockets (one source each), agent k sending
    // k + 1 datagrams.
    let mut sent = 0u64;
    for k in 0..8u64 {
        let tx = sender();
        let mut a = SimAgent::new(0x100 + k, &format!("host{k}"));
        for d in 0..=k {
            tx.send_to(&one_event(&mut a, k * 100 + d), sink.addr)
                .unwrap();
            sent += 1;
        }
    }
    let (stats, _dir) = sink.stop().await;
    let hosts: Vec<&str> = stats.agents.iter().map(|a| a.host.as_str()).collect();
    assert_eq!(
        hosts,
        ["host5", "host6", "host7"],
        "busiest, in order of appearance"
    );
    assert_eq!(stats.agents_live, 8);
    assert_eq!(stats.agents_not_listed.agents, 5);
    assert_eq!(stats.agents_not_listed.events, 1 + 2 + 3 + 4 + 5);
    let listed: u64 = stats.agents.iter().map(|a| a.events).sum();
    assert_eq!(listed + stats.agents_not_listed.events, sent);
    let table = stats.to_table();
    assert!(table.contains("... 5 more live agents"), "{table}");
    assert!(!table.contains("host0"), "{table}");
    let json = serde_json::to_string(&stats).unwrap();
    assert!(
        json.contains("\"agents_not_listed\":{\"agents\":5"),
        "{json}"
    );
}

/// An agent that goes quiet expires: its interface and its statistics
/// stay in the file it was written to, the next file does not list it,
/// and when it comes back it is a new agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_agents_expire_and_keep_their_interface_in_the_file() {
    let sink = TestSink::start(|c| tracer_sink::SinkConfig {
        agent_idle_timeout: Some(Duration::from_millis(1500)),
        rotate_interval: Some(Duration::from_millis(4000)),
        reorder_window: Duration::from_millis(20),
        ..c
    })
    .await;
    let tx = sender();
    let mut quiet = SimAgent::new(0xA1, "quiet");
    let mut busy = SimAgent::new(0xB1, "busy");
    tx.send_to(&one_event(&mut quiet, 1), sink.addr).unwrap();
    let now = tracer_sink::SinkClock::System.now_ns();
    for step in 0..60u64 {
        tx.send_to(
            &busy.datagram(&[tx_event(now + step * 100_000_000, step, 1)]),
            sink.addr,
        )
        .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Back after expiring: a new agent.
    tx.send_to(&one_event(&mut quiet, 2), sink.addr).unwrap();
    let (stats, dir) = sink.stop().await;
    assert_eq!(stats.agents_expired.agents, 1, "{stats:?}");
    assert_eq!(stats.agents_expired.events, 1);
    assert_eq!(stats.agents_seen, 3);
    assert_eq!(stats.agents_live, 2);
    let f = files(&dir.path().join("out"));
    assert!(f.len() >= 2, "{f:?}");
    let first = &read_file(&f[0])[0];
    let names: Vec<String> = first.idbs.iter().map(idb_name).collect();
    assert_eq!(names, ["quiet", "busy"]);
    assert_eq!(first.isbs.len(), 2, "the expired agent keeps its ISB");
    // The next file lists the busy agent, and the quiet one only as the
    // new agent it became when it came back.
    let second = &read_file(&f[1])[0];
    let names: Vec<String> = second.idbs.iter().map(idb_name).collect();
    assert_eq!(names, ["busy", "quiet"]);
    assert_eq!(second.isbs.len(), 2);
}

/// When a limit bites it is logged at warn level once per interval with
/// the counts, not once per datagram (and not at debug level only).
#[test]
fn limits_are_logged_once_per_interval_with_counts() {
    let dir = tempfile::tempdir().unwrap();
    let sink = SinkBin::start(
        &dir.path().join("out"),
        &["--stats-interval", "0"],
        std::process::Stdio::null(),
    );
    let tx = sender();
    for id in 0..2000u64 {
        let mut fake = SimAgent::new(0xF00_0000 + id, "sprayed");
        tx.send_to(&one_event(&mut fake, id), ("127.0.0.1", sink.port))
            .unwrap();
        if id % 500 == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let (status, log, _) = sink.stop();
    assert!(status.success(), "{log}");
    let warns: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("new_agent_rate="))
        .collect();
    let refused = 2000 - tracer_sink::limits::SOURCE_BURST as u64;
    assert_eq!(
        warns.len(),
        2,
        "first hit, then the sum at shutdown:\n{log}"
    );
    assert!(warns[0].contains("new_agent_rate=1"), "{}", warns[0]);
    assert!(
        warns[1].contains(&format!("new_agent_rate={}", refused - 1)),
        "{}",
        warns[1]
    );
}
