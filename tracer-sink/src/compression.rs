//! How trace files are compressed: a module of its own, below both the
//! configuration and the file writer that use it.

/// How trace files are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Plain pcapng (`.pcapng`).
    None,
    /// zstd-compressed pcapng (`.pcapng.zst`) at this zstd level, which
    /// Wireshark and tshark open directly.
    Zstd {
        /// zstd level, [`Compression::MIN_LEVEL`]..=[`Compression::MAX_LEVEL`].
        level: i32,
    },
}

impl Compression {
    /// Level of `--compress zstd` without `--compress-level`: on the demo's
    /// traffic as small as level 1 (8.2x smaller than plain pcapng against
    /// 8.1x) at 1.16x the sink CPU per event of a plain file instead of
    /// 1.32x (bench/compress.sh, 3 rounds side by side).
    pub const DEFAULT_LEVEL: i32 = -1;
    /// Fastest level offered: zstd's negative levels trade size for speed
    /// (0 is zstd's default, level 3).
    pub const MIN_LEVEL: i32 = -7;
    /// Slowest level offered: from 16 on zstd's optimal parsers may split a
    /// flush into several blocks, and a file cut between two of them would
    /// end inside an event (see `pcapng/frames.rs`).
    pub const MAX_LEVEL: i32 = 15;

    /// The file name suffix after the stem.
    pub fn extension(self) -> &'static str {
        match self {
            Compression::None => "pcapng",
            Compression::Zstd { .. } => "pcapng.zst",
        }
    }

    /// Name in the stats (`none`, `zstd`).
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Zstd { .. } => "zstd",
        }
    }
}
