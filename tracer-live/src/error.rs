//! Why a live interface could not be set up; every message says what to do.

/// Errors of the live interface.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The name is not a usable interface name.
    #[error(
        "{name:?} is not a valid interface name: 1 to 15 bytes, no '/', ':', whitespace or \
         NUL (e.g. nettrace0)"
    )]
    BadName {
        /// The name given.
        name: String,
    },
    /// `/dev/net/tun` cannot be opened.
    #[error(
        "cannot open /dev/net/tun to create a TAP interface; load the tun driver \
         (modprobe tun) or create the device node (mknod /dev/net/tun c 10 200)"
    )]
    NoTun {
        /// The OS error.
        source: std::io::Error,
    },
    /// Creating or configuring the interface needs CAP_NET_ADMIN.
    #[error(
        "creating the live interface {name} needs CAP_NET_ADMIN: run as root, or grant it \
         (setcap cap_net_admin+ep on the binary)"
    )]
    NeedsNetAdmin {
        /// The interface.
        name: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Another process has the interface open.
    #[error(
        "the interface {name} is in use by another process (another tracer still running?); \
         stop it or pick another name"
    )]
    InUse {
        /// The interface.
        name: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The name belongs to an interface that is not a TAP device.
    #[error(
        "an interface named {name} exists and is not a TAP device; pick another name or \
         remove it (ip link del {name})"
    )]
    NotTap {
        /// The interface.
        name: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Any other failure of a step.
    #[error("live interface {name}: {what}")]
    Io {
        /// The interface.
        name: String,
        /// The step that failed.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

impl LiveError {
    /// The OS error behind this one, if any.
    pub fn io_error(&self) -> Option<&std::io::Error> {
        match self {
            LiveError::BadName { .. } => None,
            LiveError::NoTun { source }
            | LiveError::NeedsNetAdmin { source, .. }
            | LiveError::InUse { source, .. }
            | LiveError::NotTap { source, .. }
            | LiveError::Io { source, .. } => Some(source),
        }
    }
}
