//! Typed configuration of a sink run (what the CLI flags turn into).

use std::path::PathBuf;
use std::time::Duration;

use crate::clock::SinkClock;
use crate::peers::SinkKeys;

/// Everything [`crate::run`] needs to know besides the socket.
///
/// Built by the binary from its flags; tests build it directly with
/// [`SinkConfig::new`] and struct update syntax.
#[derive(Debug, Clone)]
pub struct SinkConfig {
    /// Directory that receives the pcapng files (created if missing).
    pub output_dir: PathBuf,
    /// File name prefix: `<prefix>-<UTC YYYYmmddTHHMMSSZ>-<NNN>.pcapng`.
    pub file_prefix: String,
    /// Start a new file once the current one reaches this many bytes.
    pub rotate_size_bytes: Option<u64>,
    /// Start a new file once the current one is this old.
    pub rotate_interval: Option<Duration>,
    /// How far (in event time) the writer waits for stragglers before it
    /// writes an event: events are written in global-timestamp order once
    /// they are older than the newest timestamp seen minus this window, or
    /// once they have waited this long in wall-clock time.
    pub reorder_window: Duration,
    /// Upper bound on events held in the reorder buffer. Past it the oldest
    /// event is written at once (ordering may then suffer, memory does not).
    pub reorder_max_events: usize,
    /// Write each event's one-line summary as the EPB `opt_comment`.
    pub comments: bool,
    /// After a write failure (full disk, unwritable directory), how long to
    /// wait before trying to open a fresh file.
    pub retry_interval: Duration,
    /// How often the periodic stats reporter is called (`None`: only the
    /// final stats returned by [`crate::run`]).
    pub stats_interval: Option<Duration>,
    /// Clock used to stamp events that carry no global time of their own.
    pub clock: SinkClock,
    /// Keys from `--key-file`: only datagrams tagged with the deployment
    /// key are accepted, replays are refused, acknowledgements are tagged.
    /// `None` accepts every well-formed datagram (tags unchecked).
    pub keys: Option<SinkKeys>,
}

impl SinkConfig {
    /// Default reorder window (250 ms).
    pub const DEFAULT_REORDER_WINDOW: Duration = Duration::from_millis(250);
    /// Default bound on buffered events: 2 M events, about 250 MB of
    /// datagram bytes and heap entries in the worst case, i.e. two seconds
    /// at the 1 M events/s design rate.
    pub const DEFAULT_REORDER_MAX_EVENTS: usize = 2_000_000;
    /// Default retry interval after a write failure (5 s).
    pub const DEFAULT_RETRY_INTERVAL: Duration = Duration::from_secs(5);

    /// A configuration writing to `output_dir` with every other field at
    /// its default.
    pub fn new(output_dir: impl Into<PathBuf>) -> Self {
        SinkConfig {
            output_dir: output_dir.into(),
            file_prefix: "trace".to_owned(),
            rotate_size_bytes: None,
            rotate_interval: None,
            reorder_window: Self::DEFAULT_REORDER_WINDOW,
            reorder_max_events: Self::DEFAULT_REORDER_MAX_EVENTS,
            comments: true,
            retry_interval: Self::DEFAULT_RETRY_INTERVAL,
            stats_interval: None,
            clock: SinkClock::System,
            keys: None,
        }
    }
}

/// Parse a byte size such as `1048576`, `64K`, `100M`, `2G` (binary
/// multiples: K = 1024). A trailing `B`/`iB` is accepted (`64KiB`, `10MB`).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix("ib"))
        .or_else(|| t.strip_suffix('B'))
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(t);
    let (num, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 1u64 << 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 1u64 << 30),
        Some('t' | 'T') => (&t[..t.len() - 1], 1u64 << 40),
        _ => (t, 1),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a size: use a number of bytes with an optional K, M or G suffix (e.g. 512M)"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("`{s}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("123"), Ok(123));
        assert_eq!(parse_size("64K"), Ok(64 * 1024));
        assert_eq!(parse_size("64KiB"), Ok(64 * 1024));
        assert_eq!(parse_size("10m"), Ok(10 << 20));
        assert_eq!(parse_size("10MB"), Ok(10 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert!(parse_size("").is_err());
        assert!(parse_size("abc").is_err());
        assert!(parse_size("-1M").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
    }
}
