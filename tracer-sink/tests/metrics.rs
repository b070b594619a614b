//! The sink's Prometheus metrics (`--metrics`), scraped over real HTTP
//! from a sink fed over real UDP: the figures equal what was sent and
//! what the sink's own final stats say (per reason, per agent, bytes on
//! disk), counters never fall between scrapes, every family has HELP and
//! TYPE, and promtool accepts the exposition. The binary binds the
//! address at start and refuses a taken one before it starts.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use tracer_prom::MetricsServer;
use tracer_sink::{LiveStreamConfig, SinkConfig, SinkMetrics, SinkStats};

/// A series: its name (with `_total` for counters) and its labels.
type Key = (String, BTreeMap<String, String>);

/// One scrape, parsed.
#[derive(Debug, Default)]
struct Scrape {
    /// Family name -> type, from the TYPE lines.
    types: BTreeMap<String, String>,
    /// Families with a HELP line.
    helped: BTreeSet<String>,
    samples: BTreeMap<Key, f64>,
    text: String,
}

impl Scrape {
    /// The value of `name` with exactly `labels`; panics if absent.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let l = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        *self
            .samples
            .get(&(name.to_owned(), l))
            .unwrap_or_else(|| panic!("no series {name}{labels:?} in\n{}", self.text))
    }

    fn u(&self, name: &str) -> u64 {
        self.get(name, &[]) as u64
    }

    /// `name` without labels, if served (the sink's families appear once
    /// its run has started; before, only the process is shown).
    fn try_u(&self, name: &str) -> Option<u64> {
        self.samples
            .get(&(name.to_owned(), BTreeMap::new()))
            .map(|v| *v as u64)
    }

    /// Every series of `name`.
    fn series<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Iterator<Item = (&'a BTreeMap<String, String>, f64)> + 'a {
        self.samples
            .iter()
            .filter(move |((n, _), _)| n == name)
            .map(|((_, l), v)| (l, *v))
    }

    /// Is `sample` (a series name) a counter's?
    fn is_counter(&self, sample: &str) -> bool {
        sample
            .strip_suffix("_total")
            .is_some_and(|f| self.types.get(f).map(String::as_str) == Some("counter"))
    }
}

/// A label value up to its closing quote, unescaped; the rest after it.
fn label_value(s: &str) -> (String, &str) {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return (out, &s[i + 1..]),
            '\\' => match chars.next() {
                Some((_, 'n')) => out.push('\n'),
                Some((_, c)) => out.push(c),
                None => panic!("dangling escape in {s}"),
            },
            c => out.push(c),
        }
    }
    panic!("unterminated label value in {s}")
}

/// Parse the OpenMetrics text the endpoint serves, checking its shape:
/// `# EOF` last, every sample in a family with HELP and TYPE, counters as
/// `<family>_total`, no series twice.
fn parse(text: &str) -> Scrape {
    let mut s = Scrape {
        text: text.to_owned(),
        ..Scrape::default()
    };
    assert!(text.ends_with("# EOF\n"), "no # EOF at the end:\n{text}");
    for line in text.lines() {
        if line == "# EOF" {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            assert!(s.helped.insert(name.to_owned()), "HELP twice: {line}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').unwrap();
            assert!(
                s.types.insert(name.to_owned(), ty.to_owned()).is_none(),
                "TYPE twice: {line}"
            );
            continue;
        }
        if line.starts_with("# UNIT ") {
            continue;
        }
        assert!(!line.starts_with('#'), "unexpected comment: {line}");
        let end = line.find(['{', ' ']).expect("a sample line");
        let name = &line[..end];
        let mut rest = &line[end..];
        let mut labels = BTreeMap::new();
        if let Some(mut r) = rest.strip_prefix('{') {
            loop {
                let (k, after) = r.split_once("=\"").expect("label=\"value\"");
                let (v, after) = label_value(after);
                assert!(labels.insert(k.to_owned(), v).is_none(), "{line}");
                r = match after.strip_prefix(',') {
                    Some(more) => more,
                    None => after.strip_prefix('}').expect("} after the labels"),
                };
                if !r.starts_with(' ') {
                    continue;
                }
                rest = r;
                break;
            }
        }
        let value: f64 = rest.trim().parse().unwrap_or_else(|_| panic!("{line}"));
        let family = if s.is_counter(name) {
            name.strip_suffix("_total").unwrap()
        } else {
            name
        };
        assert!(s.types.contains_key(family), "no TYPE for {line}");
        assert!(s.helped.contains(family), "no HELP for {line}");
        assert!(family.starts_with("nettrace_sink_"), "{line}");
        if s.types[family] == "counter" {
            assert!(name.ends_with("_total"), "a counter without _total: {line}");
        }
        assert!(
            s.samples.insert((name.to_owned(), labels), value).is_none(),
            "series twice: {line}"
        );
    }
    s
}

/// GET /metrics over a fresh connection; the body of a 200 answer.
fn get_metrics(addr: SocketAddr) -> String {
    let mut c = TcpStream::connect(addr).expect("connect to /metrics");
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: sink\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    c.read_to_string(&mut answer).expect("read the answer");
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(
        head.contains("Content-Type: application/openmetrics-text"),
        "{head}"
    );
    body.to_owned()
}

async fn scrape(addr: SocketAddr) -> Scrape {
    let text = tokio::task::spawn_blocking(move || get_metrics(addr))
        .await
        .unwrap();
    parse(&text)
}

/// No counter of `before` is lower in `after`, and none disappeared
/// (per-agent series stay while their agent is live).
fn assert_monotonic(before: &Scrape, after: &Scrape) {
    for ((name, labels), v) in &before.samples {
        if !before.is_counter(name) {
            continue;
        }
        let now = after
            .samples
            .get(&(name.clone(), labels.clone()))
            .unwrap_or_else(|| panic!("{name}{labels:?} disappeared"));
        assert!(now >= v, "{name}{labels:?} fell from {v} to {now}");
    }
}

/// Scrape until `done` holds (every scrape checked against the one
/// before); the last scrape.
async fn scrape_until(addr: SocketAddr, prev: &Scrape, done: impl Fn(&Scrape) -> bool) -> Scrape {
    let end = Instant::now() + Duration::from_secs(20);
    let mut last = scrape(addr).await;
    assert_monotonic(prev, &last);
    while !done(&last) {
        assert!(Instant::now() < end, "condition never met:\n{}", last.text);
        tokio::time::sleep(Duration::from_millis(20)).await;
        let next = scrape(addr).await;
        assert_monotonic(&last, &next);
        last = next;
    }
    last
}

/// A host name the exposition must escape.
const ODD_HOST: &str = "lab \"b\\2";

/// What the test sends: two agents (one with a gap, an agent-side loss
/// and a duplicate), two malformed datagrams. Returns the datagrams'
/// total length.
fn send_traffic(to: SocketAddr) -> u64 {
    let tx = sender();
    let mut a = SimAgent::new(0xA1, "alpha");
    let mut b = SimAgent::new(0xB2, ODD_HOST);
    let ev = |i: u64| tx_event(BASE_NS + i * 1000, i, 1);
    let a0 = a.datagram(&[ev(0), ev(1), ev(2)]);
    let _a1_lost = a.datagram(&[ev(3), ev(4)]);
    a.lost_events = 5;
    let a2 = a.datagram(&[ev(5), ev(6), ev(7), ev(8)]);
    let b0 = b.datagram(&[ev(10), ev(11)]);
    let b1 = b.datagram(&[ev(12)]);
    let mut bad_magic = b0.clone();
    bad_magic[0] ^= 0xff;
    let garbage = b"garbage".to_vec();
    let mut bytes = 0;
    for d in [&a0, &a2, &a0, &b0, &b1, &bad_magic, &garbage] {
        tx.send_to(d, to).unwrap();
        bytes += d.len() as u64;
    }
    bytes
}

/// The labels of an agent's series, as its stats show it.
fn agent_labels(a: &tracer_sink::AgentStats) -> Vec<(&str, &str)> {
    vec![
        ("host", a.host.as_str()),
        ("agent_id", a.agent_id.as_str()),
        ("boot_id", a.boot_id.as_str()),
        ("incarnation", a.incarnation.as_str()),
    ]
}

fn with<'a>(base: &[(&'a str, &'a str)], more: (&'a str, &'a str)) -> Vec<(&'a str, &'a str)> {
    let mut v = base.to_vec();
    v.push(more);
    v
}

/// Every figure the metrics and the stats both have, equal.
fn assert_matches_stats(m: &Scrape, stats: &SinkStats) {
    for (name, v) in [
        (
            "nettrace_sink_datagrams_received_total",
            stats.datagrams_received,
        ),
        ("nettrace_sink_received_bytes_total", stats.bytes_received),
        (
            "nettrace_sink_datagrams_accepted_total",
            stats.datagrams_accepted,
        ),
        ("nettrace_sink_events_accepted_total", stats.events_accepted),
        ("nettrace_sink_events_written_total", stats.events_written),
        (
            "nettrace_sink_events_write_lost_total",
            stats.sink_write_lost,
        ),
        (
            "nettrace_sink_events_out_of_order_total",
            stats.events_out_of_order,
        ),
        (
            "nettrace_sink_events_reorder_overflow_total",
            stats.reorder_overflow,
        ),
        ("nettrace_sink_reorder_events", stats.reorder_held),
        ("nettrace_sink_written_bytes_total", stats.bytes_written),
        (
            "nettrace_sink_written_uncompressed_bytes_total",
            stats.bytes_uncompressed,
        ),
        ("nettrace_sink_files_opened_total", stats.files),
        ("nettrace_sink_acks_sent_total", stats.acks_sent),
        ("nettrace_sink_datagrams_held", stats.datagrams_held),
        (
            "nettrace_sink_datagrams_tag_unchecked_total",
            stats.tags_unchecked,
        ),
        (
            "nettrace_sink_datagrams_hostname_sanitized_total",
            stats.hostnames_sanitized,
        ),
        ("nettrace_sink_agents", stats.agents_live),
        ("nettrace_sink_agents_admitted_total", stats.agents_seen),
        (
            "nettrace_sink_agents_expired_total",
            stats.agents_expired.agents,
        ),
    ] {
        assert_eq!(m.u(name), v, "{name}");
    }
    // Every reason of the stats, and only those, one series each.
    let reasons: BTreeMap<String, u64> = m
        .series("nettrace_sink_datagrams_rejected_total")
        .map(|(l, v)| (l["reason"].clone(), v as u64))
        .collect();
    assert_eq!(reasons, stats.rejects);
    // One series per agent (fewer than --stats-max-agents: all listed).
    assert_eq!(
        m.series("nettrace_sink_agent_events_accepted_total")
            .count(),
        stats.agents.len()
    );
    let mut reported_lost = 0;
    let mut missing = 0;
    for a in &stats.agents {
        let l = agent_labels(a);
        let get = |name: &str| m.get(name, &l) as u64;
        assert_eq!(
            get("nettrace_sink_agent_datagrams_accepted_total"),
            a.datagrams
        );
        assert_eq!(get("nettrace_sink_agent_events_accepted_total"), a.events);
        assert_eq!(
            get("nettrace_sink_agent_events_delivered_total"),
            a.delivered_events
        );
        assert_eq!(
            get("nettrace_sink_agent_events_write_lost_total"),
            a.write_lost
        );
        assert_eq!(
            get("nettrace_sink_agent_events_reported_lost_total"),
            a.agent_lost
        );
        assert_eq!(get("nettrace_sink_agent_events_missing"), a.event_gaps);
        assert_eq!(
            get("nettrace_sink_agent_datagrams_missing"),
            a.datagram_gaps
        );
        assert_eq!(
            get("nettrace_sink_agent_datagrams_late_total"),
            a.late_datagrams
        );
        assert_eq!(get("nettrace_sink_agent_resyncs_total"), a.resyncs);
        for (reason, v) in [
            ("duplicate", a.duplicates),
            ("stale", a.stale),
            ("seq_jump", a.seq_jumps),
        ] {
            let lr = with(&l, ("reason", reason));
            assert_eq!(
                m.get("nettrace_sink_agent_datagrams_rejected_total", &lr) as u64,
                v,
                "{reason}"
            );
        }
        reported_lost += a.agent_lost;
        missing += a.event_gaps;
    }
    assert_eq!(
        m.u("nettrace_sink_events_reported_lost_total"),
        reported_lost
    );
    assert_eq!(m.u("nettrace_sink_events_missing"), missing);
    let live = stats.live.as_ref().expect("a live stream is configured");
    for (name, v) in [
        ("nettrace_sink_live_stream_clients", live.clients_live),
        (
            "nettrace_sink_live_stream_clients_connected_total",
            live.clients_connected,
        ),
        (
            "nettrace_sink_live_stream_clients_cut_total",
            live.clients_cut,
        ),
        (
            "nettrace_sink_live_stream_events_sent_total",
            live.stream_frames_sent,
        ),
        (
            "nettrace_sink_live_stream_events_dropped_total",
            live.stream_frames_dropped,
        ),
    ] {
        assert_eq!(m.u(name), v, "{name}");
    }
    for (reason, v) in [
        ("key", live.clients_refused_key),
        ("full", live.clients_refused_full),
        ("handshake", live.clients_handshake_failed),
    ] {
        assert_eq!(
            m.get(
                "nettrace_sink_live_stream_clients_refused_total",
                &[("reason", reason)]
            ) as u64,
            v
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrapes_equal_what_was_sent_and_the_final_stats() {
    let metrics = SinkMetrics::new();
    let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), metrics.registry())
        .expect("start the /metrics endpoint");
    let maddr = server.local_addr();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let m = metrics.clone();
    let sink = TestSink::start(move |c| SinkConfig {
        metrics: Some(m),
        live_stream: Some(LiveStreamConfig::new(listener, None)),
        ..c
    })
    .await;

    let idle = scrape_until(maddr, &Scrape::default(), |s| {
        s.try_u("nettrace_sink_datagrams_received_total").is_some()
    })
    .await;
    assert_eq!(idle.u("nettrace_sink_datagrams_received_total"), 0);
    assert_eq!(idle.u("nettrace_sink_agents"), 0);
    assert_eq!(
        idle.series("nettrace_sink_agent_events_accepted_total")
            .count(),
        0
    );
    assert!(idle.get("nettrace_sink_cpu_seconds_total", &[]) > 0.0);
    // No live interface configured: no live-interface families.
    assert!(!idle.types.contains_key("nettrace_sink_live_frames_sent"));

    let sent_bytes = send_traffic(sink.addr);
    let mid = scrape_until(maddr, &idle, |s| {
        s.try_u("nettrace_sink_datagrams_received_total") == Some(7)
            && s.try_u("nettrace_sink_events_written_total") == Some(10)
    })
    .await;
    // What was sent, as sent.
    assert_eq!(mid.u("nettrace_sink_received_bytes_total"), sent_bytes);
    assert_eq!(mid.u("nettrace_sink_datagrams_accepted_total"), 4);
    assert_eq!(mid.u("nettrace_sink_events_accepted_total"), 3 + 4 + 2 + 1);
    let rejected = |r: &str| mid.get("nettrace_sink_datagrams_rejected_total", &[("reason", r)]);
    assert_eq!(rejected("duplicate"), 1.0);
    assert_eq!(rejected("bad_magic"), 1.0);
    assert_eq!(rejected("too_short"), 1.0);
    let total_rejected: f64 = mid
        .series("nettrace_sink_datagrams_rejected_total")
        .map(|(_, v)| v)
        .sum();
    assert_eq!(total_rejected, 3.0);
    assert_eq!(mid.u("nettrace_sink_agents"), 2);
    assert_eq!(mid.u("nettrace_sink_events_reported_lost_total"), 5);
    assert_eq!(mid.u("nettrace_sink_events_missing"), 2, "a1's two events");
    let alpha = |name: &str| {
        let (_, v) = mid
            .series(name)
            .find(|(l, _)| l["host"] == "alpha")
            .unwrap_or_else(|| panic!("no alpha series of {name}"));
        v as u64
    };
    assert_eq!(alpha("nettrace_sink_agent_events_accepted_total"), 7);
    assert_eq!(alpha("nettrace_sink_agent_events_missing"), 2);
    assert_eq!(alpha("nettrace_sink_agent_datagrams_missing"), 1);
    assert_eq!(alpha("nettrace_sink_agent_events_reported_lost_total"), 5);
    let odd: Vec<_> = mid
        .series("nettrace_sink_agent_events_accepted_total")
        .filter(|(l, _)| l["host"] == ODD_HOST)
        .collect();
    assert_eq!(odd.len(), 1, "the quoted host name, unescaped: {odd:?}");
    assert_eq!(odd[0].1, 3.0);
    assert_eq!(odd[0].0["agent_id"], format!("{:016x}", 0xB2));

    let (stats, dir) = sink.stop().await;
    // The sink has stopped: its final counters are still served.
    let last = scrape(maddr).await;
    assert_monotonic(&mid, &last);
    assert_matches_stats(&last, &stats);
    assert_eq!(stats.events_written, 10, "{stats:?}");
    assert_eq!(stats.bytes_received, sent_bytes);
    // Bytes written are the bytes on disk.
    let on_disk: u64 = files(&dir.path().join("out"))
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum();
    assert!(on_disk > 0);
    assert_eq!(last.u("nettrace_sink_written_bytes_total"), on_disk);
    assert_eq!(last.u("nettrace_sink_files_opened_total"), 1);
    assert_eq!(
        last.u("nettrace_sink_reorder_max_events"),
        SinkConfig::DEFAULT_REORDER_MAX_EVENTS as u64
    );
}

/// `promtool` from Debian's `prometheus` package, if installed.
fn promtool() -> Option<&'static str> {
    Command::new("promtool")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| "promtool")
}

fn run_promtool(args: &[&str], stdin: &str) -> std::process::Output {
    let mut c = Command::new("promtool")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    c.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    c.wait_with_output().unwrap()
}

/// The same families in the classic text format (0.0.4), which promtool
/// 2.42's `check metrics` reads: an OpenMetrics counter family `x` with
/// samples `x_total` is the classic family `x_total`, and the UNIT and
/// EOF lines are not part of it.
fn classic(text: &str, s: &Scrape) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|p| {
            let rest = line.strip_prefix(p)?;
            let (name, tail) = rest.split_once(' ')?;
            (s.types.get(name).map(String::as_str) == Some("counter"))
                .then(|| format!("{p}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exposition_passes_promtool() {
    if promtool().is_none() {
        tracer_e2e::skip::skip("promtool not installed (Debian package prometheus)");
        return;
    }
    let metrics = SinkMetrics::new();
    let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), metrics.registry())
        .expect("start the /metrics endpoint");
    let m = metrics.clone();
    let sink = TestSink::start(move |c| SinkConfig {
        metrics: Some(m),
        ..c
    })
    .await;
    send_traffic(sink.addr);
    let s = scrape_until(server.local_addr(), &Scrape::default(), |s| {
        s.try_u("nettrace_sink_datagrams_received_total") == Some(7)
    })
    .await;
    let _ = sink.stop().await;

    // promlint: naming, HELP, counters with _total, units.
    let lint = run_promtool(&["check", "metrics"], &classic(&s.text, &s));
    assert!(
        lint.status.success() && lint.stdout.is_empty() && lint.stderr.is_empty(),
        "promtool check metrics: {}{}\n{}",
        String::from_utf8_lossy(&lint.stdout),
        String::from_utf8_lossy(&lint.stderr),
        s.text
    );
    // The OpenMetrics parser itself (strict: escapes, EOF, sample names
    // of their family), through the backfill command, which wants a
    // timestamp on every sample.
    let dir = tempfile::tempdir().unwrap();
    let stamped: String = s
        .text
        .lines()
        .map(|l| {
            if l.starts_with('#') {
                format!("{l}\n")
            } else {
                format!("{l} 1700000000\n")
            }
        })
        .collect();
    let input = dir.path().join("scrape.om");
    std::fs::write(&input, stamped).unwrap();
    let out = Command::new("promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&input)
        .arg(dir.path().join("blocks"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool's OpenMetrics parser: {}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        s.text
    );
    // And a broken exposition fails there: the check can fail.
    std::fs::write(&input, "# TYPE x counter\nx_total{a=\"b\"c\"} 1 1\n# EOF\n").unwrap();
    let bad = Command::new("promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&input)
        .arg(dir.path().join("blocks2"))
        .output()
        .unwrap();
    assert!(!bad.status.success());
}

/// A TCP port free a moment ago on 127.0.0.1.
fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn the_binary_serves_its_counters_while_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("traces");
    let maddr: SocketAddr = format!("127.0.0.1:{}", free_tcp_port()).parse().unwrap();
    let sink = SinkBin::start(
        &out,
        &[
            "--json",
            "--stats-interval",
            "0",
            "--metrics",
            &maddr.to_string(),
        ],
        Stdio::piped(),
    );
    let to: SocketAddr = format!("127.0.0.1:{}", sink.port).parse().unwrap();
    let sent_bytes = send_traffic(to);
    let end = Instant::now() + Duration::from_secs(20);
    let m = loop {
        let m = parse(&get_metrics(maddr));
        if m.try_u("nettrace_sink_datagrams_received_total") == Some(7) {
            break m;
        }
        assert!(Instant::now() < end, "{}", m.text);
        std::thread::sleep(Duration::from_millis(20));
    };
    let (status, log, stdout) = sink.stop();
    assert!(status.success(), "{log}");
    assert!(
        log.contains(&format!("http://{maddr}/metrics")),
        "the log names the address: {log}"
    );
    let stats: SinkStats =
        serde_json::from_str(stdout.lines().last().expect("final stats")).unwrap();
    // Nothing arrived after the scrape: what it read of the ingest is final.
    assert_eq!(m.u("nettrace_sink_received_bytes_total"), sent_bytes);
    assert_eq!(
        m.u("nettrace_sink_received_bytes_total"),
        stats.bytes_received
    );
    assert_eq!(
        m.u("nettrace_sink_datagrams_accepted_total"),
        stats.datagrams_accepted
    );
    assert_eq!(
        m.u("nettrace_sink_events_accepted_total"),
        stats.events_accepted
    );
    let reasons: BTreeMap<String, u64> = m
        .series("nettrace_sink_datagrams_rejected_total")
        .map(|(l, v)| (l["reason"].clone(), v as u64))
        .collect();
    assert_eq!(reasons, stats.rejects);
    for a in &stats.agents {
        let l = agent_labels(a);
        assert_eq!(
            m.get("nettrace_sink_agent_events_accepted_total", &l) as u64,
            a.events
        );
        assert_eq!(
            m.get("nettrace_sink_agent_events_missing", &l) as u64,
            a.event_gaps
        );
    }
    assert!(m.get("nettrace_sink_cpu_seconds_total", &[]) > 0.0);
    let started = m.get("nettrace_sink_start_time_seconds", &[]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        started <= now && started > now - 120.0,
        "{started} vs {now}"
    );
}

#[test]
fn a_taken_metrics_address_stops_the_sink_at_start() {
    let holder = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = holder.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("traces");
    let run = Command::new(env!("CARGO_BIN_EXE_tracer-sink"))
        .args(["--listen", "127.0.0.1:0", "--metrics", &addr.to_string()])
        .arg("--output")
        .arg(&out)
        .output()
        .unwrap();
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("--metrics"), "{err}");
    assert!(err.contains(&addr.to_string()), "{err}");
    assert_eq!(
        err.to_lowercase().matches("address already in use").count(),
        1,
        "{err}"
    );
    assert!(!err.contains("started"), "{err}");
    assert!(!out.exists(), "nothing written before the refusal");
    assert!(run.stdout.is_empty());
}
