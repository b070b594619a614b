//! The one error type of the crate: reading clocks, PHC ioctls, the exchange.

use thiserror::Error;

use crate::bracket::ClockId;

/// Reading or measuring a clock failed.
#[derive(Debug, Error)]
pub enum ClockError {
    /// `clock_gettime` returned an error.
    #[error("clock_gettime({clock:?}) failed: {source}")]
    Gettime {
        /// Which clock.
        clock: ClockId,
        /// The OS error.
        source: std::io::Error,
    },
    /// A system call on a device or socket failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done (e.g. "open /dev/ptp0", "PTP_SYS_OFFSET").
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The interface has no PTP hardware clock (`phc_index` is -1).
    #[error("interface {0} has no PTP hardware clock")]
    NoPhc(String),
    /// None of the offset ioctls works on this PHC.
    #[error("no PTP_SYS_OFFSET* ioctl works on {0}")]
    NoOffsetMethod(String),
    /// A clock source specification could not be parsed.
    #[error("invalid clock source {spec:?}: {reason}")]
    BadSpec {
        /// The text given.
        spec: String,
        /// Why it was rejected.
        reason: String,
    },
    /// No answer in time (the two-way exchange).
    #[error("timed out: {0}")]
    Timeout(String),
    /// A malformed or unexpected message (the two-way exchange).
    #[error("protocol: {0}")]
    Protocol(String),
}

impl ClockError {
    /// An [`ClockError::Io`] from the last OS error.
    pub(crate) fn last_os(what: impl Into<String>) -> Self {
        ClockError::Io {
            what: what.into(),
            source: std::io::Error::last_os_error(),
        }
    }

    /// An [`ClockError::Io`] from an `io::Error`.
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        ClockError::Io {
            what: what.into(),
            source,
        }
    }
}
