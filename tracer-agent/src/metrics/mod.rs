//! The agent's metrics mode (`--metrics ADDR:PORT`): latency histograms
//! and counters kept in BPF maps by `ebpf/metrics.bpf.c` (nothing per
//! event reaches user space), the network stack's CPU cost, the clock's
//! state and the agent's own costs, served to Prometheus at `/metrics`
//! and read from their sources at each scrape.
//!
//! `kernel` loads and reads the BPF side, `hist` is the bucket rule,
//! `export` turns a reading into the exposition prometheus-client writes.

mod error;
pub mod export;
pub mod hist;
pub mod kernel;
pub mod names;
mod parts;
pub mod runtime;

pub use error::MetricsError;
pub use names::{HookName, COUNT_KINDS, ERRORS, HOOKS};
pub use parts::MetricParts;

pub use export::{AgentView, CpuReader, Exporter, Identity};
pub use kernel::{KernelConfig, KernelMetrics, KernelReading, MetricMaps};
pub use runtime::{MetricsConfig, MetricsRuntime};
