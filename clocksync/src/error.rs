//! The one error type of the crate: reading clocks, PHC ioctls, the exchange.
//!
//! Each variant puts its cause either in its message or in `source()`, never
//! in both, so a chain printed with `{:#}` says everything once.

use thiserror::Error;

/// Reading or measuring a clock failed.
#[derive(Debug, Error)]
pub enum ClockError {
    /// `clock_gettime` returned an error.
    #[error("clock_gettime({clock}) failed")]
    Gettime {
        /// Which clock ("CLOCK_TAI", ...).
        clock: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// A system call on a device or socket failed.
    #[error("{what}")]
    Io {
        /// What was being done (e.g. "open /dev/ptp0", "PTP_SYS_OFFSET").
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Not a possible network interface name (empty, too long, NUL).
    #[error("{0:?} is not an interface name")]
    BadInterface(String),
    /// The interface has no PTP hardware clock (`phc_index` is -1).
    #[error("interface {0} has no PTP hardware clock")]
    NoPhc(String),
    /// None of the offset ioctls works on this PHC.
    #[error("no PTP_SYS_OFFSET* ioctl works on {0}")]
    NoOffsetMethod(String),
    /// The PHC reports no frequency adjustment range (`max_adj` 0).
    #[error("{0} cannot be adjusted (its max_adj is 0)")]
    NotAdjustable(String),
    /// A clock gave no usable reading (every bracket was inverted).
    #[error("{0} returned no valid reading")]
    NoReading(String),
    /// A clock source specification could not be parsed.
    #[error("unknown clock source {spec:?}: {reason}")]
    BadSpec {
        /// The text given.
        spec: String,
        /// Why it was rejected (what was expected instead).
        reason: String,
    },
    /// A test-only clock error injection outside its range.
    #[error("{0}")]
    BadInjection(String),
    /// A servo name could not be parsed.
    #[error("unknown servo {0:?}: expected pi or linreg")]
    UnknownServo(String),
    /// No answer in time (the two-way exchange).
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    /// A malformed exchange message.
    #[error("malformed clock exchange message")]
    Message(#[source] MessageError),
    /// Hardware exchange stamps need the NIC's PHC to map them.
    #[error("hardware stamps need the NIC's PHC (use Responder::with_hardware)")]
    NeedsPhc,
}

/// What is wrong with a received exchange message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum MessageError {
    /// Not the fixed message length.
    #[error("wrong length {0}")]
    Length(usize),
    /// Not the protocol's magic.
    #[error("bad magic")]
    Magic,
    /// A version this build does not speak.
    #[error("unsupported version {0}")]
    Version(u8),
    /// An unknown message kind.
    #[error("unknown kind {0}")]
    Kind(u8),
    /// A key is set and the message carries no tag or a wrong one.
    #[error("not authenticated with the exchange key")]
    Unauthenticated,
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
