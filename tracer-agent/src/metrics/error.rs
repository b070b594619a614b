//! Why metrics could not be set up or read.

use std::path::PathBuf;

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
    /// The CPU accounting (`--metrics-with cpu`) could not start or be read.
    #[error(transparent)]
    Cpu(#[from] crate::cpucost::CpuCostError),
}
