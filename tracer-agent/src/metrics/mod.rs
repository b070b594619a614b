//! The agent's metrics mode (`--metrics ADDR:PORT`): latency histograms
//! and counters kept in BPF maps by `ebpf/metrics.bpf.c` (nothing per
//! event reaches user space), the network stack's CPU cost, the clock's
//! state and the agent's own costs, served to Prometheus at `/metrics`
//! and read from their sources at each scrape.
//!
//! `kernel` loads and reads the BPF side, `hist` is the bucket rule,
//! `export` turns a reading into the exposition prometheus-client writes.

pub mod export;
pub mod hist;
pub mod kernel;
pub mod runtime;

use std::path::PathBuf;

pub use export::{AgentView, CpuReader, Exporter, Identity};
pub use kernel::{KernelConfig, KernelMetrics, KernelReading, MetricMaps};
pub use runtime::{MetricsConfig, MetricsRuntime};

/// Histograms by `enum nt_metric_hook` (metrics.h): which metric and the
/// value of its label.
pub const HOOKS: [HookName; 6] = [
    HookName::Rx("netif_receive_skb"),
    HookName::Rx("tcp_probe"),
    HookName::Rx("skb_copy_datagram_iovec"),
    HookName::Tx("sendmsg_to_sched"),
    HookName::Tx("sched_to_snd_sw"),
    HookName::Tx("snd_sw_to_ack"),
];

/// A histogram's metric and label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookName {
    /// `nettrace_rx_latency_seconds{hook=...}`.
    Rx(&'static str),
    /// `nettrace_tx_stage_latency_seconds{stage=...}`.
    Tx(&'static str),
}

/// Counted kinds by `enum nt_count_kind`.
pub const COUNT_KINDS: [&str; 6] = [
    "drop",
    "retransmit",
    "reset_sent",
    "reset_received",
    "rcvqueue_full",
    "mem_limit",
];

/// What the program could not observe, by `enum nt_metric_error`.
pub const ERRORS: [&str; 6] = [
    "no_rx_stamp",
    "future_rx_stamp",
    "series_full",
    "counters_full",
    "tx_tag_refused",
    "tx_inflight_full",
];

/// Which parts of the metrics program run (`--metrics-with`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricParts {
    /// RX latency histograms.
    pub rx: bool,
    /// TX stage histograms (BPF TX timestamping, a sockops program).
    pub tx: bool,
    /// Drops by reason.
    pub drops: bool,
    /// TCP retransmissions, resets, socket queue and memory events.
    pub tcp: bool,
    /// CPU the network stack costs (softirqs, socket calls).
    pub cpu: bool,
}

impl MetricParts {
    /// Every part.
    pub const ALL: MetricParts = MetricParts {
        rx: true,
        tx: true,
        drops: true,
        tcp: true,
        cpu: true,
    };
    /// The names `--metrics-with` takes.
    pub const NAMES: [&'static str; 5] = ["rx", "tx", "drops", "tcp", "cpu"];

    /// Parse a comma-separated list of [`Self::NAMES`].
    pub fn parse(list: &str) -> Result<Self, String> {
        let mut p = MetricParts {
            rx: false,
            tx: false,
            drops: false,
            tcp: false,
            cpu: false,
        };
        for name in list.split(',').map(str::trim) {
            match name {
                "rx" => p.rx = true,
                "tx" => p.tx = true,
                "drops" => p.drops = true,
                "tcp" => p.tcp = true,
                "cpu" => p.cpu = true,
                "all" => p = Self::ALL,
                other => {
                    return Err(format!(
                        "unknown metrics part {other:?}: known parts are {}, or all",
                        Self::NAMES.join(", ")
                    ))
                }
            }
        }
        Ok(p)
    }

    /// Whether any BPF hook of the metrics program is wanted.
    pub fn any_kernel(&self) -> bool {
        self.rx || self.tx || self.drops || self.tcp
    }
}

/// Why metrics could not be set up or read.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The BPF object did not open or load.
    #[error("loading the metrics BPF program")]
    Load(#[source] libbpf_rs::Error),
    /// A program the agent expects is not in the object.
    #[error("the metrics BPF object has no program {0}: the build is inconsistent")]
    MissingProgram(&'static str),
    /// A hook did not attach.
    #[error("attaching the metrics program {program}: does this kernel have its tracepoint? (--metrics-with chooses the parts)")]
    Attach {
        /// Program name.
        program: &'static str,
        /// libbpf's error.
        source: libbpf_rs::Error,
    },
    /// The cgroup of the TX program could not be opened.
    #[error("opening cgroup {path} for the TX stage histograms (pass --cgroup, or leave tx out of --metrics-with)")]
    Cgroup {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A map could not be read.
    #[error("reading the metrics map {map}")]
    Map {
        /// Map name.
        map: &'static str,
        /// libbpf's error.
        source: libbpf_rs::Error,
    },
    /// The `/metrics` endpoint could not start.
    #[error(transparent)]
    Serve(#[from] tracer_prom::ServeError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_parse_and_refuse_unknown_names() {
        let p = MetricParts::parse("rx, drops").unwrap();
        assert!(p.rx && p.drops && !p.tx && !p.tcp && !p.cpu);
        assert_eq!(MetricParts::parse("all").unwrap(), MetricParts::ALL);
        let e = MetricParts::parse("rx,bogus").unwrap_err();
        assert!(e.contains("\"bogus\"") && e.contains("cpu"), "{e}");
        assert!(!MetricParts::parse("cpu").unwrap().any_kernel());
    }
}
