//! Two hosts whose clocks really differ: two agents in two namespaces of one
//! kernel, each on its own simulated oscillator (`--simulate-oscillator`:
//! +3 ms / +50 ppm and -2 ms / -30 ppm), one sink, a TCP flow between them.
//! Every raw stamp the agents see and send is their oscillator's reading;
//! each agent's `--oscillator-truth` log keeps the true stamp of each.
//!
//! With `--clock sink` the exchange and the servo must learn each
//! oscillator: the events' global stamps must agree with the truth (the
//! true CLOCK_MONOTONIC instant on this kernel's CLOCK_TAI, which the sink
//! follows). With `--clock system` the same run must be off by each
//! oscillator's error, so the test fails if the distortion were a no-op or
//! cancelled before the servo.
//!
//! `bench/clock-e2e.sh` runs the ignored `residual_bench` test with longer
//! traffic, wander, noise and iperf3 load, configured by `E2E_OSC_*`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clocksync::{measure_offset, ClockId};
use tracer_codec::{ClockEvent, ClockState, Event};
use tracer_e2e::bins::bin;
use tracer_e2e::netns::NetnsPair;
use tracer_e2e::pcap::{read_dir, Trace};
use tracer_e2e::procs::Proc;
use tracer_e2e::scenario::{spawn_sink, stop_json, tcp_flow, SINK_PORT};
use tracer_e2e::skip::require_root;

/// Host A's oscillator (the sender, namespace a).
const OSC_A: &str = "3000000,50";
/// Host B's oscillator (the receiver, namespace b, beside the sink).
const OSC_B: &str = "-2000000,-30";

/// One agent's part of a run.
struct Host {
    name: &'static str,
    /// Its oscillator, as passed.
    osc: String,
    /// Its truth log.
    truth: PathBuf,
}

/// What one run left behind.
struct Run {
    trace: Trace,
    hosts: [Host; 2],
    /// This kernel's CLOCK_TAI - CLOCK_MONOTONIC and CLOCK_TAI -
    /// CLOCK_REALTIME: the truth's axis (the sink follows CLOCK_TAI).
    tai_minus_mono_ns: i64,
    tai_minus_rt_ns: i64,
    _dir: tempfile::TempDir,
}

/// How a run is made.
struct Setup<'a> {
    tag: &'a str,
    subnet: u8,
    clock: &'a str,
    osc: [String; 2],
    interval: &'a str,
    flow_port: u16,
    chunks: usize,
    /// iperf3 at full speed from a to b on this port during the flow.
    load_port: Option<u16>,
    /// Wait this long after both clocks locked before the flow starts.
    settle: Duration,
}

fn spawn_agent(pair: &NetnsPair, ns: &str, host: &Host, s: &Setup<'_>) -> Proc {
    let mut cmd = NetnsPair::exec(ns, &bin("tracer-agent"));
    let filter = format!("port {}", s.flow_port);
    cmd.args(["--sink", &format!("{}:{SINK_PORT}", pair.addr_b)])
        .args(["--probes", "tx,rx", "--hostname", host.name, "--json"])
        // Only the measured flow: not iperf3's, not the agents' datagrams.
        .args(["--filter", &filter])
        .args(["--clock", s.clock, "--clock-interval", s.interval])
        .args(["--simulate-oscillator", &host.osc])
        .arg("--oscillator-truth")
        .arg(&host.truth);
    let mut p = Proc::spawn(host.name, cmd);
    p.wait_stderr("rx probe attached", Duration::from_secs(40));
    p
}

fn traced_run(s: &Setup<'_>) -> Run {
    let pair = NetnsPair::create(s.tag, s.subnet).expect("creating namespaces");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("trace");
    std::fs::create_dir(&out).unwrap();
    let hosts = [
        Host {
            name: "host-a",
            osc: s.osc[0].clone(),
            truth: dir.path().join("a.truth"),
        },
        Host {
            name: "host-b",
            osc: s.osc[1].clone(),
            truth: dir.path().join("b.truth"),
        },
    ];
    let mut sink = spawn_sink(&pair, &out, &["--clock-interval", "0.2"]);
    let mut a = spawn_agent(&pair, &pair.a, &hosts[0], s);
    let mut b = spawn_agent(&pair, &pair.b, &hosts[1], s);
    for p in [&mut a, &mut b] {
        p.wait_stderr("state=LOCKED", Duration::from_secs(30));
    }
    // The load runs while the servos settle too, as on a busy host.
    let load = s.load_port.map(|port| iperf3_load(&pair, port));
    std::thread::sleep(s.settle);
    tcp_flow(&pair, s.flow_port, s.chunks, 2000);
    if let Some((mut server, mut client)) = load {
        // Their exit status does not matter, only that they are gone.
        client.stop(libc::SIGINT, Duration::from_secs(20));
        server.stop(libc::SIGKILL, Duration::from_secs(5));
    }
    std::thread::sleep(Duration::from_millis(300));
    for p in [&mut a, &mut b] {
        assert_eq!(stop_json(p, libc::SIGINT)["final"], true);
    }
    std::thread::sleep(Duration::from_millis(200));
    stop_json(&mut sink, libc::SIGTERM);
    let tai = measure_offset(ClockId::Monotonic, ClockId::Tai, 64).unwrap();
    let rt = measure_offset(ClockId::Realtime, ClockId::Tai, 64).unwrap();
    Run {
        trace: read_dir(&out),
        hosts,
        tai_minus_mono_ns: tai.offset_ns(),
        tai_minus_rt_ns: rt.offset_ns(),
        _dir: dir,
    }
}

/// iperf3 from a to b at full speed until stopped: (server, client).
fn iperf3_load(pair: &NetnsPair, port: u16) -> (Proc, Proc) {
    let iperf3 = Path::new("iperf3");
    let mut server = NetnsPair::exec(&pair.b, iperf3);
    server.args(["-s", "-1", "-p", &port.to_string()]);
    let server = Proc::spawn("iperf3 -s", server);
    std::thread::sleep(Duration::from_millis(300));
    let mut client = NetnsPair::exec(&pair.a, iperf3);
    client.args(["-c", &pair.addr_b.to_string(), "-p", &port.to_string()]);
    client.args(["-t", "3600"]);
    let client = Proc::spawn("iperf3 -c", client);
    std::thread::sleep(Duration::from_millis(500));
    (server, client)
}

/// A truth log: local stamp -> true stamp, for `m` (CLOCK_MONOTONIC) and
/// `r` (CLOCK_REALTIME) lines.
fn read_truth(path: &Path) -> (HashMap<u64, u64>, HashMap<u64, u64>) {
    let text = std::fs::read_to_string(path).expect("truth log");
    let (mut m, mut r) = (HashMap::new(), HashMap::new());
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let mut f = line.split(' ');
        let (kind, local, truth) = (f.next(), f.next(), f.next());
        let num = |s: Option<&str>| s.and_then(|s| s.parse::<u64>().ok()).expect(line);
        let map = if kind == Some("m") { &mut m } else { &mut r };
        map.entry(num(local)).or_insert(num(truth));
    }
    (m, r)
}

/// Per host: global stamp minus truth of every stamp of every event sent
/// while its clock was locked, and the oscillator's error (local - true)
/// at each.
struct Residuals {
    /// (global - truth, local - true) per stamp, ns.
    pairs: Vec<(i64, i64)>,
    /// Stamps on the wire that the truth log does not know.
    unknown: usize,
    /// Clock events of the host, in order.
    clocks: Vec<ClockEvent>,
}

fn residuals(run: &Run, host: &Host) -> Residuals {
    let (m, r) = read_truth(&host.truth);
    let locked = [ClockState::Locked as u8, ClockState::LockedStable as u8];
    let mut out = Residuals {
        pairs: Vec::new(),
        unknown: 0,
        clocks: Vec::new(),
    };
    let mut one =
        |map: &HashMap<u64, u64>, local: u64, global: u64, axis: i64| match map.get(&local) {
            Some(&truth) => out.pairs.push((
                global as i64 - (truth as i64 + axis),
                local as i64 - truth as i64,
            )),
            None => out.unknown += 1,
        };
    let mut clocks = Vec::new();
    for f in run.trace.frames.iter().filter(|f| f.host == host.name) {
        let is_locked = locked.contains(&f.clock_state);
        match &f.event {
            Event::Tx(e) if is_locked => one(&m, e.mono_ns, e.global_ns, run.tai_minus_mono_ns),
            Event::Rx(e) if is_locked => {
                one(&m, e.mono_ns, e.global_ns, run.tai_minus_mono_ns);
                if e.tstamp_type == 0 && e.rx_stamp_ns != 0 {
                    one(&r, e.rx_stamp_ns, e.rx_stamp_global_ns, run.tai_minus_rt_ns);
                }
            }
            Event::Clock(c) => clocks.push(*c),
            _ => {}
        }
    }
    if std::env::var_os("E2E_OSC_DEBUG").is_some() {
        for c in &clocks {
            eprintln!(
                "{} clock: mono {} offset {} freq {:.0} delay {} state {}",
                host.name, c.mono_ns, c.offset_ns, c.freq_ppb, c.delay_ns, c.state
            );
        }
        for (i, p) in out.pairs.iter().enumerate().step_by(500) {
            eprintln!("{} residual[{i}] {} err {}", host.name, p.0, p.1);
        }
    }
    out.clocks = clocks;
    out
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// |x| p50, p99, max of `xs` (stamps sent `when`), printed under `name`.
fn report(name: &str, when: &str, xs: impl Iterator<Item = i64>) -> (i64, i64, i64) {
    let mut abs: Vec<i64> = xs.map(i64::abs).collect();
    assert!(!abs.is_empty(), "{name}: nothing to measure");
    abs.sort_unstable();
    let r = (
        percentile(&abs, 0.5),
        percentile(&abs, 0.99),
        abs[abs.len() - 1],
    );
    println!(
        "{name}: {} stamps {when}, |residual| p50 {} ns, p99 {} ns, max {} ns",
        abs.len(),
        r.0,
        r.1,
        r.2
    );
    r
}

/// The default run: a 2000-write paced flow, 0.2 s clock updates.
fn default_setup<'a>(tag: &'a str, subnet: u8, clock: &'a str, port: u16) -> Setup<'a> {
    Setup {
        tag,
        subnet,
        clock,
        osc: [OSC_A.into(), OSC_B.into()],
        interval: "0.2",
        flow_port: port,
        chunks: 2000,
        load_port: None,
        settle: Duration::ZERO,
    }
}

/// Initial error and drift of a `offset_ns,drift_ppm` spec.
fn offset_drift(spec: &str) -> (i64, f64) {
    let mut f = spec.split(',');
    (
        f.next().unwrap().parse().unwrap(),
        f.next().unwrap().parse().unwrap(),
    )
}

#[test]
fn clock_sink_learns_two_simulated_oscillators() {
    if !require_root() {
        return;
    }
    let run = traced_run(&default_setup("ntrosc", 239, "sink", 5231));
    for host in &run.hosts {
        let res = residuals(&run, host);
        let (offset, drift_ppm) = offset_drift(&host.osc);
        assert_eq!(
            res.unknown, 0,
            "{}: stamps on the wire that its oscillator did not produce",
            host.name
        );
        assert!(
            res.pairs.len() > 1000,
            "{}: too few locked stamps: {}",
            host.name,
            res.pairs.len()
        );
        // The wire carries the oscillator's readings: off the truth by
        // the initial offset plus drift over a run of well under a minute.
        let span = (drift_ppm * 60.0 * 1e3) as i64; // ns of drift in 60 s
        for &(_, err) in &res.pairs {
            assert!(
                (err - offset).abs() <= span.abs() + 1,
                "{}: raw stamp off the truth by {err} ns, oscillator {}",
                host.name,
                host.osc
            );
        }
        // The servo learned the oscillator through the exchange: locked,
        // its frequency correcting the drift (the local clock runs
        // drift_ppm fast, so the map runs as much slow).
        let last = res.clocks.last().expect("clock events");
        assert!(res.clocks.iter().all(|c| c.source == 2), "source is sink");
        assert!(
            [ClockState::Locked as u8, ClockState::LockedStable as u8].contains(&last.state),
            "{}: last clock state {}",
            host.name,
            last.state
        );
        // Within 10 % (at least 2 ppm): phc2sys's fixed gains (kp 0.7,
        // ki 0.3) at a 0.2 s interval are still pulling the frequency in
        // after this short run; a servo that had not learned the drift
        // would sit near 0.
        let want_ppb = -drift_ppm * 1e3;
        let tolerance_ppb = (want_ppb.abs() * 0.1).max(2_000.0);
        assert!(
            (last.freq_ppb - want_ppb).abs() < tolerance_ppb,
            "{}: servo frequency {} ppb, the oscillator needs {want_ppb}",
            host.name,
            last.freq_ppb
        );
        // Bound: the exchange's own error over veth (kernel stamps: p99
        // < 0.5 µs even under load in bench/clock-exchange.sh), the sink's
        // tracking of CLOCK_TAI (tens of ns), and what the servo has left
        // of a 3 ms step and a 50 ppm frequency error after locking: PI
        // settles the phase within a few updates, but events right after
        // the lock still see some µs of that transient. 20 µs p99 keeps
        // room for a loaded CI machine; without the servo learning the
        // oscillator the residual would be >= 2 ms.
        let (_, p99, max) = report(
            &format!("--clock sink, {} on {}", host.name, host.osc),
            "after lock",
            res.pairs.iter().map(|p| p.0),
        );
        assert!(p99 < 20_000, "{}: p99 |residual| {p99} ns", host.name);
        assert!(max < 200_000, "{}: max |residual| {max} ns", host.name);
    }
}

#[test]
fn clock_system_is_off_by_the_simulated_oscillators() {
    if !require_root() {
        return;
    }
    let run = traced_run(&default_setup("ntrosy", 238, "system", 5232));
    for host in &run.hosts {
        let res = residuals(&run, host);
        let (offset, _) = offset_drift(&host.osc);
        assert_eq!(res.unknown, 0, "{}", host.name);
        assert!(res.pairs.len() > 1000, "{}: {}", host.name, res.pairs.len());
        assert!(res.clocks.iter().all(|c| c.source == 0), "source is system");
        report(
            &format!("--clock system, {} on {}", host.name, host.osc),
            "after lock",
            res.pairs.iter().map(|p| p.0),
        );
        // The system clock runs on the oscillator: every global stamp is
        // off by the oscillator's error at that instant (a few ms), give
        // or take the servo's tracking of CLOCK_TAI.
        for &(residual, err) in &res.pairs {
            assert!(
                (residual - err).abs() < 20_000,
                "{}: residual {residual} ns, oscillator error {err} ns",
                host.name
            );
            assert!(
                (residual - offset).abs() < offset.abs() / 2,
                "{}: residual {residual} ns, expected about {offset}",
                host.name
            );
        }
    }
}

/// Run by bench/clock-e2e.sh (environment: `E2E_OSC_CLOCK` sink|system,
/// `E2E_OSC_A`/`E2E_OSC_B` oscillator specs, `E2E_OSC_CHUNKS` paced writes
/// of 2000 bytes 0.5 ms apart, `E2E_OSC_INTERVAL` s between clock updates,
/// `E2E_OSC_SETTLE` s between lock and the flow, `E2E_OSC_LOAD=1` for
/// iperf3 at full speed on the same veth, from the lock to the flow's end).
#[test]
#[ignore = "benchmark: bench/clock-e2e.sh runs it"]
fn residual_bench() {
    if !require_root() {
        return;
    }
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.into());
    let clock = env("E2E_OSC_CLOCK", "sink");
    let interval = env("E2E_OSC_INTERVAL", "1");
    let load = env("E2E_OSC_LOAD", "0") == "1";
    let setup = Setup {
        tag: "ntrosb",
        subnet: 237,
        clock: &clock,
        osc: [env("E2E_OSC_A", OSC_A), env("E2E_OSC_B", OSC_B)],
        interval: &interval,
        flow_port: 5233,
        chunks: env("E2E_OSC_CHUNKS", "10000")
            .parse()
            .expect("E2E_OSC_CHUNKS"),
        load_port: load.then_some(5234),
        settle: Duration::from_secs_f64(
            env("E2E_OSC_SETTLE", "20").parse().expect("E2E_OSC_SETTLE"),
        ),
    };
    let run = traced_run(&setup);
    let label = if load { "load" } else { "idle" };
    let when = format!("from {}s after lock", setup.settle.as_secs_f64());
    let mut all = Vec::new();
    for host in &run.hosts {
        let res = residuals(&run, host);
        assert_eq!(res.unknown, 0, "{}", host.name);
        report(
            &format!("bench {label} --clock {clock} {} {}", host.name, host.osc),
            &when,
            res.pairs.iter().map(|p| p.0),
        );
        all.extend(res.pairs.iter().map(|p| p.0));
    }
    report(
        &format!("bench {label} --clock {clock} both hosts"),
        &when,
        all.into_iter(),
    );
}
