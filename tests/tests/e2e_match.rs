//! End to end with the real kernel: two hosts (namespaces a = "client",
//! b = "server"), each with `tracer-agent --probes tx,rx`, one sink, a TCP
//! connection carrying data both ways (the server echoes what it reads).
//! `nettrace-match --json` over the sink's files must match nearly every
//! sender skb in both directions, find no causality violation (both agents
//! read the one clock of this kernel) and prove an offset interval that
//! contains 0. The sink rotates its files; the same events concatenated
//! into one file must give the same report.
//!
//! The agents' clock flags are parameters of [`traced_pair`]: a test with
//! simulated independent oscillators only passes other flags.
//! `NETTRACE_MATCH_HTML=FILE` keeps the first test's HTML report there (to
//! look at it); by default it goes to a temporary directory.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tracer_e2e::bins::bin;
use tracer_e2e::netns::{in_netns, NetnsPair};
use tracer_e2e::procs::{run, Proc};
use tracer_e2e::scenario::{spawn_sink, stop_json, SINK_PORT};
use tracer_e2e::skip::require_root;

const PORT: u16 = 5601;
/// The echo flow of the loss test.
const LOSS_PORT: u16 = 5602;
const WRITES: usize = 300;
const SIZE: usize = 16 << 10;

/// An agent with `probes` (tx and rx at least) in `ns`, named `host`.
fn spawn_agent(pair: &NetnsPair, ns: &str, host: &str, probes: &str, extra: &[&str]) -> Proc {
    let mut cmd = NetnsPair::exec(ns, &bin("tracer-agent"));
    cmd.args(["--sink", &format!("{}:{SINK_PORT}", pair.addr_b)])
        .args(["--probes", probes, "--hostname", host, "--json"])
        .args(extra);
    let mut agent = Proc::spawn(host, cmd);
    agent.wait_stderr("rx probe attached", Duration::from_secs(30));
    agent
}

/// A client in a writes WRITES chunks to a server in b on `port`, which
/// echoes each byte back; the client reads the echo. Returns the client's
/// address.
fn echo_flow(pair: &NetnsPair, port: u16) -> SocketAddr {
    let addr = SocketAddr::from((pair.addr_b, port));
    let listener = in_netns(NetnsPair::path(&pair.b), "match-server", move || {
        TcpListener::bind(addr).unwrap()
    })
    .unwrap()
    .join()
    .unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut buf = vec![0u8; 64 << 10];
        let mut total = 0;
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    s.write_all(&buf[..n]).unwrap();
                    total += n;
                }
            }
        }
        total
    });
    let client = in_netns(NetnsPair::path(&pair.a), "match-client", move || {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_nodelay(true).unwrap();
        let mut r = c.try_clone().unwrap();
        let reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            let mut got = 0;
            while got < WRITES * SIZE {
                match r.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got += n,
                }
            }
            got
        });
        let data = vec![0x6du8; SIZE];
        for _ in 0..WRITES {
            c.write_all(&data).unwrap();
            std::thread::sleep(Duration::from_micros(700));
        }
        assert_eq!(reader.join().unwrap(), WRITES * SIZE);
        let local = c.local_addr().unwrap();
        // Let the last ACKs arrive before closing.
        std::thread::sleep(Duration::from_millis(100));
        local
    })
    .unwrap()
    .join()
    .unwrap();
    assert_eq!(server.join().unwrap(), WRITES * SIZE);
    client
}

/// What runs: the agents' probes and extra flags of the client's and the
/// server's agent (a clock, a simulated oscillator each), the sink's
/// flags, the echo flow's port.
struct Setup<'a> {
    probes: &'a str,
    agent_args: [&'a [&'a str]; 2],
    sink_args: &'a [&'a str],
    port: u16,
}

/// Sink in b, agents in a and b, the echo flow, then everything stopped
/// cleanly. Returns the sink's files.
fn traced_pair(pair: &NetnsPair, out: &Path, s: &Setup) -> Vec<PathBuf> {
    let mut sink = spawn_sink(pair, out, s.sink_args);
    let mut client = spawn_agent(pair, &pair.a, "client", s.probes, s.agent_args[0]);
    let mut server = spawn_agent(pair, &pair.b, "server", s.probes, s.agent_args[1]);
    echo_flow(pair, s.port);
    std::thread::sleep(Duration::from_millis(300));
    for (who, a) in [("client", &mut client), ("server", &mut server)] {
        let f = stop_json(a, libc::SIGINT);
        assert_eq!(f["final"], true, "{who}: {f}");
        assert_eq!(f["stats"]["ring_overruns"], 0, "{who}: {f}");
    }
    std::thread::sleep(Duration::from_millis(200));
    let s = stop_json(&mut sink, libc::SIGTERM);
    assert_eq!(s["datagrams_rejected"], 0, "{s}");
    tracer_e2e::pcap::pcapng_files(out)
}

/// `nettrace-match --json` over `inputs`.
fn match_json(inputs: &[PathBuf], extra: &[&str]) -> Value {
    let mut cmd = std::process::Command::new(bin("nettrace-match"));
    cmd.arg("--json").args(extra).args(inputs);
    let (st, stdout, stderr) = run(cmd);
    assert!(st.success(), "nettrace-match failed: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn direction<'a>(r: &'a Value, from: &str, to: &str) -> &'a Value {
    r["directions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["sender"] == from && d["receiver"] == to)
        .unwrap_or_else(|| panic!("no direction {from} → {to}: {}", r["directions"]))
}

#[test]
fn sender_skbs_meet_their_receptions_on_one_clock() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrmt", 243).expect("creating namespaces");
    let out = tempfile::tempdir().unwrap();
    let setup = Setup {
        probes: "tx,rx",
        agent_args: [&[], &[]],
        sink_args: &["--rotate-size", "256K"],
        port: PORT,
    };
    let files = traced_pair(&pair, out.path(), &setup);
    assert!(files.len() >= 3, "rotation made {} files", files.len());

    let report = match_json(&files, &[]);
    for (a, b) in [("client", "server"), ("server", "client")] {
        let d = direction(&report, a, b);
        let sent = d["sent"].as_u64().unwrap();
        let matched = d["matched"].as_u64().unwrap();
        // At least one TX skb per 16 KiB write (more when TSO cuts them).
        assert!(
            sent >= (WRITES / 2) as u64,
            "{a} → {b}: only {sent} sender skbs: {d}"
        );
        assert!(
            matched * 100 >= sent * 95,
            "{a} → {b}: {matched} of {sent} sender skbs matched: {}",
            d["unmatched"]
        );
        assert_eq!(
            d["violations"]["count"], 0,
            "{a} → {b}: {}",
            d["violations"]
        );
        let ow = &d["one_way"];
        assert!(ow["min_ns"].as_i64().unwrap() >= 0, "{ow}");
        // veth between namespaces: microseconds, not milliseconds.
        assert!(ow["p50_ns"].as_i64().unwrap() < 2_000_000, "{ow}");
        // The receiver's stages were followed to the application's read.
        let read = d["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["gap"] == "COPY→READ_DONE")
            .unwrap();
        assert!(
            read["dist"]["count"].as_u64().unwrap_or(0) * 2 >= matched,
            "{a} → {b}: few lives reach READ_DONE: {read}"
        );
    }
    let pairs = report["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 1, "{}", report["pairs"]);
    let p = &pairs[0];
    assert_eq!(p["contains_zero"], true, "{p}");
    assert_eq!(p["self_consistent"], true, "{p}");
    eprintln!(
        "offset interval [{}, {}] ns from {} + {} packets",
        p["lo_ns"], p["hi_ns"], p["packets_a_to_b"], p["packets_b_to_a"]
    );

    // The rotated files' sections concatenated into one file: one input,
    // the same events, the same report.
    let one = out.path().join("all-in-one.pcapng.joined");
    let mut joined = Vec::new();
    for f in &files {
        joined.extend(std::fs::read(f).unwrap());
    }
    std::fs::write(&one, joined).unwrap();
    let single = match_json(&[one], &[]);
    let strip = |mut v: Value| {
        v["input"]["files"] = Value::Null;
        v["input"]["peak_held"] = Value::Null;
        v
    };
    assert_eq!(
        strip(single),
        strip(report.clone()),
        "one file differs from the rotated files"
    );

    // The HTML report is written and self-contained.
    let html = std::env::var_os("NETTRACE_MATCH_HTML")
        .map_or_else(|| out.path().join("report.html"), PathBuf::from);
    let mut cmd = std::process::Command::new(bin("nettrace-match"));
    cmd.arg("--html").arg(&html).args(&files);
    let (st, stdout, stderr) = run(cmd);
    assert!(st.success(), "{stderr}");
    assert!(stdout.contains("client → server"), "{stdout}");
    eprintln!("{stdout}");
    let text = std::fs::read_to_string(&html).unwrap();
    assert!(text.contains("<svg") && text.contains("slowest packets"));
    assert!(
        !text.contains("src=") && !text.contains("<link") && !text.contains("<script"),
        "the report must need nothing from outside"
    );
}

fn nft(ns: &str, rule: &str) -> String {
    // `ip netns exec` for nft only: the agents need nsenter (see netns.rs).
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns, "nft"])
        .args(rule.split(' '))
        .output()
        .expect("running nft (scripts/setup.sh installs nftables)");
    assert!(
        out.status.success(),
        "nft {rule}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One client → server packet in 20 dropped by nftables on the server's
/// input hook, which comes after the stack entry: each dropped skb reaches
/// STACK_ENTRY (so it is matched, its life ends there) and its bytes are
/// sent again. Each transmission must be paired with its own reception:
/// a retransmission paired with the original's send (or the other way
/// round) would show a one-way latency of a retransmission timeout.
#[test]
fn retransmissions_are_matched_as_separate_transmissions() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrmu", 244).expect("creating namespaces");
    nft(&pair.b, "add table inet mt");
    nft(
        &pair.b,
        "add chain inet mt input { type filter hook input priority 0 ; }",
    );
    let rule = format!("add rule inet mt input tcp dport {LOSS_PORT} tcp flags & (syn|fin|rst) == 0 numgen random mod 20 == 0 counter drop");
    nft(&pair.b, &rule);
    let out = tempfile::tempdir().unwrap();
    let setup = Setup {
        probes: "tx,rx,tcp",
        agent_args: [&[], &[]],
        sink_args: &[],
        port: LOSS_PORT,
    };
    let files = traced_pair(&pair, out.path(), &setup);
    let counters = nft(&pair.b, "list chain inet mt input");
    let dropped: u64 = counters
        .split("packets ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no counter in {counters}"));
    let report = match_json(&files, &[]);
    let d = direction(&report, "client", "server");
    eprintln!("dropped {dropped}; client → server: {d}");
    let (sent, matched) = (d["sent"].as_u64().unwrap(), d["matched"].as_u64().unwrap());
    let retx = d["retransmits"].as_u64().unwrap();
    assert!(dropped > 3, "nftables dropped only {dropped} packets");
    assert!(
        retx > 0 && d["matched_retransmits"].as_u64().unwrap() > 0,
        "{d}"
    );
    assert!(
        matched * 100 >= sent * 95,
        "{matched} of {sent} matched: {}",
        d["unmatched"]
    );
    assert_eq!(d["violations"]["count"], 0);
    // No transmission was paired with another one's reception.
    let ow = &d["one_way"];
    assert!(ow["max_ns"].as_i64().unwrap() < 20_000_000, "{ow}");
    // The dropped ones reached STACK_ENTRY but not TCP_INPUT.
    let tcp_input = d["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["gap"] == "STACK_ENTRY→TCP_INPUT")
        .unwrap();
    let with_tcp = tcp_input["dist"]["count"].as_u64().unwrap();
    assert!(
        with_tcp < matched,
        "every matched life has TCP_INPUT despite {dropped} drops"
    );
    assert!(
        report["hosts"][0]["retransmit_events"].as_u64().unwrap() > 0,
        "{}",
        report["hosts"]
    );
}

/// Both agents at `--sample-every 5`, the matcher told so: the sampled
/// transmissions (those whose last byte lies in a sampled 64 KiB granule)
/// find their RX skb, which the receiver kept by the same rule, and the
/// socket-level stages are still resolved where sampling cannot hide an
/// earlier event.
#[test]
fn sampled_transmissions_meet_their_sampled_receptions() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrms", 245).expect("creating namespaces");
    let out = tempfile::tempdir().unwrap();
    let setup = Setup {
        probes: "tx,rx",
        agent_args: [&["--sample-every", "5"], &["--sample-every", "5"]],
        sink_args: &[],
        port: PORT,
    };
    let files = traced_pair(&pair, out.path(), &setup);
    let report = match_json(&files, &["--sample-every", "5"]);
    for (a, b) in [("client", "server"), ("server", "client")] {
        let d = direction(&report, a, b);
        let (sent, matched) = (d["sent"].as_u64().unwrap(), d["matched"].as_u64().unwrap());
        let stages: Vec<String> = d["stages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| format!("{} {}", s["gap"], s["dist"]["count"]))
            .collect();
        eprintln!(
            "{a} → {b}: {matched} of {sent} matched; {}",
            stages.join(", ")
        );
        // 4.7 MB each way: ~73 granules, ~15 sampled.
        assert!(sent >= 5, "{a} → {b}: {sent} sampled sender skbs: {d}");
        assert!(
            matched * 100 >= sent * 95,
            "{a} → {b}: {matched} of {sent} matched: {}",
            d["unmatched"]
        );
        assert_eq!(d["violations"]["count"], 0);
    }
    let all = report["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["events"]["tx"].as_u64().unwrap())
        .sum::<u64>();
    assert!(
        all < 2 * 4 * WRITES as u64,
        "{all} TX events: sampling did not happen"
    );
}
