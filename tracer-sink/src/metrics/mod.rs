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

mod families;
mod figures;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;

use crate::stats::{LiveStats, Shared};

use families::{agents, ingest, live_outputs, output, process};
use figures::{Figures, Out};

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

#[cfg(test)]
mod tests {
    use super::*;
    use tracer_prom::process_cpu_seconds as cpu_seconds;
    use tracer_prom::Escaped;

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
