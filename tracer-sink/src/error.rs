//! Errors of the sink library. A variant's source error is reached through
//! `source()` only, never repeated in its message: print the chain once
//! (`{:#}` of anyhow, or walk `source()`).

use std::net::SocketAddr;
use std::path::PathBuf;

/// Something the sink could not do.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The UDP socket could not be bound.
    #[error("cannot bind {addr}")]
    Bind {
        /// Address asked for.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The output directory could not be created.
    #[error("cannot create output directory {path}")]
    OutputDir {
        /// Directory asked for.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The output directory exists but files cannot be created in it
    /// (read-only file system, permissions).
    #[error("cannot create files in output directory {path}")]
    OutputNotWritable {
        /// Directory asked for.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A configuration value out of range.
    #[error("{0}")]
    Config(String),
    /// Any other I/O failure; `what` says what the sink was doing.
    #[error("{what}")]
    Io {
        /// What failed, with the path or address involved.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The live interface (`--live-iface`) could not be created.
    #[error("cannot create the live interface")]
    LiveIface {
        /// Why (its message says what to do).
        #[source]
        source: tracer_live::LiveError,
    },
    /// pcap-file refused to encode a block (a bug, not bad input).
    #[error("pcapng encoding failed: {0}")]
    Encode(String),
    /// The writer thread died (a bug); the message says how.
    #[error("writer thread failed: {0}")]
    Writer(String),
}

impl SinkError {
    /// The underlying OS error, if any.
    pub fn io_error(&self) -> Option<&std::io::Error> {
        match self {
            SinkError::Bind { source, .. }
            | SinkError::OutputDir { source, .. }
            | SinkError::OutputNotWritable { source, .. }
            | SinkError::Io { source, .. } => Some(source),
            SinkError::LiveIface { source } => source.io_error(),
            _ => None,
        }
    }
}
