//! Typed configuration of a sink run (what the CLI flags turn into).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::clock::SinkClock;
use crate::error::SinkError;

/// Smallest `rotate_size_bytes` (64 KiB): below it a sink would open a new
/// file for nearly every write (0 made about ten empty files a second).
pub const MIN_ROTATE_SIZE: u64 = 64 << 10;
/// Largest `rotate_size_bytes` (1 TiB).
pub const MAX_ROTATE_SIZE: u64 = 1 << 40;
/// Longest duration a configuration may hold (a year): far enough for any
/// interval or timeout, near enough that `Instant + duration` cannot
/// overflow and panic while the sink runs.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 86_400);
pub use crate::compression::Compression;
use crate::live::LiveStreamConfig;
use crate::metrics::SinkMetrics;
use crate::peers::SinkKeys;

/// Everything [`crate::run`] needs to know besides the socket.
///
/// Built by the binary from its flags; tests build it directly with
/// [`SinkConfig::new`] and struct update syntax.
#[derive(Debug, Clone)]
pub struct SinkConfig {
    /// Directory that receives the pcapng files (created if missing).
    pub output_dir: PathBuf,
    /// File name prefix: `<prefix>-<UTC YYYYmmddTHHMMSSZ>-<NNN>.pcapng`
    /// (`.pcapng.zst` when compressed).
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
    /// Write each event's one-line summary as the EPB `opt_comment`
    /// (`--comments`; off by default: it is a third of the sink's work).
    pub comments: bool,
    /// After a write failure (full disk, unwritable directory), how long to
    /// wait before trying to open a fresh file.
    pub retry_interval: Duration,
    /// How often the periodic stats reporter is called (`None`: only the
    /// final stats returned by [`crate::run`]).
    pub stats_interval: Option<Duration>,
    /// Clock used to stamp events that carry no global time of their own.
    pub clock: SinkClock,
    /// An agent that sends nothing accepted for this long leaves the agent
    /// table (its interface stays in the file; if it comes back it is a
    /// new agent). `None`: agents never expire.
    pub agent_idle_timeout: Option<Duration>,
    /// Agents listed one by one in a stats snapshot at most (the ones with
    /// the most events); the others are added up.
    pub stats_max_agents: usize,
    /// Plain or zstd-compressed files (`--compress`).
    pub compression: Compression,
    /// Keys from `--key-file`: only datagrams tagged with the deployment
    /// key are accepted, replays are refused, acknowledgements are tagged.
    /// `None` accepts every well-formed datagram (tags unchecked).
    pub keys: Option<SinkKeys>,
    /// `--live-iface`: a TAP interface of this name shows every written
    /// event as one Ethernet frame (needs CAP_NET_ADMIN; removed when the
    /// sink exits). `None`: no live interface.
    pub live_iface: Option<String>,
    /// `--live-listen`: the live pcapng stream's listener. `None`: no
    /// stream.
    pub live_stream: Option<LiveStreamConfig>,
    /// Whether to write trace files into `output_dir`. `false` (an agent's
    /// `--live-iface` without `--write`): the live outputs only; events
    /// they took are neither written nor lost, and nothing is acknowledged.
    pub files: bool,
    /// `--metrics`: the Prometheus metrics that read this run's counters
    /// at each scrape (the caller serves them). `None`: no metrics.
    pub metrics: Option<SinkMetrics>,
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
    /// Default idle timeout of an agent (120 s: an agent sends a clock
    /// event every clock interval, 1 s by default, even when idle).
    pub const DEFAULT_AGENT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
    /// Default number of agents listed in a stats snapshot.
    pub const DEFAULT_STATS_MAX_AGENTS: usize = 32;

    /// Check the values that have a range (run by [`crate::run`]).
    pub fn validate(&self) -> Result<(), SinkError> {
        if !self.files && self.live_iface.is_none() && self.live_stream.is_none() {
            return Err(SinkError::Config(
                "no output: write files, or give a live interface or a live stream".into(),
            ));
        }
        if let Some(s) = self.rotate_size_bytes {
            if s < MIN_ROTATE_SIZE {
                return Err(SinkError::Config(format!(
                    "rotate size {s} bytes is below the minimum of {MIN_ROTATE_SIZE} bytes (64K)"
                )));
            }
        }
        if self.rotate_interval.is_some_and(|d| d.is_zero()) {
            return Err(SinkError::Config(
                "rotate interval 0: use None for no time rotation".to_owned(),
            ));
        }
        for (what, d) in [
            ("rotate interval", self.rotate_interval),
            ("reorder window", Some(self.reorder_window)),
            ("retry interval", Some(self.retry_interval)),
            ("stats interval", self.stats_interval),
            ("agent idle timeout", self.agent_idle_timeout),
        ] {
            if let Some(d) = d.filter(|d| *d > MAX_DURATION) {
                return Err(SinkError::Config(format!(
                    "{what} {d:?} is longer than a year ({MAX_DURATION:?})"
                )));
            }
        }
        if let Compression::Zstd { level } = self.compression {
            if !(Compression::MIN_LEVEL..=Compression::MAX_LEVEL).contains(&level) {
                return Err(SinkError::Config(format!(
                    "zstd level {level} is outside {}..={}",
                    Compression::MIN_LEVEL,
                    Compression::MAX_LEVEL
                )));
            }
        }
        if self.reorder_max_events == 0 {
            return Err(SinkError::Config(
                "reorder_max_events 0: at least one event must be held".to_owned(),
            ));
        }
        Ok(())
    }

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
            comments: false,
            retry_interval: Self::DEFAULT_RETRY_INTERVAL,
            stats_interval: None,
            clock: SinkClock::System,
            agent_idle_timeout: Some(Self::DEFAULT_AGENT_IDLE_TIMEOUT),
            stats_max_agents: Self::DEFAULT_STATS_MAX_AGENTS,
            keys: None,
            live_iface: None,
            live_stream: None,
            files: true,
            metrics: None,
            compression: Compression::Zstd {
                level: Compression::DEFAULT_LEVEL,
            },
        }
    }
}

/// Create the output directory if missing and check that files can be
/// created in it (a read-only file system or mount, missing permissions):
/// a sink that cannot write must fail at start, not run and write nothing.
pub fn prepare_output_dir(dir: &Path) -> Result<(), SinkError> {
    std::fs::create_dir_all(dir).map_err(|e| SinkError::OutputDir {
        path: dir.to_owned(),
        source: e,
    })?;
    let probe = dir.join(format!(".tracer-sink-write-check-{}", std::process::id()));
    let _ = std::fs::remove_file(&probe);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(|e| SinkError::OutputNotWritable {
            path: dir.to_owned(),
            source: e,
        })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// `--rotate-size`: a size ([`parse_size`]) from [`MIN_ROTATE_SIZE`] to
/// [`MAX_ROTATE_SIZE`].
pub fn parse_rotate_size(s: &str) -> Result<u64, String> {
    let n = parse_size(s)?;
    if n < MIN_ROTATE_SIZE {
        return Err(format!(
            "`{s}` is below the minimum rotation size of 64K (a new file per write is not useful)"
        ));
    }
    if n > MAX_ROTATE_SIZE {
        return Err(format!("`{s}` is outside 64K..=1T"));
    }
    Ok(n)
}

/// Smallest `--rcvbuf` other than 0 (the kernel raises smaller values).
pub const MIN_RCVBUF: u64 = 64 << 10;
/// Largest `--rcvbuf` (the kernel caps a socket buffer just under 1 GiB).
pub const MAX_RCVBUF: u64 = 512 << 20;

/// `--rcvbuf`: 0 (the kernel's default) or a size ([`parse_size`]) from
/// [`MIN_RCVBUF`] to [`MAX_RCVBUF`].
pub fn parse_rcvbuf(s: &str) -> Result<u64, String> {
    let n = parse_size(s)?;
    if n != 0 && !(MIN_RCVBUF..=MAX_RCVBUF).contains(&n) {
        return Err(format!(
            "`{s}` is outside 64K..=512M (or 0 for the kernel's default)"
        ));
    }
    Ok(n)
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

    #[test]
    fn rcvbuf_has_a_range() {
        assert_eq!(parse_rcvbuf("0"), Ok(0));
        assert_eq!(parse_rcvbuf("32M"), Ok(32 << 20));
        assert!(parse_rcvbuf("1K").is_err());
        assert!(parse_rcvbuf("4G").is_err());
    }

    #[test]
    fn rotate_size_has_a_minimum() {
        assert!(parse_rotate_size("0").unwrap_err().contains("minimum"));
        assert!(parse_rotate_size("63K").is_err());
        assert_eq!(parse_rotate_size("64K"), Ok(MIN_ROTATE_SIZE));
        assert_eq!(parse_rotate_size("1T"), Ok(MAX_ROTATE_SIZE));
        assert!(parse_rotate_size("1099511627777").is_err());
        assert!(parse_rotate_size("18446744073709551615").is_err());
        let c = SinkConfig {
            rotate_size_bytes: Some(0),
            ..SinkConfig::new("x")
        };
        assert!(c.validate().is_err());
        assert!(SinkConfig::new("x").validate().is_ok());
    }

    #[test]
    fn durations_past_a_year_and_an_empty_reorder_buffer_are_refused() {
        let far = Duration::MAX;
        for c in [
            SinkConfig {
                retry_interval: far,
                ..SinkConfig::new("x")
            },
            SinkConfig {
                rotate_interval: Some(far),
                ..SinkConfig::new("x")
            },
            SinkConfig {
                stats_interval: Some(far),
                ..SinkConfig::new("x")
            },
            SinkConfig {
                agent_idle_timeout: Some(far),
                ..SinkConfig::new("x")
            },
            SinkConfig {
                reorder_window: far,
                ..SinkConfig::new("x")
            },
            SinkConfig {
                reorder_max_events: 0,
                ..SinkConfig::new("x")
            },
        ] {
            assert!(c.validate().is_err(), "{c:?}");
        }
        let year = SinkConfig {
            retry_interval: MAX_DURATION,
            ..SinkConfig::new("x")
        };
        assert!(year.validate().is_ok());
    }
}
