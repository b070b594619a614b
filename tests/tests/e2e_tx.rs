//! End to end with the real kernel: a TCP flow between two network
//! namespaces over veth, tracer-agent in the sender's namespace, tracer-sink
//! in the receiver's; the pcapng must hold the flow's SENDMSG, SCHED,
//! SND_SW and ACK events, in order per skb, on the wall-clock axis, and
//! nothing from another namespace.

use std::collections::BTreeMap;

use tracer_codec::{Event, TxEvent, TxStage};
use tracer_e2e::netns::NetnsPair;
use tracer_e2e::scenario::{noise_flow, tai_now_ns, tcp_flow, traced_run};
use tracer_e2e::skip::require_root;

#[test]
fn tx_events_of_a_tcp_flow_between_namespaces() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntre2e", 231).expect("creating namespaces");
    // A second agent tracing this (root) namespace turns TX timestamping on
    // for the noise flows' sockets: ours must still report none of them.
    let mut other = {
        let mut c = std::process::Command::new(tracer_e2e::bins::bin("tracer-agent"));
        c.args(["--sink", "127.0.0.1:9", "--hostname", "rootns", "--json"]);
        let mut p = tracer_e2e::procs::Proc::spawn("root-ns agent", c);
        p.wait_stderr("tx probe attached", std::time::Duration::from_secs(30));
        p
    };
    let (o, (t0, t1, local, peer, noise_port, noise_port2)) = traced_run(&pair, &[], || {
        let t0 = tai_now_ns();
        let noise_port = noise_flow();
        let (local, peer) = tcp_flow(&pair, 5201, 200, 3000);
        let noise_port2 = noise_flow();
        (t0, tai_now_ns(), local, peer, noise_port, noise_port2)
    });
    let other_final = tracer_e2e::scenario::stop_json(&mut other, libc::SIGINT);
    assert!(
        other_final["stats"]["events_by_stage"][0].as_u64() > Some(0),
        "the root-namespace agent saw the noise flows: {other_final}"
    );
    assert_eq!(o.agent_final["stats"]["bpf"]["ringbuf_lost"], 0);
    assert_eq!(o.agent_final["stats"]["ring_overruns"], 0);
    let (trace, netns_a) = (&o.trace, o.netns_a);
    assert_eq!(
        o.sink_final["events_written"].as_u64(),
        o.agent_final["stats"]["events_by_stage"]
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_u64()).sum::<u64>()
                + o.agent_final["stats"]["clock_events"].as_u64().unwrap_or(0)),
        "every event the agent read is in the file"
    );

    let mut by_skb: BTreeMap<(u64, u32), BTreeMap<TxStage, TxEvent>> = BTreeMap::new();
    let mut flow_events = 0;
    let mut sw_holding_tskey = 0;
    for f in &trace.frames {
        let e = match &f.event {
            Event::Tx(e) => e,
            Event::Clock(c) => {
                assert_eq!(
                    f.ts_ns, c.global_ns,
                    "clock events are stamped with global time"
                );
                continue;
            }
            other => panic!("unexpected event {other:?}"),
        };
        assert_eq!(f.iface, "sender");
        assert_eq!(f.host, "sender");
        assert_eq!(f.ts_ns, e.global_ns, "EPB timestamp is the global stamp");
        assert_eq!(e.netns, netns_a, "event from another namespace: {e:?}");
        let flow = e.flow();
        assert!(
            flow.sport != noise_port && flow.dport != noise_port,
            "root-namespace flow leaked in: {e:?}"
        );
        assert!(flow.sport != noise_port2 && flow.dport != noise_port2);
        assert!(
            e.global_ns + 1_000_000_000 >= t0 && e.global_ns <= t1 + 1_000_000_000,
            "global stamp {} not within 1 s of wall time [{t0}, {t1}]",
            e.global_ns
        );
        if flow.saddr == local.ip()
            && flow.sport == local.port()
            && flow.daddr == peer.ip()
            && flow.dport == peer.port()
        {
            flow_events += 1;
            let stage = e.stage().expect("known stage");
            // Every callback records the bytes its skb holds then (the
            // SCHED/SND_SW ones from the TCP header of the clone IP got).
            let (seq, end) = e.range().unwrap_or_else(|| panic!("no range: {e:?}"));
            let len = end.wrapping_sub(seq);
            assert!(len > 0 && len < 1 << 20, "range {seq}..{end}: {e:?}");
            if stage == TxStage::SndSw && end.wrapping_sub(e.tskey).wrapping_sub(1) < 1 << 20 {
                sw_holding_tskey += 1;
            }
            if stage == TxStage::Sendmsg {
                assert_eq!(
                    e.pid,
                    std::process::id(),
                    "SENDMSG pid is the sender's tgid"
                );
                assert_eq!(e.comm_str(), "e2e-sender");
                assert!(e.tid != 0);
                // tskey is the sequence number of the skb's last byte.
                assert_eq!(
                    e.tskey,
                    end.wrapping_sub(1),
                    "tskey is the last byte: {e:?}"
                );
            }
            by_skb
                .entry((e.cookie, e.tskey))
                .or_default()
                .insert(stage, *e);
        }
    }
    assert!(flow_events > 0, "no event of the flow {local} -> {peer}");
    assert!(
        sw_holding_tskey > 0,
        "no SND_SW whose range reaches its tskey"
    );
    let count = |s: TxStage| by_skb.values().filter(|m| m.contains_key(&s)).count();
    for s in [
        TxStage::Sendmsg,
        TxStage::Sched,
        TxStage::SndSw,
        TxStage::Ack,
    ] {
        assert!(
            count(s) > 0,
            "no {} event; skbs: {}",
            s.name(),
            by_skb.len()
        );
    }
    let mut complete = 0;
    for ((cookie, tskey), stages) in &by_skb {
        let order: Vec<(TxStage, u64, u64)> = stages
            .iter()
            .map(|(s, e)| (*s, e.mono_ns, e.global_ns))
            .collect();
        for w in order.windows(2) {
            assert!(
                w[0].1 <= w[1].1 && w[0].2 <= w[1].2,
                "skb ({cookie}, {tskey}) stages out of order: {order:?}"
            );
        }
        if [
            TxStage::Sendmsg,
            TxStage::Sched,
            TxStage::SndSw,
            TxStage::Ack,
        ]
        .iter()
        .all(|s| stages.contains_key(s))
        {
            complete += 1;
        }
    }
    assert!(complete > 0, "no skb with all four stages");
    // tcp_tx_timestamp() tags the retransmit queue's tail when the write
    // went out inside the call: such a tag (SENT) is never sent under it
    // on a loss-free flow, only acknowledged; and a tag that is
    // acknowledged but never sent is always one of them (a superseded
    // tag gets no callback at all: its skb reports the newer tskey).
    let mut sent_tags = 0;
    for ((cookie, tskey), stages) in &by_skb {
        let Some(sendmsg) = stages.get(&TxStage::Sendmsg) else {
            continue;
        };
        let transmitted =
            stages.contains_key(&TxStage::Sched) || stages.contains_key(&TxStage::SndSw);
        if sendmsg.tagged_sent() {
            sent_tags += 1;
            assert!(
                !transmitted,
                "tag ({cookie}, {tskey}) on an skb already sent was sent again: {stages:?}"
            );
        } else if stages.contains_key(&TxStage::Ack) {
            assert!(
                transmitted,
                "tag ({cookie}, {tskey}) acknowledged, never sent, not flagged: {stages:?}"
            );
        }
    }
    eprintln!("{} tags, {sent_tags} on skbs already sent", by_skb.len());
    // Every packet id is the per-agent event sequence number.
    for f in &trace.frames {
        assert_eq!(f.packet_id, Some(f.event_seq));
    }
}

/// The pid of the tracer-agent whose network namespace is `netns` (a
/// /run/netns path): one per test namespace, so parallel tests do not mix.
fn agent_in(netns: &std::path::Path) -> libc::pid_t {
    let want = std::fs::read_link(netns)
        .ok()
        .or_else(|| {
            use std::os::unix::fs::MetadataExt;
            let ino = std::fs::metadata(netns).ok()?.ino();
            Some(format!("net:[{ino}]").into())
        })
        .expect("the namespace file");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .find(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            comm.trim() == "tracer-agent"
                && std::fs::read_link(format!("/proc/{pid}/ns/net")).ok() == Some(want.clone())
        })
        .expect("the agent of this namespace")
}

#[test]
fn ring_buffer_overflow_is_counted_and_reaches_the_file() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrlos", 232).expect("creating namespaces");
    // 64 slots per CPU, and an agent that cannot read them while the flow
    // runs (stopped: its doorbell would otherwise wake it every 16
    // records): the flow's ~1,600 records must lap the ring.
    let (o, _) = traced_run(&pair, &["--ring-slots", "64", "--poll-ms", "1000"], || {
        let agent = agent_in(&NetnsPair::path(&pair.a));
        // SAFETY: kill(2) with a pid read just now from /proc.
        assert_eq!(unsafe { libc::kill(agent, libc::SIGSTOP) }, 0);
        let flow = tcp_flow(&pair, 5202, 400, 100);
        // SAFETY: as above.
        assert_eq!(unsafe { libc::kill(agent, libc::SIGCONT) }, 0);
        flow
    });
    let stats = &o.agent_final["stats"];
    let lost =
        stats["ring_overruns"].as_u64().unwrap() + stats["bpf"]["ringbuf_lost"].as_u64().unwrap();
    assert!(lost > 0, "no loss counted: {}", o.agent_final);
    let agent = &o.sink_final["agents"][0];
    assert_eq!(
        agent["agent_lost"].as_u64(),
        Some(lost),
        "sink stats: {}",
        o.sink_final
    );
    let isb_drop: u64 = o
        .trace
        .stats
        .iter()
        .filter(|s| s.iface == "sender")
        .filter_map(|s| s.drop)
        .max()
        .expect("an interface statistics block for the agent");
    assert!(
        isb_drop >= lost,
        "ISB ifdrop {isb_drop} < agent loss {lost}"
    );
    assert!(
        !o.trace.frames.is_empty(),
        "what fit in the ring still arrives"
    );
}

/// A burst many times a ring's size between two timer drains loses
/// nothing: every quarter ring the probe rings its doorbell and the agent
/// drains at once (without it, 1,024 slots per CPU read every 10 s lap).
#[test]
fn a_burst_wakes_the_agent_before_its_ring_laps() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrbel", 236).expect("creating namespaces");
    let (o, _) = traced_run(
        &pair,
        &["--ring-slots", "1024", "--poll-ms", "10000"],
        || tcp_flow(&pair, 5209, 2000, 100),
    );
    let stats = &o.agent_final["stats"];
    let lost =
        stats["ring_overruns"].as_u64().unwrap() + stats["bpf"]["ringbuf_lost"].as_u64().unwrap();
    let events: u64 = stats["events_by_stage"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert!(events > 4 * 1024, "a burst of only {events} events");
    assert_eq!(lost, 0, "{}", o.agent_final);
}

/// `--realtime N`: the drain loop (the main thread) runs SCHED_FIFO at N;
/// the agent still traces and loses nothing.
#[test]
fn realtime_runs_the_drain_loop_as_sched_fifo() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrrtp", 237).expect("creating namespaces");
    let (o, (policy, prio)) = traced_run(&pair, &["--realtime", "7"], || {
        let agent = agent_in(&NetnsPair::path(&pair.a));
        tcp_flow(&pair, 5210, 50, 1000);
        // /proc/PID/stat: rt_priority and policy are fields 40 and 41,
        // counted after the parenthesised name.
        let stat = std::fs::read_to_string(format!("/proc/{agent}/stat")).unwrap();
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = after.split_whitespace().collect();
        (f[41 - 3].to_string(), f[40 - 3].to_string())
    });
    assert_eq!(
        (policy.as_str(), prio.as_str()),
        ("1", "7"),
        "SCHED_FIFO (1) at 7"
    );
    let stats = &o.agent_final["stats"];
    assert!(stats["events_by_stage"][0].as_u64().unwrap() >= 50);
}

#[test]
fn a_sink_that_restarts_receives_again_and_nothing_crashes() {
    use tracer_e2e::scenario::{spawn_agent, spawn_sink, stop_json};
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrrst", 235).expect("creating namespaces");
    let (out1, out2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut sink = spawn_sink(&pair, out1.path(), &[]);
    let mut agent = spawn_agent(&pair, &[]);
    let first = tcp_flow(&pair, 5205, 100, 2000);
    std::thread::sleep(std::time::Duration::from_millis(400));
    stop_json(&mut sink, libc::SIGTERM);
    // The sink is gone: ICMP port unreachable answers the agent.
    tcp_flow(&pair, 5206, 100, 2000);
    std::thread::sleep(std::time::Duration::from_millis(400));
    let mut sink = spawn_sink(&pair, out2.path(), &[]);
    let third = tcp_flow(&pair, 5207, 100, 2000);
    std::thread::sleep(std::time::Duration::from_millis(400));
    let agent_final = stop_json(&mut agent, libc::SIGINT);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let sink_final = stop_json(&mut sink, libc::SIGTERM);

    // ICMP port unreachable, on a send or while reading acks (the agent
    // sends in batches: which call sees it depends on timing), and what
    // was sent meanwhile stays unconfirmed.
    assert!(
        agent_final["stats"]["sink_unreachable"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "the agent should see that the sink is gone: {agent_final}"
    );
    assert!(
        agent_final["stats"]["events_unconfirmed"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "events sent to the stopped sink are in no file: {agent_final}"
    );
    let has_flow = |t: &tracer_e2e::pcap::Trace,
                    (local, _): (std::net::SocketAddr, std::net::SocketAddr)| {
        t.frames
            .iter()
            .any(|f| matches!(&f.event, Event::Tx(e) if e.sport == local.port()))
    };
    let (t1, t2) = (
        tracer_e2e::pcap::read_dir(out1.path()),
        tracer_e2e::pcap::read_dir(out2.path()),
    );
    assert!(has_flow(&t1, first), "first sink lacks the first flow");
    assert!(
        has_flow(&t2, third),
        "restarted sink lacks the flow sent after its restart"
    );
    assert!(
        !has_flow(&t2, first),
        "restarted sink cannot have events sent before it started"
    );
    assert_eq!(sink_final["agents"][0]["host"], "sender");
    assert_eq!(sink_final["datagrams_rejected"], 0);
}

#[test]
fn sample_every_tags_whole_granules_about_one_in_n_and_every_tagged_skb_completes() {
    if !require_root() {
        return;
    }
    // 20 MiB in 16 KiB writes: 320 granules of 64 KiB, four write ends
    // (tskeys) in each.
    const WRITES: u64 = 1280;
    const SIZE: usize = 16 << 10;
    const N: u64 = 10;
    let pair = NetnsPair::create("ntrsmp", 233).expect("creating namespaces");
    let (o, (local, _)) = traced_run(&pair, &["--sample-every", "10"], || {
        tcp_flow(&pair, 5203, WRITES as usize, SIZE)
    });
    let bpf = &o.agent_final["stats"]["bpf"];
    assert_eq!(
        bpf["sendmsg_seen"].as_u64(),
        Some(WRITES),
        "every sendmsg of the flow is counted: {bpf}"
    );
    let mut by_skb: BTreeMap<(u64, u32), Vec<TxStage>> = BTreeMap::new();
    for f in &o.trace.frames {
        if let Event::Tx(e) = &f.event {
            assert_eq!(
                e.flow().sport,
                local.port(),
                "only the flow's events: {e:?}"
            );
            let stage = e.stage().expect("known stage");
            by_skb.entry((e.cookie, e.tskey)).or_default().push(stage);
        }
    }
    let tagged: Vec<u32> = by_skb
        .iter()
        .filter(|(_, s)| s.contains(&TxStage::Sendmsg))
        .map(|((_, tskey), _)| *tskey)
        .collect();
    let sendmsgs = tagged.len() as u64;
    // The expected count is WRITES / N; the decision is per granule (four
    // writes), so the spread is that of ~32 granules out of 320: allow
    // about three standard deviations.
    assert!(
        (WRITES / N / 2..=WRITES / N * 2).contains(&sendmsgs),
        "{sendmsgs} SENDMSG events for {WRITES} writes at 1 in {N}"
    );
    // The granule decides, not the call: a tagged granule has all four of
    // its write ends tagged (fewer only at the stream's two ends).
    let mut per_granule: BTreeMap<u32, u32> = BTreeMap::new();
    for t in &tagged {
        *per_granule.entry(t >> 16).or_default() += 1;
    }
    let full = per_granule.values().filter(|n| **n == 4).count();
    assert!(
        per_granule.values().all(|n| *n <= 4) && full + 2 >= per_granule.len(),
        "tagged write ends per 64 KiB granule: {per_granule:?}"
    );
    // Only tagged skbs have later stages, and each has all of them (a
    // retransmission would repeat SCHED and SND_SW, never SENDMSG).
    for (key, stages) in &by_skb {
        let n = |s: TxStage| stages.iter().filter(|x| **x == s).count();
        assert_eq!(n(TxStage::Sendmsg), 1, "skb {key:?}: stages {stages:?}");
        for s in [TxStage::Sched, TxStage::SndSw, TxStage::Ack] {
            assert!(n(s) >= 1, "skb {key:?}: stages {stages:?}");
        }
    }
}
