//! The `/metrics` exposition: a prometheus-client [`Collector`] that reads
//! the BPF maps, the CPU accounting and the agent's published state at
//! each scrape and writes them with HELP, TYPE and base units.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeMetric, NoLabelSet,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;
use tracer_codec::{ClockEvent, ClockSource, ClockState};
use tracer_prom::Escaped;

use super::kernel::{KernelReading, MetricMaps, Series};
use super::names::{HookName, COUNT_KINDS, ERRORS, HOOKS};
use crate::probes::drops::names::DropReasons;
use crate::stats::AgentStats;

/// What the agent's main loop publishes for the exporter.
#[derive(Debug, Clone, Default)]
pub struct AgentView {
    /// The agent's counters (when tracing).
    pub stats: Option<AgentStats>,
    /// The clock's last update.
    pub clock: Option<ClockEvent>,
    /// Clock updates made.
    pub clock_updates: u64,
}

/// Per CPU, nanoseconds per category (net_rx, net_tx, sock_send,
/// sock_recv) since the accounting started.
pub type CpuReader = Box<dyn Fn() -> Option<Vec<[u64; 4]>> + Send + Sync>;

/// The CPU categories' label values, in [`CpuReader`]'s order.
pub const CPU_CATEGORIES: [&str; 4] = ["net_rx", "net_tx", "sock_send", "sock_recv"];

/// Labels that say which agent this is.
#[derive(Debug, Clone)]
pub struct Identity {
    /// Host name in traces.
    pub host: String,
    /// Agent id, hex.
    pub agent_id: String,
}

/// The collector registered with the `/metrics` registry.
pub struct Exporter {
    maps: Option<MetricMaps>,
    reasons: DropReasons,
    own_netns: u32,
    identity: Identity,
    view: Arc<Mutex<AgentView>>,
    cpu: Option<CpuReader>,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl Exporter {
    /// An exporter of `maps` (None: no BPF part), naming drop reasons with
    /// `reasons` and interfaces of `own_netns` (the agent's namespace) by
    /// name.
    pub fn new(
        maps: Option<MetricMaps>,
        reasons: DropReasons,
        own_netns: u32,
        identity: Identity,
        view: Arc<Mutex<AgentView>>,
        cpu: Option<CpuReader>,
    ) -> Self {
        Exporter {
            maps,
            reasons,
            own_netns,
            identity,
            view,
            cpu,
        }
    }
}

type Labels = Vec<(&'static str, String)>;

/// `labels` with their values escaped for the exposition.
fn escaped(labels: Labels) -> Vec<(&'static str, Escaped<String>)> {
    labels.into_iter().map(|(k, v)| (k, Escaped(v))).collect()
}

/// An interface's label: its name when it is in the agent's namespace,
/// else its index.
fn iface_label(netns: u32, ifindex: u32, own_netns: u32) -> String {
    if netns == own_netns || netns == 0 {
        let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
        // SAFETY: buf has IF_NAMESIZE bytes, as if_indextoname requires.
        let p = unsafe { libc::if_indextoname(ifindex, buf.as_mut_ptr()) };
        if !p.is_null() {
            // SAFETY: on success buf holds a NUL-terminated name.
            let name = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
            return name.to_string_lossy().into_owned();
        }
    }
    ifindex.to_string()
}

impl Exporter {
    fn series_labels(&self, s: &Series, key: &'static str, value: &str) -> Labels {
        let mut l: Labels = vec![(key, value.to_owned())];
        if s.netns != 0 {
            l.push(("netns", s.netns.to_string()));
        }
        if s.ifindex != 0 {
            l.push(("iface", iface_label(s.netns, s.ifindex, self.own_netns)));
        }
        l
    }

    fn encode_kernel(
        &self,
        r: &KernelReading,
        enc: &mut DescriptorEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        for (metric, help, key, rx) in [
            (
                "nettrace_rx_latency",
                "Time from an skb's RX software stamp to a receive-path hook, in the kernel, log2 buckets",
                "hook",
                true,
            ),
            (
                "nettrace_tx_stage_latency",
                "Time between BPF TX timestamping stages of one skb, log2 buckets",
                "stage",
                false,
            ),
        ] {
            let mine: Vec<(&Series, &'static str)> = r
                .series
                .iter()
                .filter_map(|s| match HOOKS.get(s.hook as usize)? {
                    HookName::Rx(n) if rx => Some((s, *n)),
                    HookName::Tx(n) if !rx => Some((s, *n)),
                    _ => None,
                })
                .collect();
            if mine.is_empty() {
                continue;
            }
            let mut m =
                enc.encode_descriptor(metric, help, Some(&Unit::Seconds), MetricType::Histogram)?;
            for (s, name) in mine {
                let labels = escaped(self.series_labels(s, key, name));
                m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
                    s.hist.sum_ns as f64 * 1e-9,
                    s.hist.count(),
                    &s.hist.buckets_seconds(),
                    None,
                )?;
            }
        }

        // Counters, grouped into their metrics.
        let mut by_metric: BTreeMap<&'static str, Vec<(Labels, u64)>> = BTreeMap::new();
        for c in &r.counts {
            let Some(kind) = COUNT_KINDS.get(c.kind as usize) else {
                continue;
            };
            let (metric, mut labels): (&'static str, Labels) = match *kind {
                "drop" => (
                    "nettrace_drops",
                    vec![(
                        "reason",
                        self.reasons
                            .name(c.detail)
                            .map_or_else(|| c.detail.to_string(), str::to_owned),
                    )],
                ),
                "retransmit" => ("nettrace_tcp_retransmits", vec![]),
                "reset_sent" => ("nettrace_tcp_resets", vec![("direction", "sent".into())]),
                "reset_received" => (
                    "nettrace_tcp_resets",
                    vec![("direction", "received".into())],
                ),
                "rcvqueue_full" => ("nettrace_socket_rcvqueue_full", vec![]),
                _ => (
                    "nettrace_socket_memory_limit",
                    vec![(
                        "direction",
                        if c.detail == 1 { "recv" } else { "send" }.into(),
                    )],
                ),
            };
            if c.netns != 0 {
                labels.push(("netns", c.netns.to_string()));
            }
            by_metric.entry(metric).or_default().push((labels, c.value));
        }
        for (metric, rows) in by_metric {
            let help = match metric {
                "nettrace_drops" => "skbs the kernel dropped (skb:kfree_skb), by reason named from the kernel's BTF",
                "nettrace_tcp_retransmits" => "TCP segments retransmitted (tcp:tcp_retransmit_skb)",
                "nettrace_tcp_resets" => "TCP resets sent and received",
                "nettrace_socket_rcvqueue_full" => "skbs refused because a socket's receive queue was full (sock:sock_rcvqueue_full)",
                _ => "Socket memory limit hits (sock:sock_exceed_buf_limit), by direction",
            };
            let mut m = enc.encode_descriptor(metric, help, None, MetricType::Counter)?;
            // Without labels a metric has one row, written bare.
            if let [(labels, v)] = rows.as_slice() {
                if labels.is_empty() {
                    ConstCounter::new(*v).encode(m)?;
                    continue;
                }
            }
            for (labels, v) in rows {
                ConstCounter::new(v).encode(m.encode_family(&escaped(labels))?)?;
            }
        }

        let mut rows = [("", 0u64); ERRORS.len()];
        for (row, (name, v)) in rows.iter_mut().zip(ERRORS.iter().zip(&r.errors)) {
            *row = (name, *v);
        }
        counters_by(
            enc,
            "nettrace_metrics_unobserved",
            "What the metrics program could not observe or keep, by reason",
            "reason",
            rows,
        )
    }

    fn encode_cpu(
        &self,
        per_cpu: &[[u64; 4]],
        enc: &mut DescriptorEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        let mut m = enc.encode_descriptor(
            "nettrace_network_cpu",
            "CPU time the kernel spent moving packets, per CPU and category: NET_RX and NET_TX softirqs, socket send and receive calls (each charged only its own time)",
            Some(&Unit::Seconds),
            MetricType::Counter,
        )?;
        for (cpu, cats) in per_cpu.iter().enumerate() {
            for (cat, ns) in CPU_CATEGORIES.iter().zip(cats) {
                let labels = [("cpu", cpu.to_string()), ("category", (*cat).to_owned())];
                ConstCounter::new(*ns as f64 * 1e-9).encode(m.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }

    fn encode_clock(
        &self,
        v: &AgentView,
        enc: &mut DescriptorEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        let Some(c) = &v.clock else {
            return Ok(());
        };
        let state = ClockState::from_u8(c.state).map_or("?", ClockState::name);
        let source = ClockSource::from_u8(c.source).map_or("?", ClockSource::name);
        let mut m = enc.encode_descriptor(
            "nettrace_clock_state",
            "The global clock's servo state: 1 for the current one",
            None,
            MetricType::Gauge,
        )?;
        for (_, s) in ClockState::NAMES.entries {
            let labels = [("state", *s), ("source", source)];
            ConstGauge::new(i64::from(*s == state)).encode(m.encode_family(&labels)?)?;
        }
        for (name, help, unit, value) in [
            (
                "nettrace_clock_offset",
                "Global clock minus reference at the last update, before correcting",
                Some(Unit::Seconds),
                c.offset_ns as f64 * 1e-9,
            ),
            (
                "nettrace_clock_frequency_adjustment_ratio",
                "Frequency correction in force (parts per one; 1e-9 is 1 ppb)",
                None,
                c.freq_ppb * 1e-9,
            ),
            (
                "nettrace_clock_error_estimate",
                "The clock's error estimate after the last update",
                Some(Unit::Seconds),
                c.error_estimate_ns as f64 * 1e-9,
            ),
            (
                "nettrace_clock_delay",
                "Delay of the last clock sample (reference read or exchange path delay)",
                Some(Unit::Seconds),
                c.delay_ns as f64 * 1e-9,
            ),
        ] {
            let m = enc.encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?;
            ConstGauge::new(value).encode(m)?;
        }
        counter(
            enc,
            "nettrace_clock_updates",
            "Clock updates made by the servo",
            None,
            v.clock_updates,
        )
    }

    fn encode_agent(
        &self,
        v: &AgentView,
        enc: &mut DescriptorEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        let mut m = enc.encode_descriptor(
            "nettrace_agent",
            "This agent: its host name and id",
            None,
            MetricType::Info,
        )?;
        m.encode_info(&[
            ("host", Escaped(self.identity.host.as_str())),
            ("agent_id", Escaped(self.identity.agent_id.as_str())),
            ("version", Escaped(env!("CARGO_PKG_VERSION"))),
        ])?;
        counter(
            enc,
            "nettrace_agent_cpu",
            "CPU time of the agent process, user and system",
            Some(Unit::Seconds),
            tracer_prom::process_cpu_seconds().unwrap_or(0.0),
        )?;
        let Some(s) = &v.stats else {
            return Ok(());
        };
        counters_by(
            enc,
            "nettrace_agent_events",
            "Trace events read from the probes, by kind",
            "kind",
            [
                ("tx", s.tx_events()),
                ("rx", s.rx_events_by_stage.iter().sum()),
                ("drop", s.drop_events),
                ("tcp", s.tcp_events),
                ("clock", s.clock_events),
                ("cpu", s.cpu_events),
            ],
        )?;
        counters_by(
            enc,
            "nettrace_agent_events_lost",
            "Trace events lost, by where: overwritten in the ring, refused records, unsent datagrams, counted lost by the sink",
            "where",
            [
                ("ring", s.ring_overruns + s.bpf.ringbuf_lost),
                ("bad_record", s.bad_records),
                ("unsent", s.events_unsent),
                ("sink", s.events_sink_lost),
            ],
        )?;
        counter(
            enc,
            "nettrace_agent_events_delivered",
            "Trace events a sink confirmed written",
            None,
            s.events_delivered,
        )?;
        counter(
            enc,
            "nettrace_agent_datagrams",
            "Datagrams handed to the kernel",
            None,
            s.datagrams,
        )?;
        counter(
            enc,
            "nettrace_agent_sent",
            "UDP payload bytes handed to the kernel",
            Some(Unit::Bytes),
            s.bytes,
        )
    }
}

/// One unlabelled counter.
fn counter<N: EncodeCounterValue>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    value: N,
) -> Result<(), std::fmt::Error> {
    let m = enc.encode_descriptor(name, help, unit.as_ref(), MetricType::Counter)?;
    ConstCounter::new(value).encode(m)
}

/// A counter with one label, one series per `(label value, count)`.
fn counters_by<const N: usize>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    label: &str,
    rows: [(&str, u64); N],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (value, n) in rows {
        ConstCounter::new(n).encode(m.encode_family(&[(label, value)])?)?;
    }
    Ok(())
}

impl Collector for Exporter {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        if let Some(maps) = &self.maps {
            match maps.read() {
                Ok(r) => self.encode_kernel(&r, &mut enc)?,
                Err(e) => tracing::warn!(error = %e, "reading the metrics maps for a scrape"),
            }
        }
        if let Some(cpu) = &self.cpu {
            if let Some(per_cpu) = cpu() {
                self.encode_cpu(&per_cpu, &mut enc)?;
            }
        }
        let view = self
            .view
            .lock()
            .map(|v| v.clone())
            .unwrap_or_else(|p| p.into_inner().clone());
        self.encode_clock(&view, &mut enc)?;
        self.encode_agent(&view, &mut enc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::hist::Hist;
    use crate::metrics::kernel::{Count, Series};
    use prometheus_client::registry::Registry;

    /// Every family the agent can serve, with one value each.
    #[derive(Debug)]
    struct Everything(Exporter);

    impl Collector for Everything {
        fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
            let mut hist = Hist::default();
            hist.counts[3] = 2;
            hist.sum_ns = 9;
            let r = KernelReading {
                series: (0..HOOKS.len() as u32)
                    .map(|hook| Series {
                        hook,
                        netns: 7,
                        ifindex: 0,
                        hist: hist.clone(),
                    })
                    .collect(),
                counts: (0..COUNT_KINDS.len() as u32)
                    .map(|kind| Count {
                        kind,
                        detail: 1,
                        netns: 0,
                        value: 3,
                    })
                    .collect(),
                errors: vec![0; ERRORS.len()],
            };
            self.0.encode_kernel(&r, &mut enc)?;
            self.0.encode_cpu(&[[1, 2, 3, 4]], &mut enc)?;
            let view = AgentView {
                stats: Some(AgentStats::default()),
                clock: Some(ClockEvent {
                    mono_ns: 1,
                    global_ns: 2,
                    ref_ns: 2,
                    offset_ns: -3,
                    freq_ppb: 4.0,
                    delay_ns: 5,
                    uncertainty_ns: 6,
                    error_estimate_ns: 7,
                    source: 0,
                    state: 3,
                }),
                clock_updates: 1,
            };
            self.0.encode_clock(&view, &mut enc)?;
            self.0.encode_agent(&view, &mut enc)
        }
    }

    fn exporter(host: &str) -> Exporter {
        Exporter::new(
            None,
            DropReasons::default(),
            0,
            Identity {
                host: host.into(),
                agent_id: "00000000000000ff".into(),
            },
            Arc::new(Mutex::new(AgentView::default())),
            None,
        )
    }

    fn text(c: impl Collector) -> String {
        let mut r = Registry::default();
        r.register_collector(Box::new(c));
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, &r).unwrap();
        s
    }

    /// docs/metrics.md's agent table lists exactly the families the agent
    /// serves (the sink's `nettrace_sink_` rows are the sink's test).
    #[test]
    fn the_docs_table_lists_every_agent_metric() {
        let t = text(Everything(exporter("h")));
        let served: std::collections::BTreeSet<String> = t
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| match l.split_once(' ') {
                Some((name, "counter")) => format!("{name}_total"),
                Some((name, "info")) => format!("{name}_info"),
                Some((name, _)) => name.to_owned(),
                None => panic!("{l}"),
            })
            .collect();
        let doc = include_str!("../../../docs/metrics.md");
        let documented: std::collections::BTreeSet<String> = doc
            .lines()
            .filter(|l| l.starts_with("| `nettrace_") && !l.starts_with("| `nettrace_sink_"))
            .flat_map(|l| {
                let cell = l.split('|').nth(1).unwrap_or("");
                cell.split('`')
                    .skip(1)
                    .step_by(2)
                    .map(|n| n.split('{').next().unwrap_or(n).to_owned())
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(served, documented, "docs/metrics.md is stale");
    }

    #[test]
    fn label_values_are_escaped_and_help_and_units_present() {
        let t = text(Everything(exporter("we\"ird\\host")));
        assert!(
            t.contains("nettrace_agent_info{host=\"we\\\"ird\\\\host\""),
            "{t}"
        );
        assert!(
            t.contains("# UNIT nettrace_rx_latency_seconds seconds"),
            "{t}"
        );
        assert!(t.contains("nettrace_rx_latency_seconds_bucket{le=\"+Inf\",hook=\"netif_receive_skb\",netns=\"7\"} 2"), "{t}");
        assert!(t.contains("nettrace_rx_latency_seconds_bucket{le=\"8e-9\",hook=\"netif_receive_skb\",netns=\"7\"} 2"), "{t}");
        assert!(t.contains("nettrace_rx_latency_seconds_bucket{le=\"4e-9\",hook=\"netif_receive_skb\",netns=\"7\"} 0"), "{t}");
        assert!(
            t.contains("nettrace_network_cpu_seconds_total{cpu=\"0\",category=\"sock_recv\"} 4e-9"),
            "{t}"
        );
        for l in t.lines().filter(|l| l.starts_with("# TYPE ")) {
            let name = l.split(' ').nth(2).unwrap();
            assert!(t.contains(&format!("# HELP {name} ")), "{name} has no HELP");
        }
        assert!(t.ends_with("# EOF\n"));
    }
}
