//! Writes a crafted trace (see `tracer_testdata::crafted`) for the benchmark
//! and for trying the readers on it:
//!
//! ```text
//! cargo run --release -p tracer-testdata --example crafted-trace -- \
//!     --out /tmp/crafted --shape same-skb --events 2000
//! ```
//! Prints one JSON object: the file and the events written.

use std::path::PathBuf;

use clap::Parser;
use tracer_testdata::crafted::{self, Shape};

/// Write one trace shaped against the readers' indexes.
#[derive(Debug, Parser)]
struct Args {
    /// Directory for the file (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// What the trace looks like.
    #[arg(long, value_enum)]
    shape: Shape,
    /// About how many events.
    #[arg(long, default_value_t = 2_000)]
    events: u64,
}

fn main() -> std::io::Result<()> {
    let a = Args::parse();
    std::fs::create_dir_all(&a.out)?;
    let (path, n) = crafted::write(&a.out, a.shape, a.events)?;
    println!("{{\"file\":\"{}\",\"events\":{n}}}", path.display());
    Ok(())
}
