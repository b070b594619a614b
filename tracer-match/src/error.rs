//! Errors of the matcher library.

use std::path::PathBuf;

/// What can go wrong reading traces.
#[derive(Debug, thiserror::Error)]
pub enum MatchError {
    /// A read failed.
    #[error("read error")]
    Io(#[from] std::io::Error),
    /// Writing the pairs file (`--pairs`) failed.
    #[error("cannot write the pairs file")]
    WritePairs(#[source] std::io::Error),
    /// An input file could not be opened.
    #[error("cannot open {}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The stream ends inside a block: the file was cut (a sink killed
    /// while writing, a copy in progress). Every earlier block is good.
    #[error("file ends inside the block at byte {offset}")]
    Truncated {
        /// Offset of the incomplete block.
        offset: u64,
    },
    /// A block that cannot be pcapng as the sink writes it.
    #[error("bad pcapng block at byte {offset}: {what}")]
    BadBlock {
        /// Offset of the block.
        offset: u64,
        /// What is wrong with it.
        what: String,
    },
    /// A file failed; which one.
    #[error("in {}", path.display())]
    InFile {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: Box<MatchError>,
    },
}
