//! End to end with the real kernel: two hosts (namespaces a = "client",
//! b = "server"), each with `tracer-agent --probes tx,rx`, one sink (or
//! two), a TCP connection carrying data both ways (the server echoes what
//! it reads), and `nettrace-match --json` over the sinks' files.
//!
//! - On the kernel's one clock: nearly every sender skb matched in both
//!   directions, no causality violation, an offset interval holding 0;
//!   rotated files and the same events in one file give the same report.
//! - Each agent on its own simulated oscillator (+3 ms / +50 ppm and
//!   −2 ms / −30 ppm), `--clock sink`, each agent sending to its own sink:
//!   the exchange and the servos remove the 5 ms and 80 ppm between the
//!   hosts, so the same holds (no violation, an interval holding 0 and
//!   narrower than 100 µs), and both sinks' rotated files, in any order,
//!   give the same report as one file.
//! - The same oscillators on `--clock system`: every client → server packet
//!   is received before it was sent (the server's clock runs behind), none
//!   the other way, and the interval excludes 0 and sits at the injected
//!   −5 ms (minus the 80 ppm drift accumulated since the agents started).
//! - 5 % random loss (nftables) and `--sample-every 10` on both ends.
//!
//! The agents' clock flags are parameters of [`traced_pair`].
//! `NETTRACE_MATCH_HTML=FILE` keeps the first test's HTML report there (to
//! look at it); by default it goes to a temporary directory.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use tracer_e2e::bins::bin;
use tracer_e2e::netns::{in_netns, NetnsPair};
use tracer_e2e::procs::{run, Proc};
use tracer_e2e::scenario::{spawn_sink, stop_json, SINK_PORT};
use tracer_e2e::skip::require_root;

const PORT: u16 = 5601;
/// The echo flow of the loss test.
const LOSS_PORT: u16 = 5602;
/// The echo flows of the oscillator tests.
const OSC_SINK_PORT: u16 = 5603;
const OSC_SYSTEM_PORT: u16 = 5604;
const WRITES: usize = 300;
const SIZE: usize = 16 << 10;
/// The client's oscillator: 3 ms ahead, 50 ppm fast.
const OSC_CLIENT: &str = "3000000,50";
/// The server's: 2 ms behind, 30 ppm slow.
const OSC_SERVER: &str = "-2000000,-30";
/// clock(server) − clock(client) at the agents' start, ns, and how fast it
/// moves, ppm: (−2 ms) − (+3 ms), (−30) − (+50).
const THETA_NS: i64 = -5_000_000;
const THETA_PPM: i64 = -80;

/// An agent with `probes` (tx and rx at least) in `ns`, named `host`,
/// sending to the sink at `sink`. Returns once its probes are attached,
/// which the agent does only after its clock locked (or its
/// `--clock-lock-timeout` passed).
fn spawn_agent(ns: &str, sink: SocketAddr, host: &str, probes: &str, extra: &[&str]) -> Proc {
    let mut cmd = NetnsPair::exec(ns, &bin("tracer-agent"));
    cmd.args(["--sink", &sink.to_string()])
        .args(["--probes", probes, "--hostname", host, "--json"])
        .args(extra);
    let mut agent = Proc::spawn(host, cmd);
    agent.wait_stderr("rx probe attached", Duration::from_secs(30));
    agent
}

/// A second sink, in namespace a, writing to `out`.
fn spawn_sink_a(pair: &NetnsPair, out: &Path, args: &[&str]) -> Proc {
    let mut cmd = NetnsPair::exec(&pair.a, &bin("tracer-sink"));
    cmd.args(["--listen", &format!("{}:{SINK_PORT}", pair.addr_a)])
        .arg("--output")
        .arg(out)
        .arg("--json")
        .args(args);
    let mut sink = Proc::spawn("tracer-sink (a)", cmd);
    sink.wait_stderr("tracer-sink started", Duration::from_secs(30));
    sink
}

/// A client in a writes `writes` chunks to a server in b on `port`, which
/// echoes each byte back; the client reads the echo. Returns the client's
/// address.
fn echo_flow(pair: &NetnsPair, port: u16, writes: usize, pause: Duration) -> SocketAddr {
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
            while got < writes * SIZE {
                match r.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got += n,
                }
            }
            got
        });
        let data = vec![0x6du8; SIZE];
        for _ in 0..writes {
            c.write_all(&data).unwrap();
            std::thread::sleep(pause);
        }
        assert_eq!(reader.join().unwrap(), writes * SIZE);
        let local = c.local_addr().unwrap();
        // Let the last ACKs arrive before closing.
        std::thread::sleep(Duration::from_millis(100));
        local
    })
    .unwrap()
    .join()
    .unwrap();
    assert_eq!(server.join().unwrap(), writes * SIZE);
    client
}

/// What runs: the agents' probes and extra flags of the client's and the
/// server's agent (a clock, a simulated oscillator each), the sink's
/// flags, the echo flow.
struct Setup<'a> {
    probes: &'a str,
    agent_args: [&'a [&'a str]; 2],
    sink_args: &'a [&'a str],
    port: u16,
    /// Chunks of SIZE bytes the client writes (and the server echoes).
    writes: usize,
    /// Pause after each write (0: as fast as TCP takes them).
    pause: Duration,
    /// The server's agent sends to a second sink (with the same flags),
    /// in the client's namespace, writing its own directory: each host's
    /// events end up in the other host's sink.
    two_sinks: bool,
    /// A line both agents must print on stderr before the traffic starts
    /// (their clocks' warm-up).
    warm_up: Option<&'a str>,
}

impl Default for Setup<'_> {
    fn default() -> Self {
        Setup {
            probes: "tx,rx",
            agent_args: [&[], &[]],
            sink_args: &[],
            port: PORT,
            writes: WRITES,
            pause: Duration::from_micros(700),
            two_sinks: false,
            warm_up: None,
        }
    }
}

/// What a traced run left behind.
struct Traced {
    /// The sinks' files: the first sink's, then the second's.
    files: Vec<PathBuf>,
    /// The sinks' output directories.
    dirs: Vec<PathBuf>,
    /// From the first agent's spawn to the start and the end of the
    /// traffic: each agent's oscillator started after that spawn.
    since_spawn: (Duration, Duration),
    /// From the moment both agents were tracing to the start and the end
    /// of the traffic: each oscillator had started by then.
    since_ready: (Duration, Duration),
}

/// Sink(s), agents in a and b, the echo flow, then everything stopped
/// cleanly.
fn traced_pair(pair: &NetnsPair, out: &Path, s: &Setup) -> Traced {
    let dirs: Vec<PathBuf> = (1..=1 + usize::from(s.two_sinks))
        .map(|i| out.join(format!("sink{i}")))
        .collect();
    for d in &dirs {
        std::fs::create_dir_all(d).unwrap();
    }
    let sink_b = SocketAddr::from((pair.addr_b, SINK_PORT));
    let sink_a = SocketAddr::from((pair.addr_a, SINK_PORT));
    let mut sinks = vec![spawn_sink(pair, &dirs[0], s.sink_args)];
    if s.two_sinks {
        sinks.push(spawn_sink_a(pair, &dirs[1], s.sink_args));
    }
    let spawned = Instant::now();
    let server_sink = if s.two_sinks { sink_a } else { sink_b };
    let mut client = spawn_agent(&pair.a, sink_b, "client", s.probes, s.agent_args[0]);
    let mut server = spawn_agent(&pair.b, server_sink, "server", s.probes, s.agent_args[1]);
    let ready = Instant::now();
    // The agents trace only once their clock locked (or gave up waiting):
    // every event of the flow is on a locked clock unless one says it
    // gave up.
    for (who, a) in [("client", &mut client), ("server", &mut server)] {
        assert!(
            !a.stderr.iter().any(|l| l.contains("clock not locked yet")),
            "{who}: the clock did not lock in time:\n{}",
            a.stderr.join("\n")
        );
        if let Some(line) = s.warm_up {
            a.wait_stderr(line, Duration::from_secs(30));
        }
    }
    let flow_start = Instant::now();
    echo_flow(pair, s.port, s.writes, s.pause);
    let flow_end = Instant::now();
    std::thread::sleep(Duration::from_millis(300));
    for (who, a) in [("client", &mut client), ("server", &mut server)] {
        let f = stop_json(a, libc::SIGINT);
        assert_eq!(f["final"], true, "{who}: {f}");
        assert_eq!(f["stats"]["ring_overruns"], 0, "{who}: {f}");
    }
    std::thread::sleep(Duration::from_millis(200));
    for sink in &mut sinks {
        let s = stop_json(sink, libc::SIGTERM);
        assert_eq!(s["datagrams_rejected"], 0, "{s}");
    }
    let files = dirs
        .iter()
        .flat_map(|d| tracer_e2e::pcap::pcapng_files(d))
        .collect();
    Traced {
        files,
        dirs,
        since_spawn: (flow_start - spawned, flow_end - spawned),
        since_ready: (flow_start - ready, flow_end - ready),
    }
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

/// Both directions: nearly every sender skb matched, no causality
/// violation (also none on an unlocked clock), latencies of a veth, the
/// receiver's stages followed to the application's read.
fn assert_synchronised_directions(report: &Value, writes: usize) {
    for (a, b) in [("client", "server"), ("server", "client")] {
        let d = direction(report, a, b);
        let sent = d["sent"].as_u64().unwrap();
        let matched = d["matched"].as_u64().unwrap();
        // At least one TX skb per 16 KiB write (more when TSO cuts them).
        assert!(
            sent >= (writes / 2) as u64,
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
}

/// The one host pair's offset interval.
fn the_pair(report: &Value) -> &Value {
    let pairs = report["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 1, "{}", report["pairs"]);
    let p = &pairs[0];
    assert_eq!((&p["a"], &p["b"]), (&"client".into(), &"server".into()));
    eprintln!(
        "offset interval [{}, {}] ns (width {}) from {} + {} packets; includes unlocked: {}",
        p["lo_ns"],
        p["hi_ns"],
        p["width_ns"],
        p["packets_a_to_b"],
        p["packets_b_to_a"],
        p["includes_unlocked"]
    );
    p
}

/// `report` with what depends on how the events were cut into files
/// taken out.
fn strip(mut v: Value) -> Value {
    v["input"]["files"] = Value::Null;
    v["input"]["peak_held"] = Value::Null;
    v
}

/// The files' sections concatenated into one file: one input, the same
/// events, so the same report as `report` (the matcher over `files`).
/// Only for one sink's rotated files, which follow each other in time: a
/// file is read as one stream, in order.
fn assert_one_file_reports_the_same(files: &[PathBuf], dir: &Path, report: &Value) {
    let one = dir.join("all-in-one.pcapng.joined");
    let mut joined = Vec::new();
    for f in files {
        joined.extend(std::fs::read(f).unwrap());
    }
    std::fs::write(&one, joined).unwrap();
    let single = match_json(&[one], &[]);
    assert_eq!(
        strip(single),
        strip(report.clone()),
        "one file differs from the {} files",
        files.len()
    );
}

/// Several sinks' files merged into one by Wireshark's `mergecap` (in
/// time order, one section, interfaces renumbered): the same report.
fn assert_mergecap_reports_the_same(files: &[PathBuf], dir: &Path, report: &Value) {
    let one = dir.join("merged.pcapng");
    let mut cmd = std::process::Command::new("mergecap");
    cmd.arg("-w").arg(&one).args(files);
    let (st, _, stderr) = run(cmd);
    assert!(
        st.success(),
        "mergecap (installed with tshark by scripts/setup.sh): {stderr}"
    );
    let single = match_json(&[one], &[]);
    assert_eq!(
        strip(single),
        strip(report.clone()),
        "the merged file differs from the {} files",
        files.len()
    );
}

#[test]
fn sender_skbs_meet_their_receptions_on_one_clock() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrmt", 243).expect("creating namespaces");
    let out = tempfile::tempdir().unwrap();
    // Plain files, as many 256K ones as before compression became the
    // default; the compressed form is rotated and merged in
    // clock_sink_removes_the_oscillators_between_hosts.
    let setup = Setup {
        sink_args: &["--rotate-size", "256K", "--compress", "none"],
        ..Setup::default()
    };
    let files = traced_pair(&pair, out.path(), &setup).files;
    assert!(files.len() >= 3, "rotation made {} files", files.len());

    let report = match_json(&files, &[]);
    assert_synchronised_directions(&report, WRITES);
    let p = the_pair(&report);
    assert_eq!(p["contains_zero"], true, "{p}");
    assert_eq!(p["self_consistent"], true, "{p}");
    assert_one_file_reports_the_same(&files, out.path(), &report);

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

/// Agent flags of a host on `clock` with its own simulated oscillator.
/// 0.2 s clock updates and the least-squares servo: it learns a constant
/// frequency error from its first updates and is within tens of ns two
/// updates after the lock. (The default PI servo, whose gains are
/// phc2sys's per-update fractions, pulls the drift in over about ten
/// seconds at 0.2 s updates, ringing by µs meanwhile: more than the
/// shortest one-way latency over veth, under 1 µs.)
fn osc_args(clock: &'static str, osc: &'static str) -> [&'static str; 8] {
    [
        "--servo",
        "linreg",
        "--clock",
        clock,
        "--clock-interval",
        "0.2",
        "--simulate-oscillator",
        osc,
    ]
}

/// The warm-up of the oscillator tests: the traffic starts once both
/// servos are LOCKED_STABLE (ten offsets in a row under 1 µs, 2 s after
/// the lock at 0.2 s updates), not merely LOCKED.
const STABLE: &str = "state=LOCKED_STABLE";

/// Two hosts whose clocks really differ (+3 ms / +50 ppm and −2 ms /
/// −30 ppm), both following a sink's clock through the two-way exchange.
/// Each agent sends to its own sink (each on the other host), both
/// rotating, so this is also the "several sinks' files" case: given in
/// any order, or merged into one file, they give the same report.
#[test]
fn clock_sink_removes_the_oscillators_between_hosts() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrmo", 248).expect("creating namespaces");
    let out = tempfile::tempdir().unwrap();
    let (client, server) = (osc_args("sink", OSC_CLIENT), osc_args("sink", OSC_SERVER));
    let setup = Setup {
        agent_args: [&client, &server],
        // Compressed files (the default) at the smallest rotation size:
        // several .pcapng.zst per sink, merged, reversed and joined.
        sink_args: &["--rotate-size", "64K", "--clock-interval", "0.2"],
        port: OSC_SINK_PORT,
        two_sinks: true,
        warm_up: Some(STABLE),
        ..Setup::default()
    };
    let traced = traced_pair(&pair, out.path(), &setup);
    let per_sink: Vec<usize> = traced
        .dirs
        .iter()
        .map(|d| tracer_e2e::pcap::pcapng_files(d).len())
        .collect();
    assert!(
        per_sink.iter().all(|&n| n >= 2),
        "each sink should have rotated: {per_sink:?} files"
    );

    let report = match_json(&traced.dirs, &[]);
    assert_synchronised_directions(&report, WRITES);
    for h in report["hosts"].as_array().unwrap() {
        assert_eq!(h["clock"]["source"], "sink", "{h}");
    }
    let p = the_pair(&report);
    assert_eq!(p["includes_unlocked"], false, "{p}");
    assert_eq!(p["contains_zero"], true, "{p}");
    assert_eq!(p["self_consistent"], true, "{p}");
    let width = p["width_ns"].as_i64().unwrap();
    assert!(width < 100_000, "offset interval {width} ns wide: {p}");

    // The two sinks' directories in the other order, their files one by
    // one in reverse, and everything merged into one file: the same report.
    let swapped: Vec<PathBuf> = traced.dirs.iter().rev().cloned().collect();
    assert_eq!(strip(match_json(&swapped, &[])), strip(report.clone()));
    let reversed: Vec<PathBuf> = traced.files.iter().rev().cloned().collect();
    assert_eq!(strip(match_json(&reversed, &[])), strip(report.clone()));
    assert_mergecap_reports_the_same(&traced.files, out.path(), &report);
}

/// The same oscillators with `--clock system`: nothing removes them, so
/// the server's clock reads 5 ms (and 80 ppm) behind the client's. Every
/// client → server packet seems to arrive before it was sent, server →
/// client ones take 5 ms, and the interval the data prove excludes 0 and
/// sits where the oscillators put the offset.
#[test]
fn clock_system_shows_the_oscillators_as_violations() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrmy", 249).expect("creating namespaces");
    let out = tempfile::tempdir().unwrap();
    let (client, server) = (
        osc_args("system", OSC_CLIENT),
        osc_args("system", OSC_SERVER),
    );
    let setup = Setup {
        agent_args: [&client, &server],
        port: OSC_SYSTEM_PORT,
        warm_up: Some(STABLE),
        ..Setup::default()
    };
    let traced = traced_pair(&pair, out.path(), &setup);
    let report = match_json(&traced.files, &[]);
    // θ = clock(server) − clock(client) is −5 ms at the oscillators'
    // start and moves by −80 ppm of the time since. During the traffic it
    // is at most `early` (measured from when both agents were tracing,
    // after both oscillators started) and at least `late` (measured from
    // the first agent's spawn, before either started).
    let at = |since: Duration| THETA_NS + THETA_PPM * since.as_nanos() as i64 / 1_000_000;
    let (early, late) = (at(traced.since_ready.0), at(traced.since_spawn.1));
    // Room for the one-way latencies (µs over veth) and the servos'
    // tracking of CLOCK_TAI (tens of ns).
    let slack = 20_000;
    eprintln!("θ between {late} and {early} ns during the traffic");

    let d = direction(&report, "client", "server");
    let (matched, v) = (d["matched"].as_u64().unwrap(), &d["violations"]);
    eprintln!("client → server: {matched} matched, violations {v}");
    assert!(matched >= (WRITES / 2) as u64, "{d}");
    // A true one-way of µs against 5 ms: every one is received "before".
    assert_eq!(v["count"], matched, "{v}");
    assert_eq!(v["while_unlocked"], 0, "{v}");
    let worst = v["worst_ns"].as_i64().unwrap();
    assert!(
        (late - slack..=early + slack).contains(&worst),
        "worst violation {worst} ns, θ from {early} to {late} ns"
    );
    let back = direction(&report, "server", "client");
    assert!(
        back["matched"].as_u64().unwrap() >= (WRITES / 2) as u64,
        "{back}"
    );
    assert_eq!(back["violations"]["count"], 0, "{}", back["violations"]);
    let ow = &back["one_way"];
    let min = ow["min_ns"].as_i64().unwrap();
    assert!(
        (-early - slack..=-late + slack).contains(&min),
        "server → client one-way min {min} ns: {ow}"
    );

    let p = the_pair(&report);
    assert_eq!(p["contains_zero"], false, "{p}");
    let (lo, hi) = (p["lo_ns"].as_i64().unwrap(), p["hi_ns"].as_i64().unwrap());
    // Each bound is the offset at some packet's time, give or take its
    // true one-way latency; with 80 ppm between the clocks the two
    // bounds come from different moments and may cross (lo > hi: no
    // single offset explains the whole trace, which the report says).
    for bound in [lo, hi] {
        assert!(
            (late - slack..=early + slack).contains(&bound),
            "bound {bound} ns outside θ's course {late}..{early}: {p}"
        );
    }
    // The summary says so in words.
    let mut cmd = std::process::Command::new(bin("nettrace-match"));
    cmd.args(&traced.files);
    let (st, text, stderr) = run(cmd);
    assert!(st.success(), "{stderr}");
    eprintln!("{text}");
    assert!(text.contains("VIOLATIONS (received before sent"), "{text}");
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

/// One data or ACK packet in 20 of the loss test's connection (not
/// SYN/FIN/RST) dropped on each host's input hook, which comes after the
/// stack entry. Returns the namespaces with a rule.
fn add_loss_both_ways(pair: &NetnsPair) -> [&String; 2] {
    let rules = [
        (&pair.b, format!("add rule inet mt input tcp dport {LOSS_PORT} tcp flags & (syn|fin|rst) == 0 numgen random mod 20 == 0 counter drop")),
        (&pair.a, format!("add rule inet mt input tcp sport {LOSS_PORT} tcp flags & (syn|fin|rst) == 0 numgen random mod 20 == 0 counter drop")),
    ];
    for (ns, rule) in &rules {
        // No netem in this kernel: nftables' random numbers drop 1 in 20.
        nft(ns, "add table inet mt");
        nft(
            ns,
            "add chain inet mt input { type filter hook input priority 0 ; }",
        );
        nft(ns, rule);
    }
    [rules[0].0, rules[1].0]
}

/// The loss tests' traffic: bulk both ways (the server echoes as fast as
/// it reads): TSO skbs, full queues and loss recovery, where tags and
/// bytes part.
fn lossy_setup() -> Setup<'static> {
    Setup {
        probes: "tx,rx,tcp",
        port: LOSS_PORT,
        writes: 1000,
        pause: Duration::ZERO,
        ..Setup::default()
    }
}

/// 5 % random loss both ways for the whole run: one data or ACK packet in
/// 20 of the echo connection (not SYN/FIN/RST) dropped by nftables on each
/// host's input hook, which comes after the stack entry: each dropped skb
/// reaches STACK_ENTRY, and its bytes are sent again. On the kernel's one
/// clock the true offset is 0, so a causality violation can only be a
/// pairing defect: every run must have none, and nearly every sender skb
/// is matched or counted as ambiguous (copies of its bytes that cannot be
/// told apart, docs/matching.md). `runs` runs in a row on one pair of
/// namespaces; the first violation fails the test with its packet.
fn lossy_runs(
    pair: &NetnsPair,
    runs: usize,
    agent_args: [&[&str]; 2],
    sink_args: &[&str],
    warm_up: Option<&str>,
) {
    let rules = add_loss_both_ways(pair);
    let mut totals = (0u64, 0u64, 0u64, 0u64);
    for run in 0..runs {
        let out = tempfile::tempdir().unwrap();
        let setup = Setup {
            agent_args,
            sink_args,
            warm_up,
            ..lossy_setup()
        };
        let files = traced_pair(pair, out.path(), &setup).files;
        if let Some(keep) = std::env::var_os("NETTRACE_KEEP_TRACES") {
            let dir = Path::new(&keep).join(format!("run{run}"));
            std::fs::create_dir_all(&dir).unwrap();
            for f in &files {
                std::fs::copy(f, dir.join(f.file_name().unwrap())).unwrap();
            }
        }
        let report = match_json(&files, &[]);
        for (a, b) in [("client", "server"), ("server", "client")] {
            let d = direction(&report, a, b);
            let n = |k: &str| d[k].as_u64().unwrap();
            let (sent, matched) = (n("sent"), n("matched"));
            let ambiguous = d["ambiguous"]["unrecorded_send"].as_u64().unwrap()
                + d["ambiguous"]["lost_copy"].as_u64().unwrap();
            eprintln!(
                "run {run} {a} → {b}: sent {sent} matched {matched} ambiguous {} retransmits {} unmatched {}",
                d["ambiguous"], n("retransmits"), d["unmatched"]
            );
            assert_eq!(
                d["violations"]["count"], 0,
                "run {run} {a} → {b}: a violation on one clock: {}",
                d["violations"]
            );
            assert!(
                (matched + ambiguous) * 100 >= sent * 95,
                "run {run} {a} → {b}: {matched} matched and {ambiguous} ambiguous of {sent}: {}",
                d["unmatched"]
            );
            assert!(
                matched * 100 >= sent * 80,
                "run {run} {a} → {b}: only {matched} of {sent} matched: {}",
                d["ambiguous"]
            );
            // No transmission was paired with another one's reception.
            let ow = &d["one_way"];
            assert!(
                ow["max_ns"].as_i64().unwrap() < 20_000_000,
                "run {run} {a} → {b}: {ow}"
            );
            totals.0 += sent;
            totals.1 += n("retransmits");
            totals.2 += n("matched_retransmits");
        }
        totals.3 += report["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["retransmit_events"].as_u64().unwrap())
            .sum::<u64>();
    }
    for ns in &rules {
        let counters = nft(ns, "list chain inet mt input");
        let dropped: u64 = counters
            .split("packets ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no counter in {counters}"));
        assert!(
            dropped > 3 * runs as u64,
            "nftables dropped only {dropped} packets in {ns}"
        );
    }
    // Loss recovery happened, and its retransmissions were paired too.
    let (sent, retx, matched_retx, retx_events) = totals;
    eprintln!("{runs} runs: {sent} sends, {retx} retransmissions ({matched_retx} matched), {retx_events} RETRANSMIT events");
    assert!(
        retx > 0 && matched_retx > 0 && retx_events > 0,
        "{totals:?}"
    );
}

#[test]
fn loss_both_ways_on_one_clock_makes_no_violation_in_ten_runs() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrmu", 244).expect("creating namespaces");
    lossy_runs(&pair, 10, [&[], &[]], &[], None);
}

#[test]
fn loss_both_ways_on_simulated_oscillators_makes_no_violation() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrml", 246).expect("creating namespaces");
    lossy_runs(
        &pair,
        3,
        [&osc_args("sink", OSC_CLIENT), &osc_args("sink", OSC_SERVER)],
        &["--clock-interval", "0.2"],
        Some(STABLE),
    );
}

/// Both agents at `--sample-every 10`, the matcher told so: the sampled
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
    // 9.8 MB each way: ~150 granules, ~15 sampled (fewer than 2 with a
    // chance under 1e-4, whatever the flow's ports and initial sequence).
    let writes = 2 * WRITES;
    let setup = Setup {
        agent_args: [&["--sample-every", "10"], &["--sample-every", "10"]],
        writes,
        ..Setup::default()
    };
    let files = traced_pair(&pair, out.path(), &setup).files;
    let report = match_json(&files, &["--sample-every", "10"]);
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
        assert!(sent >= 4, "{a} → {b}: {sent} sampled sender skbs: {d}");
        assert!(
            matched * 100 >= sent * 95,
            "{a} → {b}: {matched} of {sent} matched: {}",
            d["unmatched"]
        );
        assert_eq!(d["violations"]["count"], 0);
    }
    // Every write is at least one TX skb per direction when all are
    // recorded; at 1 in 10 about a tenth are.
    let all = report["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["events"]["tx"].as_u64().unwrap())
        .sum::<u64>();
    assert!(
        all < 2 * 3 * writes as u64 / 2,
        "{all} TX events: sampling did not happen"
    );
}

/// How far a packet capture's stamp may be from the trace's stage, µs.
/// The capture taps sit on the same path as the stages: on the sender
/// `dev_queue_xmit_nit()` runs in the same `xmit_one()` call just before
/// the driver's SND_SW stamp; on the receiver `__netif_receive_skb_core()`
/// hands the skb to the capture right after the `netif_receive_skb`
/// tracepoint (STACK_ENTRY). Both are the same CPU in the same call; the
/// capture's stamps have microsecond resolution (dumpcap's pcapng), and
/// the agents' global clock (`--clock system`) is CLOCK_TAI mapped from
/// CLOCK_MONOTONIC, which equals the captures' CLOCK_REALTIME here.
const WITNESS_SLACK_US: f64 = 100.0;

/// One TCP segment with data in a packet capture.
#[derive(Debug, Clone)]
struct Segment {
    t_us: f64,
    flow: String,
    seq: u32,
    end: u32,
}

/// The data segments of a pcapng file written by dumpcap, read by tshark
/// (raw sequence numbers, no dissector of ours).
fn segments(file: &Path) -> Vec<Segment> {
    let tshark = tracer_e2e::tshark::Tshark::find().expect("tshark (scripts/setup.sh installs it)");
    let mut cmd = std::process::Command::new(tshark.exe());
    cmd.args(["-n", "-r"])
        .arg(file)
        .args(["-Y", "tcp.len > 0", "-T", "fields", "-E", "separator=,"])
        .args([
            "-e",
            "frame.time_epoch",
            "-e",
            "ip.src",
            "-e",
            "tcp.srcport",
        ])
        .args([
            "-e",
            "ip.dst",
            "-e",
            "tcp.dstport",
            "-e",
            "tcp.seq_raw",
            "-e",
            "tcp.len",
        ]);
    let (st, out, err) = run(cmd);
    assert!(st.success(), "tshark on {}: {err}", file.display());
    out.lines()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(f.len(), 7, "{l}");
            let seq: u32 = f[5].parse().unwrap();
            let len: u32 = f[6].parse().unwrap();
            Segment {
                t_us: f[0].parse::<f64>().unwrap() * 1e6,
                flow: format!("{}:{} > {}:{}", f[1], f[2], f[3], f[4]),
                seq,
                end: seq.wrapping_add(len),
            }
        })
        .collect()
}

/// dumpcap on `dev` in namespace `ns`, writing `file`; running once it
/// says so.
fn capture(ns: &str, dev: &str, file: &Path) -> Proc {
    let mut cmd = NetnsPair::exec(ns, Path::new("dumpcap"));
    cmd.args(["-i", dev, "-s", "128", "-w"]).arg(file);
    let mut p = Proc::spawn("dumpcap", cmd);
    p.wait_stderr("Capturing on", Duration::from_secs(20));
    p
}

/// The witness: packet captures of both ends during a lossy run (5 % loss
/// both ways, bulk echo, `--clock system` on the kernel's one clock). For
/// every pair `nettrace-match --pairs` made, the sender's capture segment
/// with the bytes the TX skb held at SND_SW nearest that SND_SW lies
/// within WITNESS_SLACK_US of it, the receiver's segment with the RX skb's
/// bytes nearest its STACK_ENTRY too; on the captures' one clock the
/// reception is after that send and before the next copy of the same
/// bytes left; and no sender segment stands for two pairs: each pair is
/// one transmission and its own reception.
#[test]
fn every_matched_pair_is_one_transmission_in_both_packet_captures() {
    if !require_root() {
        return;
    }
    if tracer_e2e::tshark::Tshark::or_skip(
        "every_matched_pair_is_one_transmission_in_both_packet_captures",
    )
    .is_none()
    {
        return;
    }
    let pair = NetnsPair::create("ntrmw", 236).expect("creating namespaces");
    add_loss_both_ways(&pair);
    let out = tempfile::tempdir().unwrap();
    let caps = [out.path().join("a.pcapng"), out.path().join("b.pcapng")];
    let mut dumpcaps = [
        capture(&pair.a, "ntrmwva", &caps[0]),
        capture(&pair.b, "ntrmwvb", &caps[1]),
    ];
    let files = traced_pair(&pair, &out.path().join("trace"), &lossy_setup()).files;
    for d in &mut dumpcaps {
        let (st, _) = d.stop(libc::SIGINT, Duration::from_secs(20));
        assert!(st.success() || st.code().is_none(), "dumpcap: {st:?}");
    }
    let pairs_file = out.path().join("pairs.jsonl");
    let report = match_json(&files, &["--pairs", pairs_file.to_str().unwrap()]);
    let captured = [segments(&caps[0]), segments(&caps[1])];
    let side = |host: &str| usize::from(host == "server");
    let stage = |p: &Value, name: &str| -> Option<f64> {
        p["stages_ns"]
            .as_array()?
            .iter()
            .find(|s| s[0] == name)
            .map(|s| s[1].as_u64().unwrap() as f64 / 1e3)
    };
    let mut used = std::collections::HashSet::new();
    let (mut checked, mut retx, mut worst_tx, mut worst_rx) = (0, 0, 0f64, 0f64);
    let text = std::fs::read_to_string(&pairs_file).unwrap();
    for line in text.lines() {
        let p: Value = serde_json::from_str(line).unwrap();
        let (Some(sw), Some(stack)) = (stage(&p, "SND_SW"), stage(&p, "STACK_ENTRY")) else {
            continue;
        };
        let flow = p["flow"].as_str().unwrap();
        let tx = &p["tx_range"];
        let (ts, te) = (
            tx[0].as_u64().unwrap() as u32,
            tx[1].as_u64().unwrap() as u32,
        );
        let rx = &p["rx_range"];
        let (rs, re) = (
            rx[0].as_u64().unwrap() as u32,
            rx[1].as_u64().unwrap() as u32,
        );
        // The capture segment of those bytes nearest the stage; copies of
        // one range can leave microseconds apart (fast retransmits).
        let nearest = |segs: &[Segment], s: u32, e: u32, t: f64| -> Option<(usize, f64)> {
            segs.iter()
                .enumerate()
                .filter(|(_, g)| g.flow == flow && g.seq == s && g.end == e)
                .map(|(i, g)| (i, g.t_us - t))
                .min_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
        };
        let snd = side(p["sender"].as_str().unwrap());
        let rcv = side(p["receiver"].as_str().unwrap());
        let (i, dt) = nearest(&captured[snd], ts, te, sw)
            .unwrap_or_else(|| panic!("{line}: no sender segment {ts}..{te}"));
        let (j, dr) = nearest(&captured[rcv], rs, re, stack)
            .unwrap_or_else(|| panic!("{line}: no receiver segment {rs}..{re}"));
        assert!(
            dt.abs() <= WITNESS_SLACK_US,
            "{line}: sender segment {dt:.1} µs from SND_SW"
        );
        assert!(
            dr.abs() <= WITNESS_SLACK_US,
            "{line}: receiver segment {dr:.1} µs from STACK_ENTRY"
        );
        let (t_send, t_recv) = (captured[snd][i].t_us, captured[rcv][j].t_us);
        // On the captures' one clock the reception follows its send, and
        // comes before the next copy of those bytes left (one veth link
        // keeps order): it is this transmission's reception.
        assert!(
            t_send <= t_recv,
            "{line}: captured on the receiver before the sender"
        );
        let next_copy = captured[snd][i + 1..]
            .iter()
            .find(|g| g.flow == flow && g.seq == ts && g.end == te)
            .map(|g| g.t_us);
        assert!(
            next_copy.is_none_or(|n| t_recv <= n),
            "{line}: received at {t_recv} µs, after the next copy left at {next_copy:?}"
        );
        assert!(
            used.insert((snd, i)),
            "{line}: sender segment {:?} stands for two pairs",
            captured[snd][i]
        );
        worst_tx = worst_tx.max(dt.abs());
        worst_rx = worst_rx.max(dr.abs());
        checked += 1;
        retx += usize::from(p["retransmit"] == true);
    }
    eprintln!(
        "{checked} pairs witnessed ({retx} retransmissions); capture − stage at most {worst_tx:.0} µs (sender), {worst_rx:.0} µs (receiver)"
    );
    let matched: u64 = report["directions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            d["matched"].as_u64().unwrap() - d["matched_without_stack_entry"].as_u64().unwrap()
        })
        .sum();
    assert_eq!(
        checked as u64, matched,
        "every matched pair with both stages was checked"
    );
    assert!(
        checked > 200 && retx > 0,
        "{checked} pairs, {retx} retransmissions"
    );
}
