//! End to end with the real kernel: the tracer never traces itself unless
//! asked. As in scripts/demo.sh, the sink and its clock responder run on
//! host S (namespace b) and an agent on each host, C (a) and S, with
//! `--clock sink` and every probe (`tx,rx,drops,tcp`). While they trace,
//! a TCP flow runs from C to S, the standalone `clocksync` tool on C
//! exchanges with the responder, and an nftables rule on S drops one
//! agent datagram in a few (so kfree_skb sees ours too). By default the
//! trace holds no event of nettrace's UDP flows (the sink's port, the
//! responder's) and no read by a nettrace process; with `--trace-self`
//! on both agents it holds each kind of them.

use std::process::Command;
use std::time::Duration;

use tracer_codec::{Event, RxStage};
use tracer_e2e::bins::bin;
use tracer_e2e::netns::NetnsPair;
use tracer_e2e::pcap::{read_dir, Frame, Trace};
use tracer_e2e::procs::{run, Proc};
use tracer_e2e::scenario::{spawn_sink, stop_json, tcp_flow, SINK_PORT};
use tracer_e2e::skip::{require_root, skip};

/// The sink's clock responder (tracer-sink's default: its port + 1).
const CLOCK_PORT: u16 = SINK_PORT + 1;
/// The TCP flow that keeps the trace from being empty.
const TCP_PORT: u16 = 5430;
const CHUNKS: usize = 100;
const CHUNK: usize = 2000;
/// The nftables rule on S drops one lone datagram of C's agent in this many.
const DROP_ONE_IN: u32 = 4;
/// Clock updates of the `clocksync` tool on C.
const CLOCKSYNC_UPDATES: u32 = 5;

/// An agent in `ns` (host name `host`) like the demo's: every probe,
/// `--clock sink`, plus `extra`; returns once its last probe is attached.
fn spawn_agent(pair: &NetnsPair, ns: &str, host: &str, extra: &[&str]) -> Proc {
    let mut cmd = NetnsPair::exec(ns, &bin("tracer-agent"));
    cmd.args(["--sink", &format!("{}:{SINK_PORT}", pair.addr_b)])
        .args(["--probes", "tx,rx,drops,tcp", "--hostname", host, "--json"])
        .args(["--clock", "sink", "--clock-interval", "0.2"])
        .args(extra);
    let mut p = Proc::spawn(host, cmd);
    p.wait_stderr("tcp probe attached", Duration::from_secs(30));
    p
}

/// Run nft in namespace `ns` with `args`; returns its stdout.
fn nft(ns: &str, args: &[&str]) -> String {
    // `ip netns exec` for nft only: the agents need nsenter (see netns.rs).
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns, "nft"]).args(args);
    let (st, out, err) = run(cmd);
    assert!(st.success(), "nft {args:?}: {err}");
    out
}

/// What one run left: the trace, the packets the nftables rule dropped,
/// and the `clocksync` tool's output.
struct SelfRun {
    trace: Trace,
    nft_dropped: u64,
    clocksync_out: String,
}

/// Sink and responder on S, agents on C and S (each with `agent_args`),
/// then the traffic: TCP from C to S, the `clocksync` tool on C, agent
/// datagrams dropped on S. Stops everything and reads the trace back.
fn traced(pair: &NetnsPair, agent_args: &[&str]) -> SelfRun {
    let out = tempfile::tempdir().unwrap();
    let mut sink = spawn_sink(pair, out.path(), &["--clock-interval", "0.2"]);
    let mut server = spawn_agent(pair, &pair.b, "server", agent_args);
    let mut client = spawn_agent(pair, &pair.a, "client", agent_args);

    nft(&pair.b, &["add", "table", "inet", "ntrself"]);
    nft(
        &pair.b,
        &["add chain inet ntrself input { type filter hook input priority 0 ; }"],
    );
    // C's datagrams only: S's agent reports the drops, and the events of
    // the TCP flow it traced all reach the sink. Only datagrams that came
    // alone: a UDP GSO batch (up to 44 datagrams, one packet until S's
    // socket cuts it) carries most of the flow's events, and this run
    // sends only a few of them.
    let rule = format!(
        "add rule inet ntrself input ip saddr {} udp dport {SINK_PORT} \
         meta length < 2000 numgen inc mod {DROP_ONE_IN} == 0 counter drop",
        pair.addr_a
    );
    nft(&pair.b, &[&rule]);

    let mut cs = NetnsPair::exec(&pair.a, &bin("clocksync"));
    cs.args(["--source", &format!("sink:{}:{CLOCK_PORT}", pair.addr_b)])
        .args(["--interval", "0.2", "--count"])
        .arg(CLOCKSYNC_UPDATES.to_string());
    let clocksync = std::thread::spawn(move || run(cs));
    tcp_flow(pair, TCP_PORT, CHUNKS, CHUNK);
    let (st, clocksync_out, err) = clocksync.join().unwrap();
    assert!(st.success(), "clocksync: {err}");
    std::thread::sleep(Duration::from_millis(300));

    let listed = nft(&pair.b, &["list", "table", "inet", "ntrself"]);
    let nft_dropped = listed
        .split_whitespace()
        .skip_while(|w| *w != "packets")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no counter in {listed}"));
    // The agents' last datagrams must reach the sink.
    nft(&pair.b, &["delete", "table", "inet", "ntrself"]);

    for agent in [&mut client, &mut server] {
        let stats = stop_json(agent, libc::SIGINT);
        assert_eq!(stats["stats"]["bpf"]["ringbuf_lost"], 0, "{stats}");
        assert_eq!(stats["stats"]["bad_records"], 0, "{stats}");
    }
    std::thread::sleep(Duration::from_millis(200));
    stop_json(&mut sink, libc::SIGTERM);
    SelfRun {
        trace: read_dir(out.path()),
        nft_dropped,
        clocksync_out,
    }
}

/// nettrace's own ports.
fn is_ours(port: u16) -> bool {
    port == SINK_PORT || port == CLOCK_PORT
}

/// An event of one of nettrace's UDP flows: a UDP (or, for the tcp probe,
/// socket) flow with an end at the sink's or the responder's port, or any
/// TX event there (the tx probe is TCP-only: none may exist).
fn our_flow(ev: &Event) -> bool {
    match ev {
        Event::Rx(e) => e.protocol == 17 && (is_ours(e.sport) || is_ours(e.dport)),
        Event::Drop(e) => e.l4proto == 17 && (is_ours(e.sport) || is_ours(e.dport)),
        Event::Tcp(e) => is_ours(e.sport) || is_ours(e.dport),
        Event::Tx(e) => is_ours(e.sport) || is_ours(e.dport),
        _ => false,
    }
}

/// The reading task's name of an RX COPY or READ_DONE event.
fn reader(ev: &Event) -> Option<String> {
    match ev {
        Event::Rx(e) if matches!(e.stage(), Some(RxStage::Copy | RxStage::ReadDone)) => {
            let n = e.comm.iter().position(|b| *b == 0).unwrap_or(e.comm.len());
            Some(String::from_utf8_lossy(&e.comm[..n]).into_owned())
        }
        _ => None,
    }
}

/// A read by a nettrace program: the sink, its responder thread
/// (`clocksync-respo`), an agent, the `clocksync` tool.
fn nettrace_reader(ev: &Event) -> bool {
    reader(ev).is_some_and(|c| {
        ["tracer-sink", "tracer-agent", "clocksync"]
            .iter()
            .any(|p| c.starts_with(p))
    })
}

fn describe(f: &Frame) -> String {
    format!("{}: {:?}", f.host, f.event)
}

/// The TCP flow is in the trace of both hosts, so the trace is a real one.
fn assert_tcp_flow_traced(trace: &Trace) {
    for (host, want) in [("client", "TX"), ("server", "RX")] {
        let n = trace
            .frames
            .iter()
            .filter(|f| f.host == host)
            .filter(|f| match &f.event {
                Event::Tx(e) => want == "TX" && e.dport == TCP_PORT,
                Event::Rx(e) => want == "RX" && e.dport == TCP_PORT,
                _ => false,
            })
            .count();
        assert!(n >= CHUNKS, "{n} {want} events of the TCP flow on {host}");
    }
}

fn nettrace_traffic_happened(r: &SelfRun) {
    assert!(r.nft_dropped > 0, "the nftables rule dropped no datagram");
    let updates = r.clocksync_out.lines().count();
    assert!(
        updates >= CLOCKSYNC_UPDATES as usize,
        "clocksync printed {updates} updates:\n{}",
        r.clocksync_out
    );
}

fn skip_without_nft() -> bool {
    let ok = Command::new("nft")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip("needs nft (scripts/setup.sh installs nftables)");
    }
    ok
}

#[test]
fn own_traffic_is_not_traced_by_default() {
    if !require_root() || !skip_without_nft() {
        return;
    }
    let pair = NetnsPair::create("ntrslf", 254).expect("creating namespaces");
    let r = traced(&pair, &[]);
    nettrace_traffic_happened(&r);
    assert_tcp_flow_traced(&r.trace);
    let ours: Vec<String> = r
        .trace
        .frames
        .iter()
        .filter(|f| our_flow(&f.event) || nettrace_reader(&f.event))
        .map(describe)
        .collect();
    assert!(
        ours.is_empty(),
        "{} events of nettrace's own traffic, e.g.:\n{}",
        ours.len(),
        ours[..ours.len().min(10)].join("\n")
    );
}

#[test]
fn trace_self_traces_it() {
    if !require_root() || !skip_without_nft() {
        return;
    }
    let pair = NetnsPair::create("ntrsl2", 250).expect("creating namespaces");
    let r = traced(&pair, &["--trace-self"]);
    nettrace_traffic_happened(&r);
    assert_tcp_flow_traced(&r.trace);
    let count = |what: &dyn Fn(&Frame) -> bool| r.trace.frames.iter().filter(|f| what(f)).count();
    let rx = |f: &Frame, host: &str, stage: RxStage, port: u16| {
        f.host == host
            && matches!(&f.event, Event::Rx(e) if e.stage() == Some(stage)
                && e.protocol == 17 && (e.sport == port || e.dport == port))
    };
    // The sink's side of the agents' datagrams, at each RX stage a
    // datagram reaches; the clock exchange on both sides.
    for stage in [RxStage::StackEntry, RxStage::DataReady, RxStage::ReadDone] {
        for (host, port) in [
            ("server", SINK_PORT),
            ("server", CLOCK_PORT),
            ("client", CLOCK_PORT),
            ("client", SINK_PORT),
        ] {
            let n = count(&|f| rx(f, host, stage, port));
            assert!(n > 0, "no {} event of port {port} on {host}", stage.name());
        }
    }
    // Drops of agents' datagrams (the nftables rule on S).
    let drops =
        count(&|f| matches!(&f.event, Event::Drop(d) if d.l4proto == 17 && d.dport == SINK_PORT));
    assert!(drops > 0, "no drop of an agent datagram");
    // Reads by each nettrace program, named.
    let readers: std::collections::BTreeSet<String> = r
        .trace
        .frames
        .iter()
        .filter(|f| our_flow(&f.event))
        .filter_map(|f| reader(&f.event))
        .collect();
    eprintln!("readers of nettrace's traffic: {readers:?}");
    for name in ["tracer-sink", "tracer-agent", "clocksync"] {
        assert!(readers.contains(name), "no read by {name}: {readers:?}");
    }
    assert!(
        readers.iter().any(|c| c.starts_with("clocksync-re")),
        "no read by the responder: {readers:?}"
    );
}
