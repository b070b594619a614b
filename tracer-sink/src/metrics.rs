//! The sink's Prometheus metrics (`tracer-sink --metrics ADDR:PORT`): a
//! prometheus-client [`Collector`] that reads the sink's own counters
//! when Prometheus scrapes, and never in between (docs/metrics.md lists
//! every metric).
//!
//! Nothing is added to the per-event path. The collector takes the stats
//! lock once per scrape, as the periodic stats do, copies the figures out
//! and encodes them after it has let go; the live outputs' counters are
//! atomics read without the lock. What the sink did not count before
//! (bytes received, events in the reorder buffer) is added once per
//! burst of datagrams and once per writer hand-over.
//!
//! Every counter only rises while the sink runs. Figures that can fall
//! are gauges: events missing from an agent's sequence (a late datagram
//! fills a gap), agents live, events in the reorder buffer. Per-agent
//! series are labelled with the agent's key as the stats show it (`host`,
//! `agent_id`, `boot_id`, `incarnation`), one series per live agent, so
//! their number is bounded by the agent table
//! ([`crate::agents::MAX_AGENTS`]). An agent that expires takes its
//! series with it (its figures stay in the sink-wide totals); one that
//! comes back after expiring is a new agent whose counters start from 0,
//! which Prometheus treats as a counter reset.

use std::fmt::{self, Write as _};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::stats::{LiveStats, Shared};
use tracer_prom::Escaped;

/// Where the collector reads: the sink run it was attached to.
#[derive(Debug)]
struct Attached {
    shared: Arc<Shared>,
    reorder_max_events: u64,
}

#[derive(Debug)]
struct Inner {
    run: Mutex<Option<Attached>>,
    /// Unix time (s) the metrics were set up: the sink's start.
    started_unix_s: f64,
}

/// The sink's metrics: register them in a registry (served by
/// `tracer_prom::MetricsServer`), put a clone in
/// [`SinkConfig::metrics`](crate::SinkConfig::metrics), and every scrape
/// reads that run's counters.
///
/// Before the run starts only the process figures are served; after it
/// ends, its final counters.
#[derive(Debug, Clone)]
pub struct SinkMetrics {
    inner: Arc<Inner>,
}

impl Default for SinkMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl SinkMetrics {
    /// Metrics with no run attached yet; `nettrace_sink_start_time_seconds`
    /// is now.
    pub fn new() -> Self {
        let started_unix_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        SinkMetrics {
            inner: Arc::new(Inner {
                run: Mutex::new(None),
                started_unix_s,
            }),
        }
    }

    /// Add the sink's collector to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(self.clone()));
    }

    /// A registry holding only the sink's collector.
    pub fn registry(&self) -> Registry {
        let mut r = Registry::default();
        self.register(&mut r);
        r
    }

    /// Read `shared` from now on (called by [`crate::run`]).
    pub(crate) fn attach(&self, shared: &Arc<Shared>, reorder_max_events: usize) {
        let mut run = self.inner.run.lock().unwrap_or_else(|p| p.into_inner());
        *run = Some(Attached {
            shared: Arc::clone(shared),
            reorder_max_events: reorder_max_events as u64,
        });
    }

    /// The attached run's figures, copied out under the stats lock.
    fn read(&self) -> Option<(Figures, Option<LiveStats>)> {
        let run = self.inner.run.lock().unwrap_or_else(|p| p.into_inner());
        let a = run.as_ref()?;
        let figures = Figures::read(&a.shared, a.reorder_max_events);
        Some((figures, a.shared.live_stats()))
    }
}

/// One live agent's figures.
#[derive(Debug)]
struct AgentFigures {
    host: String,
    agent_id: String,
    boot_id: String,
    incarnation: String,
    datagrams: u64,
    events: u64,
    delivered: u64,
    write_lost: u64,
    reported_lost: u64,
    missing_events: u64,
    missing_datagrams: u64,
    duplicates: u64,
    stale: u64,
    seq_jumps: u64,
    late: u64,
    resyncs: u64,
}

/// Everything a scrape shows of the run, copied under the lock.
#[derive(Debug, Default)]
struct Figures {
    datagrams_received: u64,
    datagrams_accepted: u64,
    bytes_received: u64,
    events_accepted: u64,
    rejects: Vec<(&'static str, u64)>,
    datagrams_held: u64,
    tags_unchecked: u64,
    hostnames_sanitized: u64,
    acks_sent: u64,
    events_written: u64,
    sink_write_lost: u64,
    events_out_of_order: u64,
    reorder_overflow: u64,
    reorder_held: u64,
    reorder_max_events: u64,
    bytes_written: u64,
    bytes_uncompressed: u64,
    files: u64,
    agents_live: u64,
    agents_admitted: u64,
    agents_expired: u64,
    /// Sink-wide (live and expired agents).
    reported_lost: u64,
    missing_events: u64,
    agents: Vec<AgentFigures>,
}

impl Figures {
    fn read(shared: &Shared, reorder_max_events: u64) -> Self {
        let s = shared.lock();
        let (rx, wr, table) = (&s.rx, &s.wr, &s.agents);
        let agents: Vec<AgentFigures> = table
            .agents
            .values()
            .map(|a| {
                let p = s.peers.get(a.index);
                AgentFigures {
                    host: a.host.clone(),
                    agent_id: format!("{:016x}", a.key.agent_id),
                    boot_id: a.key.boot_id.iter().fold(String::new(), |mut o, b| {
                        let _ = write!(o, "{b:02x}");
                        o
                    }),
                    incarnation: format!("{:016x}", a.key.incarnation),
                    datagrams: a.datagrams,
                    events: a.events,
                    delivered: p.map_or(0, |p| p.delivered_events),
                    write_lost: p.map_or(0, |p| p.write_lost),
                    reported_lost: a.agent_lost,
                    missing_events: a.seq.event_gaps,
                    missing_datagrams: a.seq.datagram_gaps,
                    duplicates: a.duplicates,
                    stale: a.stale,
                    seq_jumps: a.seq_jumps,
                    late: a.late,
                    resyncs: a.resyncs,
                }
            })
            .collect();
        Figures {
            datagrams_received: rx.datagrams_received,
            datagrams_accepted: rx.datagrams_accepted,
            bytes_received: rx.bytes_received,
            events_accepted: rx.events_accepted,
            rejects: rx.rejects.iter().map(|(r, n)| (*r, *n)).collect(),
            datagrams_held: s.fresh.as_ref().map_or(0, |f| f.held() as u64),
            tags_unchecked: rx.tags_unchecked,
            hostnames_sanitized: rx.hostnames_sanitized,
            acks_sent: rx.acks_sent,
            events_written: wr.events_written,
            sink_write_lost: wr.sink_write_lost,
            events_out_of_order: wr.events_out_of_order,
            reorder_overflow: wr.reorder_overflow,
            reorder_held: wr.reorder_held,
            reorder_max_events,
            bytes_written: wr.bytes_written,
            bytes_uncompressed: wr.bytes_uncompressed,
            files: wr.files,
            agents_live: table.agents.len() as u64,
            agents_admitted: table.admitted(),
            agents_expired: table.expired.agents,
            reported_lost: table.expired.agent_lost
                + agents.iter().map(|a| a.reported_lost).sum::<u64>(),
            missing_events: table.expired.event_gaps
                + agents.iter().map(|a| a.missing_events).sum::<u64>(),
            agents,
        }
    }
}

type Labels<'a> = [(&'static str, Escaped<&'a str>); 4];

impl AgentFigures {
    fn labels(&self) -> Labels<'_> {
        [
            ("host", Escaped(&self.host)),
            ("agent_id", Escaped(&self.agent_id)),
            ("boot_id", Escaped(&self.boot_id)),
            ("incarnation", Escaped(&self.incarnation)),
        ]
    }
}

/// Writes families with the `nettrace_sink_` prefix in their names.
struct Out<'a> {
    e: DescriptorEncoder<'a>,
}

impl Out<'_> {
    fn family(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<&Unit>,
        ty: MetricType,
        rows: impl FnOnce(MetricEncoder<'_>) -> fmt::Result,
    ) -> fmt::Result {
        let name = format!("nettrace_sink_{name}");
        rows(self.e.encode_descriptor(&name, help, unit, ty)?)
    }

    fn counter(&mut self, name: &str, help: &str, unit: Option<&Unit>, v: u64) -> fmt::Result {
        self.family(name, help, unit, MetricType::Counter, |m| {
            ConstCounter::new(v).encode(m)
        })
    }

    fn gauge(&mut self, name: &str, help: &str, unit: Option<&Unit>, v: u64) -> fmt::Result {
        self.family(name, help, unit, MetricType::Gauge, |m| {
            ConstGauge::new(v).encode(m)
        })
    }

    /// A counter with one series per `(labels, value)` row.
    fn counters<L: EncodeLabelSet>(
        &mut self,
        name: &str,
        help: &str,
        rows: impl IntoIterator<Item = (L, u64)>,
    ) -> fmt::Result {
        self.family(name, help, None, MetricType::Counter, |mut m| {
            for (l, v) in rows {
                ConstCounter::new(v).encode(m.encode_family(&l)?)?;
            }
            Ok(())
        })
    }

    /// A gauge with one series per `(labels, value)` row.
    fn gauges<L: EncodeLabelSet>(
        &mut self,
        name: &str,
        help: &str,
        rows: impl IntoIterator<Item = (L, u64)>,
    ) -> fmt::Result {
        self.family(name, help, None, MetricType::Gauge, |mut m| {
            for (l, v) in rows {
                ConstGauge::new(v).encode(m.encode_family(&l)?)?;
            }
            Ok(())
        })
    }
}

impl Collector for SinkMetrics {
    fn encode(&self, e: DescriptorEncoder) -> fmt::Result {
        let mut o = Out { e };
        process(&mut o, self.inner.started_unix_s)?;
        let Some((f, live)) = self.read() else {
            return Ok(());
        };
        ingest(&mut o, &f)?;
        output(&mut o, &f)?;
        agents(&mut o, &f)?;
        if let Some(l) = live {
            live_outputs(&mut o, &l)?;
        }
        Ok(())
    }
}

fn process(o: &mut Out<'_>, started_unix_s: f64) -> fmt::Result {
    let seconds = Unit::Seconds;
    if let Some(cpu) = cpu_seconds() {
        o.family(
            "cpu",
            "CPU time (user and system) of the process the sink runs in.",
            Some(&seconds),
            MetricType::Counter,
            |m| ConstCounter::new(cpu).encode(m),
        )?;
    }
    o.family(
        "start_time",
        "Unix time the sink started.",
        Some(&seconds),
        MetricType::Gauge,
        |m| ConstGauge::new(started_unix_s).encode(m),
    )?;
    if let Some(rss) = resident_bytes() {
        o.gauge(
            "resident_memory",
            "Resident memory of the process the sink runs in.",
            Some(&Unit::Bytes),
            rss,
        )?;
    }
    Ok(())
}

fn ingest(o: &mut Out<'_>, f: &Figures) -> fmt::Result {
    o.counter(
        "datagrams_received",
        "Datagrams read from the UDP socket, accepted or rejected.",
        None,
        f.datagrams_received,
    )?;
    o.counter(
        "received",
        "UDP payload bytes read from the socket, accepted or rejected.",
        Some(&Unit::Bytes),
        f.bytes_received,
    )?;
    o.counter(
        "datagrams_accepted",
        "Datagrams accepted: their events go to the file.",
        None,
        f.datagrams_accepted,
    )?;
    o.counters(
        "datagrams_rejected",
        "Datagrams rejected, by reason (the reasons of the stats' rejects; every one listed).",
        f.rejects.iter().map(|&(r, n)| ([("reason", r)], n)),
    )?;
    o.gauge(
        "datagrams_held",
        "Authenticated datagrams waiting for their agent to bind to this sink.",
        None,
        f.datagrams_held,
    )?;
    o.counter(
        "datagrams_tag_unchecked",
        "Accepted datagrams with a tag this sink could not check (it has no key).",
        None,
        f.tags_unchecked,
    )?;
    o.counter(
        "datagrams_hostname_sanitized",
        "Accepted datagrams whose host name held control characters (written with '?').",
        None,
        f.hostnames_sanitized,
    )?;
    o.counter(
        "events_accepted",
        "Events in accepted datagrams.",
        None,
        f.events_accepted,
    )?;
    o.counter(
        "acks_sent",
        "Acknowledgements sent to agents.",
        None,
        f.acks_sent,
    )?;
    o.gauge(
        "agents",
        "Agents live in the agent table.",
        None,
        f.agents_live,
    )?;
    o.counter(
        "agents_admitted",
        "Agents admitted since the sink started (live and expired).",
        None,
        f.agents_admitted,
    )?;
    o.counter(
        "agents_expired",
        "Agents that expired after sending nothing for the idle timeout.",
        None,
        f.agents_expired,
    )?;
    o.counter(
        "events_reported_lost",
        "Events the agents reported lost before sending (every agent, live and expired).",
        None,
        f.reported_lost,
    )?;
    o.gauge(
        "events_missing",
        "Events missing from the agents' sequences, net of late arrivals (every agent, live and expired).",
        None,
        f.missing_events,
    )
}

fn output(o: &mut Out<'_>, f: &Figures) -> fmt::Result {
    o.counter(
        "events_written",
        "Events committed to a trace file.",
        None,
        f.events_written,
    )?;
    o.counter(
        "events_write_lost",
        "Events accepted that the sink could not write (write error, full disk, no file open).",
        None,
        f.sink_write_lost,
    )?;
    o.counter(
        "events_out_of_order",
        "Events written after an event with a later timestamp (they arrived after the reorder window).",
        None,
        f.events_out_of_order,
    )?;
    o.counter(
        "events_reorder_overflow",
        "Events written early because the reorder buffer was full.",
        None,
        f.reorder_overflow,
    )?;
    o.gauge(
        "reorder_events",
        "Events waiting in the reorder buffer.",
        None,
        f.reorder_held,
    )?;
    o.gauge(
        "reorder_max_events",
        "Most events the reorder buffer holds before it writes early.",
        None,
        f.reorder_max_events,
    )?;
    o.counter(
        "written",
        "Bytes committed to trace files (compressed bytes on disk with zstd).",
        Some(&Unit::Bytes),
        f.bytes_written,
    )?;
    o.counter(
        "written_uncompressed",
        "The pcapng bytes of those files uncompressed.",
        Some(&Unit::Bytes),
        f.bytes_uncompressed,
    )?;
    o.counter("files_opened", "Trace files opened.", None, f.files)
}

fn agents(o: &mut Out<'_>, f: &Figures) -> fmt::Result {
    let a = &f.agents;
    o.counters(
        "agent_datagrams_accepted",
        "Datagrams accepted, per live agent.",
        a.iter().map(|a| (a.labels(), a.datagrams)),
    )?;
    o.counters(
        "agent_events_accepted",
        "Events accepted, per live agent.",
        a.iter().map(|a| (a.labels(), a.events)),
    )?;
    o.counters(
        "agent_events_delivered",
        "Events committed to a trace file, per live agent.",
        a.iter().map(|a| (a.labels(), a.delivered)),
    )?;
    o.counters(
        "agent_events_write_lost",
        "Events accepted that the sink could not write, per live agent.",
        a.iter().map(|a| (a.labels(), a.write_lost)),
    )?;
    o.counters(
        "agent_events_reported_lost",
        "Events the agent reported lost before sending (its cumulative lost_events), per live agent.",
        a.iter().map(|a| (a.labels(), a.reported_lost)),
    )?;
    o.gauges(
        "agent_events_missing",
        "Events missing from the agent's sequence (lost on the way), net of late arrivals, per live agent.",
        a.iter().map(|a| (a.labels(), a.missing_events)),
    )?;
    o.gauges(
        "agent_datagrams_missing",
        "Datagrams missing from the agent's sequence, net of late arrivals, per live agent.",
        a.iter().map(|a| (a.labels(), a.missing_datagrams)),
    )?;
    o.family(
        "agent_datagrams_rejected",
        "Datagrams of the agent rejected by its sequence tracking, by reason, per live agent.",
        None,
        MetricType::Counter,
        |mut m| {
            for a in &f.agents {
                let [host, id, boot, inc] = a.labels();
                for (reason, v) in [
                    ("duplicate", a.duplicates),
                    ("stale", a.stale),
                    ("seq_jump", a.seq_jumps),
                ] {
                    let l = [host, id, boot, inc, ("reason", Escaped(reason))];
                    ConstCounter::new(v).encode(m.encode_family(&l)?)?;
                }
            }
            Ok(())
        },
    )?;
    o.counters(
        "agent_datagrams_late",
        "Late datagrams that filled a gap of the agent's sequence (accepted), per live agent.",
        a.iter().map(|a| (a.labels(), a.late)),
    )?;
    o.counters(
        "agent_resyncs",
        "Times the sink followed the agent's sequence to a new position (the distance is not counted as loss), per live agent.",
        a.iter().map(|a| (a.labels(), a.resyncs)),
    )
}

fn live_outputs(o: &mut Out<'_>, l: &LiveStats) -> fmt::Result {
    if l.iface.is_some() {
        o.counter(
            "live_frames_sent",
            "Frames the kernel took on the live interface (--live-iface).",
            None,
            l.frames_sent,
        )?;
        o.counters(
            "live_frames_dropped",
            "Frames not shown on the live interface, by reason: queue (its writer was behind), kernel (no room), error (refused).",
            [
                ([("reason", "queue")], l.frames_dropped_queue),
                ([("reason", "kernel")], l.frames_dropped_kernel),
                ([("reason", "error")], l.frames_dropped_error),
            ],
        )?;
    }
    if l.stream_listen.is_some() {
        o.gauge(
            "live_stream_clients",
            "Live stream clients connected now (--live-listen).",
            None,
            l.clients_live,
        )?;
        o.counter(
            "live_stream_clients_connected",
            "Live stream clients accepted (the handshake passed).",
            None,
            l.clients_connected,
        )?;
        o.counters(
            "live_stream_clients_refused",
            "Live stream connections refused, by reason: key (wrong or missing), full (too many clients), handshake (failed or timed out).",
            [
                ([("reason", "key")], l.clients_refused_key),
                ([("reason", "full")], l.clients_refused_full),
                ([("reason", "handshake")], l.clients_handshake_failed),
            ],
        )?;
        o.counter(
            "live_stream_clients_cut",
            "Live stream clients cut loose because they read too slowly.",
            None,
            l.clients_cut,
        )?;
        o.counter(
            "live_stream_events_sent",
            "Events queued to live stream clients (one per event per client).",
            None,
            l.stream_frames_sent,
        )?;
        o.counter(
            "live_stream_events_dropped",
            "Events a live stream client missed because it was cut at them.",
            None,
            l.stream_frames_dropped,
        )?;
    }
    Ok(())
}

/// User plus system CPU time of this process, in seconds.
fn cpu_seconds() -> Option<f64> {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one rusage into memory we own and have
    // sized for it; RUSAGE_SELF needs nothing else.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: the struct was zeroed (a valid rusage: plain integers) and
    // getrusage succeeded, so it is initialised.
    let ru = unsafe { ru.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(secs(ru.ru_utime) + secs(ru.ru_stime))
}

/// Resident memory of this process (`VmRSS` of /proc/self/status), in bytes.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(m: &SinkMetrics) -> String {
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, &m.registry()).unwrap();
        s
    }

    #[test]
    fn label_values_are_escaped() {
        #[derive(Debug)]
        struct One;
        impl Collector for One {
            fn encode(&self, e: DescriptorEncoder) -> fmt::Result {
                let mut o = Out { e };
                o.counters("x", "X.", [([("host", Escaped("a\"b\\c\nd"))], 1)])
            }
        }
        let mut r = Registry::default();
        r.register_collector(Box::new(One));
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, &r).unwrap();
        assert!(
            s.contains("nettrace_sink_x_total{host=\"a\\\"b\\\\c\\nd\"} 1\n"),
            "{s}"
        );
    }

    /// What a collector of only `live_outputs(l)` writes.
    fn live_text(l: LiveStats) -> String {
        #[derive(Debug)]
        struct Live(LiveStats);
        impl Collector for Live {
            fn encode(&self, e: DescriptorEncoder) -> fmt::Result {
                live_outputs(&mut Out { e }, &self.0)
            }
        }
        let mut r = Registry::default();
        r.register_collector(Box::new(Live(l)));
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, &r).unwrap();
        s
    }

    #[test]
    fn live_interface_frames_are_shown_by_reason_when_it_is_on() {
        let s = live_text(LiveStats {
            iface: Some("nettrace0".into()),
            frames_sent: 5,
            frames_dropped: 6,
            frames_dropped_queue: 1,
            frames_dropped_kernel: 2,
            frames_dropped_error: 3,
            ..LiveStats::default()
        });
        for line in [
            "nettrace_sink_live_frames_sent_total 5\n",
            "nettrace_sink_live_frames_dropped_total{reason=\"queue\"} 1\n",
            "nettrace_sink_live_frames_dropped_total{reason=\"kernel\"} 2\n",
            "nettrace_sink_live_frames_dropped_total{reason=\"error\"} 3\n",
        ] {
            assert!(s.contains(line), "{line} in {s}");
        }
        assert!(!s.contains("live_stream"), "{s}");
        let off = live_text(LiveStats::default());
        assert_eq!(off, "# EOF\n");
    }

    #[test]
    fn without_a_run_only_the_process_is_shown() {
        let m = SinkMetrics::new();
        let s = scrape(&m);
        assert!(
            s.contains("# TYPE nettrace_sink_cpu_seconds counter"),
            "{s}"
        );
        assert!(s.contains("nettrace_sink_start_time_seconds "), "{s}");
        assert!(
            s.contains("# TYPE nettrace_sink_resident_memory_bytes gauge"),
            "{s}"
        );
        assert!(!s.contains("datagrams"), "{s}");
        let start: f64 = s
            .lines()
            .find_map(|l| l.strip_prefix("nettrace_sink_start_time_seconds "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(start > 1.7e9, "{start}");
    }

    /// Every family the sink can serve (a run with a live interface and a
    /// live stream) is in docs/metrics.md's table, and nothing else is.
    #[test]
    fn the_docs_table_lists_every_metric() {
        let shared = Arc::new(Shared::new(None, 32));
        shared.set_live(Arc::new(crate::stats::LiveCounters {
            iface: Some("nettrace0".into()),
            stream_listen: Some("127.0.0.1:7431".into()),
            ..Default::default()
        }));
        let m = SinkMetrics::new();
        m.attach(&shared, 10);
        let text = scrape(&m);
        let served: std::collections::BTreeSet<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| match l.split_once(' ') {
                Some((name, "counter")) => format!("{name}_total"),
                Some((name, _)) => name.to_owned(),
                None => panic!("{l}"),
            })
            .collect();
        let doc_path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md");
        let doc = std::fs::read_to_string(doc_path).unwrap();
        let documented: std::collections::BTreeSet<String> = doc
            .lines()
            .filter_map(|l| l.strip_prefix("| `nettrace_sink_"))
            .map(|l| format!("nettrace_sink_{}", l.split('`').next().unwrap()))
            .collect();
        assert_eq!(served, documented, "docs/metrics.md is stale");
        assert!(served.len() > 40, "{served:?}");
    }

    #[test]
    fn cpu_time_rises_with_work() {
        let before = cpu_seconds().unwrap();
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < std::time::Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        assert!(cpu_seconds().unwrap() > before);
    }
}
