//! End to end with the real kernel and a real Prometheus server: the
//! agent traces a TCP flow and UDP datagrams to a closed port into files
//! (`--write`) and, in the same run, keeps its in-kernel histograms and
//! counters (`--metrics`), which Prometheus scrapes every second. What
//! PromQL answers must be what the per-event trace of the same run says:
//! per RX hook the same number of stamped skbs, a `histogram_quantile`
//! p99 within one log2 bucket of the trace's p99, and as many NO_SOCKET
//! drops as the drops probe recorded (and as datagrams were sent).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::sync::{PoisonError, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use tracer_codec::{Event, RxStage};
use tracer_e2e::bins::bin;
use tracer_e2e::netns::{in_netns, NetnsPair};
use tracer_e2e::pcap::read_dir;
use tracer_e2e::procs::Proc;
use tracer_e2e::scenario::{stop_json, tcp_flow};
use tracer_e2e::skip::{require_root, skip};

const PORT: u16 = 5437;
const CLOSED_PORT: u16 = 9;
const DATAGRAMS: usize = 40;
const METRICS: &str = "127.0.0.1:19431";
const PROMETHEUS: &str = "127.0.0.1:19090";

/// Held for reading by every test that runs an agent with metrics
/// programs, and for writing by the one that checks no metrics program
/// outlived a failed agent: the tests of this file run in parallel, so a
/// check of the system's programs would otherwise see the others'.
static METRICS_PROGRAMS: RwLock<()> = RwLock::new(());

fn loads_metrics_programs() -> RwLockReadGuard<'static, ()> {
    METRICS_PROGRAMS
        .read()
        .unwrap_or_else(PoisonError::into_inner)
}

/// The RX hooks: the trace's stage and the metric's `hook` label.
const HOOKS: [(RxStage, &str); 3] = [
    (RxStage::StackEntry, "netif_receive_skb"),
    (RxStage::TcpInput, "tcp_probe"),
    (RxStage::Copy, "skb_copy_datagram_iovec"),
];

/// `v` percent-encoded for a URL query.
fn url_encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// GET `path` from `addr` inside namespace `ns`: (status line, body).
fn http_get(ns: &str, addr: &'static str, path: String) -> (String, String) {
    in_netns(NetnsPair::path(ns), "e2e-http", move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
        (
            head.lines().next().unwrap_or("").to_owned(),
            body.to_owned(),
        )
    })
    .unwrap()
    .join()
    .unwrap()
}

/// One PromQL instant query: the value of each series, with its labels.
fn promql(ns: &str, query: &str) -> Vec<(serde_json::Value, f64)> {
    let (status, body) = http_get(
        ns,
        PROMETHEUS,
        format!("/api/v1/query?query={}", url_encode(query)),
    );
    assert!(status.contains("200"), "{query}: {status} {body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "success", "{query}: {body}");
    v["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let value = r["value"][1].as_str().unwrap().parse::<f64>().unwrap();
            (r["metric"].clone(), value)
        })
        .collect()
}

fn one(ns: &str, query: &str) -> f64 {
    let r = promql(ns, query);
    assert_eq!(r.len(), 1, "{query}: {r:?}");
    r[0].1
}

/// The recording and alerting rules docs/metrics.md documents.
fn rules_file() -> std::path::PathBuf {
    tracer_e2e::bins::repo_root().join("prometheus/nettrace-rules.yml")
}

/// Every `expr:` of the rules file.
fn rule_exprs() -> Vec<String> {
    std::fs::read_to_string(rules_file())
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("expr: "))
        .map(str::to_owned)
        .collect()
}

/// Prometheus, in namespace `ns`, scraping the agent every second.
fn start_prometheus(ns: &str, dir: &Path) -> Proc {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n\
             rule_files: ['{}']\n\
             scrape_configs:\n  - job_name: nettrace\n    static_configs:\n      - targets: ['{METRICS}']\n",
            rules_file().display()
        ),
    )
    .unwrap();
    let mut cmd = NetnsPair::exec(ns, Path::new("prometheus"));
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={PROMETHEUS}"));
    let mut p = Proc::spawn("prometheus", cmd);
    p.wait_stderr(
        "Server is ready to receive web requests",
        Duration::from_secs(60),
    );
    p
}

/// Wait until Prometheus has scraped the agent successfully `n` more times.
fn wait_scrapes(ns: &str, n: u32) {
    let count = |ns| {
        promql(ns, "count_over_time(up{job=\"nettrace\"}[10m])")
            .first()
            .map_or(0.0, |r| r.1)
    };
    let target = count(ns) + f64::from(n);
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(ns) < target {
        assert!(
            Instant::now() < deadline,
            "Prometheus did not scrape the agent"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(
        one(ns, "up{job=\"nettrace\"}"),
        1.0,
        "the last scrape failed"
    );
}

/// The log2 bucket (right-inclusive) of `v` ns, as the kernel counts it.
fn bucket(v: u64) -> u32 {
    (0..37).find(|k| v <= 1u64 << k).unwrap_or(37)
}

#[test]
fn prometheus_sees_the_latencies_and_drops_of_the_trace() {
    if !require_root() {
        return;
    }
    let _loads = loads_metrics_programs();
    let have_prometheus = Command::new("prometheus")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_prometheus {
        skip("prometheus_sees_the_latencies_and_drops_of_the_trace: no prometheus (apt-get install prometheus)");
        return;
    }
    let pair = NetnsPair::create("ntrpm", 230).expect("creating namespaces");
    let out = tempfile::tempdir().unwrap();
    let prom_dir = tempfile::tempdir().unwrap();
    let mut cmd = NetnsPair::exec(&pair.b, &bin("tracer-agent"));
    cmd.arg("--write")
        .arg(out.path())
        .args(["--probes", "rx,drops", "--hostname", "recv", "--json"])
        .args(["--metrics", METRICS, "--metrics-with", "rx,drops"])
        // Only the test's traffic, in the trace and in the metrics alike
        // (not Prometheus's scrapes, which reach the agent over loopback).
        .args(["--filter", &format!("port {PORT} or port {CLOSED_PORT}")]);
    let mut agent = Proc::spawn("tracer-agent --metrics", cmd);
    agent.wait_stderr("metrics attached", Duration::from_secs(30));
    let _prometheus = start_prometheus(&pair.b, prom_dir.path());
    wait_scrapes(&pair.b, 1);

    tcp_flow(&pair, PORT, 3000, 1400);
    let to = SocketAddr::from((pair.addr_b, CLOSED_PORT));
    in_netns(NetnsPair::path(&pair.a), "e2e-udp", move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        for i in 0..DATAGRAMS {
            s.send_to(&[i as u8; 64], to).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
    })
    .unwrap()
    .join()
    .unwrap();
    // Everything observed is in a scrape: two more after the traffic.
    std::thread::sleep(Duration::from_millis(300));
    wait_scrapes(&pair.b, 2);

    let mut prom = Vec::new();
    for (_, hook) in HOOKS {
        let count = one(
            &pair.b,
            &format!("nettrace_rx_latency_seconds_count{{hook=\"{hook}\"}}"),
        );
        let p99 = one(
            &pair.b,
            &format!(
                "histogram_quantile(0.99, nettrace_rx_latency_seconds_bucket{{hook=\"{hook}\"}})"
            ),
        );
        prom.push((count, p99));
    }
    let prom_drops = one(&pair.b, "nettrace_drops_total{reason=\"NO_SOCKET\"}");
    // The documented rules load and every expression runs on these series.
    let exprs = rule_exprs();
    assert!(exprs.len() >= 9, "{exprs:?}");
    for e in &exprs {
        promql(&pair.b, e);
    }
    let (status, body) = http_get(&pair.b, PROMETHEUS, "/api/v1/rules".into());
    assert!(status.contains("200"), "{status}");
    let rules: serde_json::Value = serde_json::from_str(&body).unwrap();
    let loaded: usize = rules["data"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["rules"].as_array().unwrap().len())
        .sum();
    assert_eq!(loaded, exprs.len(), "rules Prometheus loaded: {body}");
    // Evaluated every second (evaluation_interval): none failed.
    assert_eq!(
        body.matches("\"health\":\"ok\"").count(),
        loaded,
        "a rule is not healthy: {body}"
    );
    let p99 = promql(
        &pair.b,
        "histogram_quantile(0.99, sum by (hook, le) (nettrace_rx_latency_seconds_bucket))",
    );
    assert_eq!(p99.len(), HOOKS.len(), "{p99:?}");

    let fin = stop_json(&mut agent, libc::SIGINT);
    assert_eq!(fin["stats"]["ring_overruns"], 0, "{fin}");
    assert_eq!(fin["stats"]["bpf"]["ringbuf_lost"], 0, "{fin}");
    let trace = read_dir(out.path());
    let mut lat: Vec<Vec<u64>> = vec![Vec::new(); HOOKS.len()];
    let mut trace_drops = 0;
    for f in &trace.frames {
        match &f.event {
            Event::Rx(e) if e.rx_stamp_ns != 0 => {
                if let Some(i) = HOOKS.iter().position(|(s, _)| *s as u8 == e.stage) {
                    lat[i].push(e.global_ns.saturating_sub(e.rx_stamp_global_ns));
                }
            }
            Event::Drop(d) if d.reason_str() == "NO_SOCKET" && d.dport == CLOSED_PORT => {
                trace_drops += 1
            }
            _ => {}
        }
    }
    for (i, (_, hook)) in HOOKS.iter().enumerate() {
        let (count, p99) = prom[i];
        let v = &mut lat[i];
        v.sort_unstable();
        assert!(
            v.len() > 1000,
            "{hook}: only {} stamped events in the trace",
            v.len()
        );
        assert_eq!(
            count as usize,
            v.len(),
            "{hook}: Prometheus counted {count} skbs, the trace has {}",
            v.len()
        );
        // Nearest rank.
        let trace_p99 = v[(v.len() * 99).div_ceil(100) - 1];
        let prom_ns = (p99 * 1e9).ceil() as u64;
        let (bt, bp) = (bucket(trace_p99), bucket(prom_ns));
        eprintln!(
            "{hook}: {count} skbs, p99 trace {trace_p99} ns (bucket {bt}), PromQL {prom_ns} ns (bucket {bp})"
        );
        assert!(
            bt.abs_diff(bp) <= 1,
            "{hook}: PromQL p99 {prom_ns} ns is not within one bucket of the trace's {trace_p99} ns"
        );
    }
    assert_eq!(trace_drops, DATAGRAMS, "drops probe events");
    assert_eq!(
        prom_drops as usize, trace_drops,
        "NO_SOCKET drops in Prometheus"
    );
}

/// One sample of an OpenMetrics text: name, labels, value.
type Sample = (String, Vec<(String, String)>, f64);

/// The samples of an OpenMetrics text.
fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap();
                    (k.to_owned(), v.trim_matches('"').to_owned())
                })
                .collect();
            (name.to_owned(), labels, value.parse().unwrap())
        })
        .collect()
}

fn value_of(s: &[Sample], name: &str, label: (&str, &str)) -> Option<(f64, Vec<(String, String)>)> {
    s.iter()
        .find(|(n, l, _)| n == name && l.iter().any(|(k, v)| k == label.0 && v == label.1))
        .map(|(_, l, v)| (*v, l.clone()))
}

/// The sender's side, scraped directly: per TX stage step as many
/// observations as the tx probe's trace has skbs with both stages, a
/// reset counted as the tcp probe recorded it, every series labelled with
/// the namespace (`--metrics-by netns`), and what the program could not
/// observe counted, zero here.
#[test]
fn tx_stage_histograms_and_tcp_counters_match_the_trace() {
    if !require_root() {
        return;
    }
    let _loads = loads_metrics_programs();
    let pair = NetnsPair::create("ntrpt", 229).expect("creating namespaces");
    let out = tempfile::tempdir().unwrap();
    let mut cmd = NetnsPair::exec(&pair.a, &bin("tracer-agent"));
    cmd.arg("--write")
        .arg(out.path())
        .args(["--probes", "tx,tcp", "--hostname", "send", "--json"])
        .args(["--metrics", METRICS, "--metrics-with", "tx,tcp"])
        .args(["--metrics-by", "netns"])
        // Not the scrape's own connection, whose response is sent after
        // the maps were read for it.
        .args(["--filter", &format!("port {PORT} or port {CLOSED_PORT}")]);
    let mut agent = Proc::spawn("tracer-agent --metrics", cmd);
    agent.wait_stderr("metrics attached", Duration::from_secs(30));
    tcp_flow(&pair, PORT, 2000, 1400);
    // A connection refused: b answers the SYN with a reset.
    let closed = SocketAddr::from((pair.addr_b, CLOSED_PORT));
    in_netns(NetnsPair::path(&pair.a), "e2e-rst", move || {
        assert!(TcpStream::connect_timeout(&closed, Duration::from_secs(2)).is_err());
    })
    .unwrap()
    .join()
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let (status, body) = http_get(&pair.a, METRICS, "/metrics".into());
    assert!(status.contains("200"), "{status}");
    let fin = stop_json(&mut agent, libc::SIGINT);
    assert_eq!(fin["stats"]["ring_overruns"], 0, "{fin}");
    let s = samples(&body);
    let netns = std::fs::metadata(NetnsPair::path(&pair.a))
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .unwrap()
        .to_string();

    // The trace's skbs by (socket, tskey): which stages each one had.
    let trace = read_dir(out.path());
    let mut skbs: std::collections::HashMap<(u64, u32), [bool; 5]> = Default::default();
    let mut resets = 0;
    for f in &trace.frames {
        match &f.event {
            Event::Tx(e) if (e.stage as usize) < 5 => {
                skbs.entry((e.cookie, e.tskey)).or_default()[e.stage as usize] = true
            }
            Event::Tcp(t) if t.anomaly == tracer_codec::TcpAnomaly::ResetReceived as u8 => {
                resets += 1
            }
            _ => {}
        }
    }
    let with = |a: usize, b: usize| skbs.values().filter(|s| s[a] && s[b]).count();
    for (stage, a, b) in [
        ("sendmsg_to_sched", 0, 1),
        ("sched_to_snd_sw", 1, 2),
        ("snd_sw_to_ack", 2, 4),
    ] {
        let (count, labels) = value_of(
            &s,
            "nettrace_tx_stage_latency_seconds_count",
            ("stage", stage),
        )
        .unwrap_or_else(|| panic!("no {stage} histogram in\n{body}"));
        assert!(
            labels.contains(&("netns".into(), netns.clone())),
            "{stage}: {labels:?}, want netns {netns}"
        );
        let want = with(a, b);
        assert!(want >= 1000, "{stage}: {want} skbs in the trace");
        assert_eq!(
            count as usize, want,
            "{stage}: observations vs the trace's skbs"
        );
    }
    assert_eq!(resets, 1, "the tcp probe's RESET_RECEIVED events");
    let (got, _) = value_of(&s, "nettrace_tcp_resets_total", ("direction", "received"))
        .unwrap_or_else(|| panic!("no reset counter in\n{body}"));
    assert_eq!(got as usize, resets);
    for (name, labels, v) in &s {
        if name == "nettrace_metrics_unobserved_total" {
            assert_eq!(*v, 0.0, "{labels:?}");
        }
    }
}

fn agent(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(bin("tracer-agent"))
        .args(args)
        .output()
        .expect("running tracer-agent");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Bad metrics options are refused with a message that says what to do,
/// and a taken address stops the agent before anything stays attached.
#[test]
fn agent_metrics_options_are_checked() {
    let (code, err) = agent(&["--metrics", "127.0.0.1:9431", "--metrics-with", "rx,bogus"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("\"bogus\"") && err.contains("rx, tx, drops, tcp, cpu"),
        "{err}"
    );
    let (code, err) = agent(&["--metrics", "127.0.0.1:9431", "--metrics-by", "cgroup"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("netns") && err.contains("iface"), "{err}");
    let (code, err) = agent(&["--metrics", "127.0.0.1:0"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("port 0"), "{err}");
    let (code, err) = agent(&["--sink", "127.0.0.1:9", "--metrics-max-series", "8"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--metrics-max-series applies to --metrics"),
        "{err}"
    );
    if !require_root() {
        return;
    }
    let _alone = METRICS_PROGRAMS
        .write()
        .unwrap_or_else(PoisonError::into_inner);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, err) = agent(&["--metrics", &addr, "--metrics-with", "drops"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("listening for Prometheus scrapes on {addr}")),
        "{err}"
    );
    // The kernel frees a tracing program once its link is gone, and a
    // raw tracepoint link is freed after an RCU grace period, not at the
    // close of the last descriptor: for some milliseconds after the agent
    // exits (15 ms here) bpftool still lists its programs. A program that
    // stays (pinned, or held by something else) is still there after the
    // grace period, which takes far less than the deadline.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let progs = Command::new("bpftool")
            .args(["prog", "show"])
            .output()
            .unwrap();
        let progs = String::from_utf8_lossy(&progs.stdout);
        if !progs.contains("metrics_kfree_s") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a metrics program stayed loaded: {progs}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Metrics alone (no trace), labelled by interface and namespace: the
/// loopback traffic of a TCP connection shows as `iface="lo"` in this
/// namespace, at every RX hook.
#[test]
fn metrics_alone_label_by_interface_and_namespace() {
    if !require_root() {
        return;
    }
    let _loads = loads_metrics_programs();
    let pair = NetnsPair::create("ntrpl", 228).expect("creating namespaces");
    let mut cmd = NetnsPair::exec(&pair.a, &bin("tracer-agent"));
    cmd.args(["--metrics", METRICS, "--metrics-with", "rx"])
        .args(["--metrics-by", "netns,iface", "--hostname", "alone"]);
    let mut agent = Proc::spawn("tracer-agent --metrics", cmd);
    agent.wait_stderr("metrics attached", Duration::from_secs(30));
    in_netns(NetnsPair::path(&pair.a), "e2e-lo", move || {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let mut buf = [0u8; 1000];
        for _ in 0..200 {
            c.write_all(&buf).unwrap();
            s.read_exact(&mut buf).unwrap();
        }
    })
    .unwrap()
    .join()
    .unwrap();
    let (status, body) = http_get(&pair.a, METRICS, "/metrics".into());
    assert!(status.contains("200"), "{status}");
    let (st, _) = agent.stop(libc::SIGINT, Duration::from_secs(10));
    assert!(st.success(), "{:?}", agent.stderr);
    let netns = std::fs::metadata(NetnsPair::path(&pair.a))
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .unwrap()
        .to_string();
    let s = samples(&body);
    for (_, hook) in HOOKS {
        let (count, labels) = value_of(&s, "nettrace_rx_latency_seconds_count", ("hook", hook))
            .unwrap_or_else(|| panic!("no {hook} series in\n{body}"));
        assert!(count >= 200.0, "{hook}: {count}");
        for want in [("iface", "lo"), ("netns", netns.as_str())] {
            assert!(
                labels.contains(&(want.0.to_owned(), want.1.to_owned())),
                "{hook}: {labels:?} lacks {want:?}"
            );
        }
    }
    assert!(
        body.contains("nettrace_agent_info{host=\"alone\""),
        "{body}"
    );
    assert!(
        !body.contains("nettrace_agent_events_total"),
        "no trace, no trace events: {body}"
    );
}

/// The CPU accounting beside a trace: the scrape shows NET_RX and socket
/// time charged during a TCP flow; the trace holds one CPU event per CPU
/// per interval whose sums reach at least what the last scrape showed
/// (the trace's last interval ends after it), every interval within its
/// own span; and nettrace-match sums the same events into its report.
#[test]
fn network_cpu_time_in_metrics_and_trace() {
    if !require_root() {
        return;
    }
    let _loads = loads_metrics_programs();
    let pair = NetnsPair::create("ntrpc", 227).expect("creating namespaces");
    let out = tempfile::tempdir().unwrap();
    let mut cmd = NetnsPair::exec(&pair.b, &bin("tracer-agent"));
    cmd.arg("--write")
        .arg(out.path())
        .args(["--probes", "drops", "--hostname", "cpuhost", "--json"])
        .args(["--metrics", METRICS, "--metrics-with", "cpu"]);
    let mut agent = Proc::spawn("tracer-agent --metrics", cmd);
    agent.wait_stderr("metrics attached", Duration::from_secs(30));
    tcp_flow(&pair, PORT, 3000, 1400);
    std::thread::sleep(Duration::from_millis(1200));
    let (status, body) = http_get(&pair.b, METRICS, "/metrics".into());
    assert!(status.contains("200"), "{status}");
    let fin = stop_json(&mut agent, libc::SIGINT);
    let s = samples(&body);
    let scraped = |cat: &str| -> f64 {
        s.iter()
            .filter(|(n, l, _)| {
                n == "nettrace_network_cpu_seconds_total"
                    && l.contains(&("category".into(), cat.into()))
            })
            .map(|(_, _, v)| v)
            .sum()
    };
    for cat in ["net_rx", "sock_send", "sock_recv"] {
        assert!(
            scraped(cat) > 0.0,
            "{cat}: nothing charged during the flow:\n{body}"
        );
    }

    let trace = read_dir(out.path());
    let cpus: Vec<&tracer_codec::CpuEvent> = trace
        .frames
        .iter()
        .filter_map(|f| match &f.event {
            Event::Cpu(c) => Some(c),
            _ => None,
        })
        .collect();
    assert!(cpus.len() >= 4, "{} CPU events: {fin}", cpus.len());
    assert_eq!(
        fin["stats"]["cpu_events"].as_u64(),
        Some(cpus.len() as u64),
        "{fin}"
    );
    let mut sums = [0u64; 4];
    let mut last_mono: std::collections::HashMap<u32, u64> = Default::default();
    for c in &cpus {
        let charged = c.net_rx_ns + c.net_tx_ns + c.sock_send_ns + c.sock_recv_ns;
        assert!(
            charged <= c.interval_ns,
            "more than the interval charged: {c:?}"
        );
        if let Some(prev) = last_mono.insert(c.cpu, c.mono_ns) {
            assert!(c.mono_ns > prev, "CPU {} events out of order", c.cpu);
        }
        for (s, v) in
            sums.iter_mut()
                .zip([c.net_rx_ns, c.net_tx_ns, c.sock_send_ns, c.sock_recv_ns])
        {
            *s += v;
        }
    }
    for (i, cat) in ["net_rx", "net_tx", "sock_send", "sock_recv"]
        .iter()
        .enumerate()
    {
        let scraped_ns = (scraped(cat) * 1e9).round() as u64;
        assert!(
            sums[i] >= scraped_ns,
            "{cat}: the trace's {} ns < the scrape's {scraped_ns} ns",
            sums[i]
        );
    }

    let report = Command::new(bin("nettrace-match"))
        .arg("--json")
        .args(trace.files.iter())
        .output()
        .unwrap();
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    let host = v["cpu_cost"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["host"] == "cpuhost")
        .unwrap_or_else(|| panic!("no cpu_cost for cpuhost: {}", v["cpu_cost"]));
    assert_eq!(
        host["all"]["net_rx"]["ns"].as_u64(),
        Some(sums[0]),
        "{host}"
    );
    assert_eq!(
        host["all"]["sock_recv"]["ns"].as_u64(),
        Some(sums[3]),
        "{host}"
    );
}
