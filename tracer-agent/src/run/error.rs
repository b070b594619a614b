//! Why the agent stopped with an error.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::clock::ClockSetupError;
use crate::preflight::{self, PreflightError};
use crate::probes::ProbeError;

/// Why the agent stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A precondition failed.
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    /// A probe could not be set up.
    #[error(transparent)]
    Probe(#[from] ProbeError),
    /// No probe was selected.
    #[error("no probe selected: pass --probes with at least one probe")]
    NoProbes,
    /// The clock source could not be opened.
    #[error("setting up the clock --clock {spec}")]
    Clock {
        /// The --clock choice.
        spec: Box<clocksync::SourceSpec>,
        /// Why.
        source: ClockSetupError,
    },
    /// The network namespace to trace could not be read.
    #[error("reading network namespace {path}")]
    Netns {
        /// The namespace file (e.g. /proc/self/ns/net).
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The namespace to trace is not a network namespace.
    #[error(transparent)]
    NetnsFile(#[from] preflight::NetnsFileError),
    /// Metrics (`--metrics`) could not be set up.
    #[error(transparent)]
    Metrics(#[from] crate::metrics::MetricsError),
    /// The UDP socket to the sink could not be opened.
    #[error("opening a UDP socket to the sink {sink}")]
    Socket {
        /// The sink's address.
        sink: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    /// No message in the chain repeats its cause's text: printed with
    /// `{:#}`, every cause appears once.
    fn assert_causes_once(e: &(dyn Error + 'static)) {
        let mut cur = e;
        while let Some(next) = cur.source() {
            let (msg, cause) = (cur.to_string(), next.to_string());
            assert!(
                !msg.contains(&cause),
                "{msg:?} repeats its source {cause:?}"
            );
            cur = next;
        }
    }

    fn io_err() -> std::io::Error {
        std::io::Error::from_raw_os_error(libc::ENOENT)
    }

    #[test]
    fn agent_errors_print_each_cause_once() {
        let errors: Vec<AgentError> = vec![
            AgentError::Netns {
                path: "/run/netns/x".into(),
                source: io_err(),
            },
            AgentError::Socket {
                sink: "127.0.0.1:9".parse().unwrap(),
                source: io_err(),
            },
            AgentError::Probe(ProbeError::Load {
                probe: "tx",
                source: libbpf_rs::Error::from(io_err()),
            }),
            AgentError::Probe(ProbeError::Cgroup {
                path: "/x".into(),
                source: io_err(),
            }),
            AgentError::Probe(ProbeError::Attach {
                probe: "tx",
                path: "/x".into(),
                source: libbpf_rs::Error::from(io_err()),
            }),
            AgentError::Probe(ProbeError::AttachTracepoint {
                probe: "rx",
                program: "rx_copy",
                source: libbpf_rs::Error::from(io_err()),
            }),
            AgentError::Probe(ProbeError::Map {
                probe: "tx",
                map: "slots",
                source: libbpf_rs::Error::from(io_err()),
            }),
            AgentError::Preflight(
                preflight::check_tx_timestamping("/nonexistent/btf".as_ref()).unwrap_err(),
            ),
            AgentError::Preflight(preflight::check_cgroup("/nonexistent/cg".as_ref()).unwrap_err()),
        ];
        for e in errors {
            assert_causes_once(&e);
            // The OS reason is shown exactly once, wherever it lives, in
            // the form main prints.
            let shown = format!("{:#}", anyhow::Error::from(e));
            assert_eq!(
                shown.matches("No such file or directory").count(),
                1,
                "{shown}"
            );
        }
    }
}
