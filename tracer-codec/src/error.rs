//! Why a datagram or record was rejected. Variants carry typed details,
//! never another error as a source: each message is complete on its own.

/// A decode failure. Every variant has a stable short [`reason`](Self::reason)
/// that the sink uses as a counter name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than the fixed datagram header.
    #[error("datagram too short: {len} bytes, the header alone needs {need}")]
    TooShort { len: usize, need: usize },
    /// Larger than any agent may send.
    #[error("datagram too large: {len} bytes (maximum {max})")]
    TooLarge { len: usize, max: usize },
    /// Not one of ours (wrong port, or a stray sender).
    #[error("bad magic {found:02x?}: not a tracer datagram")]
    BadMagic { found: [u8; 4] },
    /// A version this build does not understand.
    #[error("unsupported wire version {found} (this build speaks {supported})")]
    UnsupportedVersion { found: u16, supported: u16 },
    /// A `flags` bit this build does not know (it might change the framing).
    #[error("unknown header flags {flags:#04x}")]
    BadFlags { flags: u8 },
    /// The header claims a length that does not fit the datagram or the version.
    #[error("bad header length {header_len} in a datagram of {len} bytes")]
    BadHeaderLen { header_len: usize, len: usize },
    /// Hostname longer than [`crate::MAX_HOSTNAME_LEN`] or not UTF-8.
    #[error("bad hostname: {0}")]
    BadHostname(HostnameError),
    /// An event record runs past the end of the datagram.
    #[error("record {index} truncated: needs {need} bytes, {have} left")]
    TruncatedRecord {
        index: usize,
        need: usize,
        have: usize,
    },
    /// The header's event count does not match the records present.
    #[error("header says {expected} events, datagram holds {found}")]
    EventCountMismatch { expected: usize, found: usize },
    /// A known event kind whose body is shorter than its version-1 layout.
    #[error("event kind {kind} body too short: {len} bytes, needs {need}")]
    BodyTooShort { kind: u16, len: usize, need: usize },
    /// A field holds a value outside its domain (e.g. an unknown TX stage).
    #[error("event kind {kind}: bad field {field}")]
    BadField { kind: u16, field: &'static str },
}

impl DecodeError {
    /// Stable, short counter name for this rejection reason.
    pub fn reason(&self) -> &'static str {
        match self {
            DecodeError::TooShort { .. } => "too_short",
            DecodeError::TooLarge { .. } => "too_large",
            DecodeError::BadMagic { .. } => "bad_magic",
            DecodeError::UnsupportedVersion { .. } => "bad_version",
            DecodeError::BadFlags { .. } => "bad_flags",
            DecodeError::BadHeaderLen { .. } => "bad_header_len",
            DecodeError::BadHostname(_) => "bad_hostname",
            DecodeError::TruncatedRecord { .. } => "truncated_record",
            DecodeError::EventCountMismatch { .. } => "event_count_mismatch",
            DecodeError::BodyTooShort { .. } => "body_too_short",
            DecodeError::BadField { .. } => "bad_field",
        }
    }

    /// Every reason string, for pre-registering counters.
    pub const ALL_REASONS: &'static [&'static str] = &[
        "too_short",
        "too_large",
        "bad_magic",
        "bad_version",
        "bad_flags",
        "bad_header_len",
        "bad_hostname",
        "truncated_record",
        "event_count_mismatch",
        "body_too_short",
        "bad_field",
    ];
}

/// What is wrong with a host name in a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HostnameError {
    /// More bytes than a header may carry.
    #[error("{len} bytes, longer than {max}")]
    TooLong {
        /// Length found.
        len: usize,
        /// [`crate::MAX_HOSTNAME_LEN`].
        max: usize,
    },
    /// Not valid UTF-8.
    #[error("not UTF-8")]
    NotUtf8,
}
