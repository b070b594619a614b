//! The command-line options of the file writer, shared by the programs
//! that write trace files: `tracer-sink` and `tracer-agent --write`, which
//! runs this sink inside the agent ([`crate::embedded`]). One definition,
//! so both take the same options with the same ranges and help.

use std::time::Duration;

use crate::config::{parse_rotate_size, Compression, SinkConfig};

/// Largest `--reorder-max-events` (about 13 GB of held events).
pub const MAX_REORDER_EVENTS: usize = 100_000_000;

/// How the writer orders events, names and rotates files, and what it
/// writes beside each event.
#[derive(Debug, Clone, clap::Args)]
pub struct WriterArgs {
    /// Start a new file when the current one reaches SIZE bytes
    /// (suffixes K, M, G, T: powers of 1024). Default: no size rotation.
    /// [range: 64K..=1T]
    #[arg(long, value_name = "SIZE", value_parser = parse_rotate_size)]
    pub rotate_size: Option<u64>,

    /// Start a new file every SECS seconds; 0 (the default): no time
    /// rotation. [range: 0 or 1..=604800 s]
    #[arg(long, value_name = "SECS", default_value = "0", value_parser = tracer_cli::secs_or_zero(1.0, 604_800.0))]
    pub rotate_interval: Duration,

    /// Reorder window in milliseconds: an event is written once it is this
    /// much older than the newest event seen (or has waited this long);
    /// 0 writes events in arrival order. [range: 0..=60000 ms]
    #[arg(long, value_name = "MS", default_value = "250", value_parser = tracer_cli::millis(0, 60_000))]
    pub reorder_window_ms: Duration,

    /// Most events held for reordering; past it the oldest is written at
    /// once (bounds memory: roughly 130 bytes per event).
    /// [range: 1..=100000000]
    #[arg(long, value_name = "N", default_value_t = SinkConfig::DEFAULT_REORDER_MAX_EVENTS,
        value_parser = tracer_cli::int(1usize, MAX_REORDER_EVENTS))]
    pub reorder_max_events: usize,

    /// File name prefix: 1 to 128 bytes, no '/', no control or
    /// bidirectional formatting characters (which could disguise a file's
    /// extension).
    #[arg(long, value_name = "PREFIX", default_value = "trace", value_parser = tracer_cli::file_name_part)]
    pub file_prefix: String,

    /// How to write the files: `zstd` (`.pcapng.zst`, about 1/10 the size;
    /// a file cut by a crash or a full disk is still read to its last
    /// flush, at most 100 ms before) or `none` (plain `.pcapng`, for tools
    /// without zstd support).
    #[arg(long, value_name = "HOW", default_value = "zstd")]
    pub compress: CompressArg,

    /// zstd level: higher is smaller and slower, negative levels faster
    /// still (0: zstd's default, 3). bench/compress.sh with LEVELS="1 3"
    /// measures them on this machine. [range: -7..=15]
    #[arg(long, value_name = "N", default_value_t = i64::from(Compression::DEFAULT_LEVEL),
        allow_negative_numbers = true,
        value_parser = tracer_cli::int(i64::from(Compression::MIN_LEVEL), i64::from(Compression::MAX_LEVEL)))]
    pub compress_level: i64,

    /// Write each event's one-line summary as its packet comment, for
    /// readers without the dissector (capinfos, editcap, other tools).
    /// Off by default: about 64 bytes more per event and some 40 % more
    /// writer CPU per event, and Wireshark with the dissector shows the
    /// same line in its Info column.
    #[arg(long)]
    pub comments: bool,

    /// The default (comments became opt-in); still accepted so that
    /// scripts passing it keep working.
    #[arg(long, hide = true, conflicts_with = "comments")]
    pub no_comments: bool,

    /// Seconds to wait before trying a new file after a write failure
    /// (full disk, unwritable directory). [range: 1..=3600 s]
    #[arg(long, value_name = "SECS", default_value = "5", value_parser = tracer_cli::secs(1.0, 3600.0))]
    pub retry_interval: Duration,
}

/// `--compress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CompressArg {
    /// zstd-compressed pcapng (`.pcapng.zst`).
    Zstd,
    /// Plain pcapng (`.pcapng`).
    None,
}

impl WriterArgs {
    /// `config` with these options applied.
    pub fn apply(&self, config: SinkConfig) -> SinkConfig {
        SinkConfig {
            file_prefix: self.file_prefix.clone(),
            rotate_size_bytes: self.rotate_size,
            rotate_interval: (!self.rotate_interval.is_zero()).then_some(self.rotate_interval),
            reorder_window: self.reorder_window_ms,
            reorder_max_events: self.reorder_max_events,
            comments: self.comments && !self.no_comments,
            retry_interval: self.retry_interval,
            compression: match self.compress {
                CompressArg::None => Compression::None,
                CompressArg::Zstd => Compression::Zstd {
                    // In MIN_LEVEL..=MAX_LEVEL: the parser checked it.
                    level: self.compress_level as i32,
                },
            },
            ..config
        }
    }

    /// The ids of these options (clap's), for a program that accepts them
    /// only together with another option.
    pub fn ids() -> Vec<String> {
        use clap::Args;
        Self::augment_args(clap::Command::new("writer"))
            .get_arguments()
            .map(|a| a.get_id().to_string())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        w: WriterArgs,
    }

    #[test]
    fn defaults_are_the_sink_configs_and_options_apply() {
        let c = Cli::try_parse_from(["x"]).unwrap();
        let d = SinkConfig::new("out");
        let a = c.w.apply(SinkConfig::new("out"));
        assert_eq!(
            (a.rotate_size_bytes, a.rotate_interval, a.comments),
            (None, None, false)
        );
        assert_eq!(a.reorder_window, d.reorder_window);
        assert_eq!(a.reorder_max_events, d.reorder_max_events);
        assert_eq!(a.retry_interval, d.retry_interval);
        assert_eq!(a.compression, d.compression);
        let c = Cli::try_parse_from([
            "x",
            "--rotate-size",
            "1M",
            "--rotate-interval",
            "60",
            "--comments",
            "--file-prefix",
            "web",
            "--compress-level",
            "-3",
        ])
        .unwrap();
        let a = c.w.apply(SinkConfig::new("out"));
        assert_eq!(a.rotate_size_bytes, Some(1 << 20));
        assert_eq!(a.rotate_interval, Some(Duration::from_secs(60)));
        assert!(a.comments);
        assert_eq!(a.file_prefix, "web");
        assert_eq!(a.compression, Compression::Zstd { level: -3 });
        let c = Cli::try_parse_from(["x", "--compress", "none"]).unwrap();
        assert_eq!(
            c.w.apply(SinkConfig::new("o")).compression,
            Compression::None
        );
        assert_eq!(a.output_dir, std::path::PathBuf::from("out"));
    }

    #[test]
    fn ids_name_every_option() {
        let ids = WriterArgs::ids();
        for id in ["rotate_size", "rotate_interval", "file_prefix", "comments"] {
            assert!(ids.iter().any(|i| i == id), "{id} not in {ids:?}");
        }
    }
}
