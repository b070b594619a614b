//! Loss accounting across a sink restart, with authenticated datagrams
//! (issue 10, defect 5: events sent while the sink was down were in no file
//! and in no counter, and the agent called them "sent").
//!
//! A real agent (BPF, namespace a) traces a TCP flow and sends to a sink in
//! namespace b, both with one key file. Mid-run the sink is killed with
//! SIGKILL; a new sink starts on the same port writing a new directory; the
//! agent is stopped, then the second sink. Then every event the agent
//! numbered is accounted for exactly:
//! - the second sink's file says how many of the agent's events precede
//!   its first one (`preceding_events` in its interface statistics), so
//!   `preceding + events in file B + isb_ifdrop` is everything the agent
//!   numbered plus its own losses;
//! - what the agent reports delivered is what the two files hold;
//! - what it reports unconfirmed is exactly what no file holds.
//!
//! The agent's clock follows the sink through the keyed clock exchange.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tracer_e2e::netns::{in_netns, NetnsPair};
use tracer_e2e::pcap::{read_dir, read_dir_of_killed_sink};
use tracer_e2e::scenario::{spawn_agent, spawn_sink, stop_json};
use tracer_e2e::skip::require_root;

/// A TCP flow from a to b until `stop` is set; returns the bytes read.
fn flow_until(
    pair: &NetnsPair,
    port: u16,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    let addr = SocketAddr::from((pair.addr_b, port));
    let server = in_netns(NetnsPair::path(&pair.b), "rs-server", move || {
        TcpListener::bind(addr).unwrap()
    })
    .unwrap()
    .join()
    .unwrap();
    let reader = std::thread::spawn(move || {
        let (mut s, _) = server.accept().unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0;
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            total += n;
        }
        total
    });
    let _ = in_netns(NetnsPair::path(&pair.a), "rs-sender", move || {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_nodelay(true).unwrap();
        let data = vec![0x5au8; 3000];
        while !stop.load(Ordering::Relaxed) {
            c.write_all(&data).unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
    })
    .unwrap();
    reader
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// `name=N` from an ISB comment.
fn comment_field(comment: &str, name: &str) -> u64 {
    comment
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {comment:?}"))
}

#[test]
fn every_event_is_accounted_for_across_a_sink_restart() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrrs", 245).expect("creating namespaces");
    let dir = tempfile::tempdir().unwrap();
    let key = tracer_e2e::scenario::key_file(dir.path());
    let key_arg = key.as_str();
    let (out_a, out_b) = (dir.path().join("a"), dir.path().join("b"));
    let sink_args = ["--key-file", key_arg, "--stats-interval", "0"];

    let mut sink_a = spawn_sink(&pair, &out_a, &sink_args);
    let mut agent = spawn_agent(
        &pair,
        &[
            "--key-file",
            key_arg,
            "--agent-id",
            "0x5eed",
            "--flush-ms",
            "20",
        ],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let reader = flow_until(&pair, 5301, Arc::clone(&stop));
    std::thread::sleep(Duration::from_secs(2));
    // SIGKILL: no drain, no statistics block, the file cut where it was.
    let (st, _) = sink_a.stop(libc::SIGKILL, Duration::from_secs(10));
    assert!(!st.success());
    // The agent sends into the void for a while.
    std::thread::sleep(Duration::from_millis(1500));
    let mut sink_b = spawn_sink(&pair, &out_b, &sink_args);
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
    std::thread::sleep(Duration::from_millis(200));
    let agent_final = stop_json(&mut agent, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(200));
    let sink_final = stop_json(&mut sink_b, libc::SIGTERM);

    let s = &agent_final["stats"];
    let sequenced = u(&s["events_sequenced"]);
    let delivered = u(&s["events_delivered"]);
    let sink_lost = u(&s["events_sink_lost"]);
    let unconfirmed = u(&s["events_unconfirmed"]);
    let agent_lost = u(&s["ring_overruns"]) + u(&s["bpf"]["ringbuf_lost"]) + u(&s["bad_records"]);
    assert_eq!(sequenced, delivered + sink_lost + unconfirmed, "{s}");
    assert_eq!(u(&s["acks_rejected"]), 0, "{s}");
    let sinks = s["sinks"].as_array().expect("per-sink acknowledgements");
    assert_eq!(sinks.len(), 2, "both sinks acknowledged: {s}");

    let (file_a, _cut) = read_dir_of_killed_sink(&out_a);
    let file_b = read_dir(&out_b);
    let events_a = file_a.frames.len() as u64;
    let events_b = file_b.frames.len() as u64;
    assert!(events_a > 0 && events_b > 0, "{events_a} / {events_b}");
    assert!(
        file_a.stats.is_empty(),
        "a killed sink writes no statistics"
    );
    for f in file_a.frames.iter().chain(&file_b.frames) {
        assert_eq!(f.agent_id, 0x5eed);
    }
    // The second file's statistics of the agent.
    assert_eq!(file_b.stats.len(), 1);
    let isb = &file_b.stats[0];
    let comment = isb.comment.clone().expect("ISB comment");
    let preceding = comment_field(&comment, "preceding_events");
    let gaps_b = comment_field(&comment, "event_gaps");
    let ifdrop_b = isb.drop.expect("isb_ifdrop");
    assert_eq!(ifdrop_b, gaps_b + comment_field(&comment, "agent_lost"));
    assert_eq!(comment_field(&comment, "agent_lost"), agent_lost);
    assert_eq!(
        sink_final["agents"][0]["preceding_events"].as_u64(),
        Some(preceding)
    );
    // Sink B began mid-stream, after everything sink A wrote.
    let first_b = file_b.frames.iter().map(|f| f.event_seq).min().unwrap();
    let last_a = file_a.frames.iter().map(|f| f.event_seq).max().unwrap();
    assert!(
        last_a < preceding && preceding <= first_b,
        "{last_a} {preceding} {first_b}"
    );

    // What no file holds: events between the two files and gaps sink B
    // counted. The hole is the agent's unconfirmed events.
    let in_no_file = sequenced - events_a - events_b;
    eprintln!(
        "sequenced {sequenced}, file A {events_a}, file B {events_b}, preceding(B) {preceding}, \
         gaps(B) {gaps_b}, agent lost {agent_lost}; agent: delivered {delivered}, sink lost \
         {sink_lost}, unconfirmed {unconfirmed}"
    );
    // agent total = events in both files + lost counted in the files
    // (ifdrop, and the preceding count less what file A holds) + its own losses.
    assert_eq!(
        sequenced + agent_lost,
        events_a + events_b + ifdrop_b + (preceding - events_a)
    );
    assert_eq!(
        sequenced,
        preceding + events_b + gaps_b,
        "file B accounts for everything"
    );
    assert_eq!(
        delivered,
        events_a + events_b,
        "delivered is what the files hold"
    );
    assert_eq!(sink_lost, gaps_b, "sink-counted losses");
    assert_eq!(
        unconfirmed,
        in_no_file - gaps_b,
        "unconfirmed is what no file holds"
    );
    assert_eq!(unconfirmed, preceding - events_a);
    assert!(unconfirmed > 0, "the agent sent while no sink listened");
    assert!(
        u(&s["sink_unreachable"]) > 0,
        "ICMP port unreachable seen while the sink was down: {s}"
    );
    // Per sink: the first one's acknowledged deliveries are file A.
    assert_eq!(u(&sinks[0]["delivered"]), events_a);
    assert_eq!(u(&sinks[1]["delivered"]), events_b);
    assert_eq!(u(&sinks[1]["preceding"]), preceding);
    assert_eq!(sink_final["rejects"]["auth_bad"], 0);
    assert_eq!(sink_final["rejects"]["auth_missing"], 0);
}
