//! Writes a synthetic two-host trace as the sink writes its files (see
//! `tracer_testdata::synth`), for the benchmark and for trying the matcher:
//!
//! ```text
//! cargo run --release -p tracer-testdata --example synth-trace -- \
//!     --out /tmp/trace --skbs 1000000 --both-ways --offset-ns 2000
//! ```
//! Prints one JSON object: files, events written and lost, elapsed seconds.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use tracer_testdata::synth::{FileLayout, Synth, SynthConfig, SynthWriter};

/// Write a synthetic trace of two hosts exchanging TCP data.
#[derive(Debug, Parser)]
struct Args {
    /// Directory for the files (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// TX skbs per direction.
    #[arg(long, default_value_t = 100_000)]
    skbs: u64,
    /// Data both ways.
    #[arg(long)]
    both_ways: bool,
    /// Time between TX skbs of one direction, ns (sets the event rate).
    #[arg(long, default_value_t = 20_000)]
    interval_ns: u64,
    /// Host 1's clock offset against host 0, ns.
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    offset_ns: i64,
    /// Lose one RX skb in N (0: none); its TX skbs are retransmitted.
    #[arg(long, default_value_t = 0)]
    lose_one_in: u64,
    /// TX skbs per GRO RX skb.
    #[arg(long, default_value_t = 2)]
    gro: u32,
    /// Start a new file every N events (the sink's rotation).
    #[arg(long)]
    events_per_file: Option<u64>,
    /// One file series per host (two sinks).
    #[arg(long)]
    per_host: bool,
}

fn main() -> std::io::Result<()> {
    let a = Args::parse();
    std::fs::create_dir_all(&a.out)?;
    let cfg = SynthConfig {
        skbs: a.skbs,
        both_ways: a.both_ways,
        interval_ns: a.interval_ns,
        clock_offset_ns: [0, a.offset_ns],
        lose_one_in: a.lose_one_in,
        gro: a.gro,
        ..SynthConfig::default()
    };
    let t0 = Instant::now();
    let mut sim = Synth::new(cfg.clone());
    let mut w = SynthWriter::new(
        &a.out,
        &cfg,
        FileLayout {
            events_per_file: a.events_per_file,
            per_host: a.per_host,
        },
    );
    let mut n = 0u64;
    while let Some(e) = sim.next() {
        w.write(&e, sim.dropped[e.host])?;
        n += 1;
    }
    let files = w.finish()?;
    println!(
        "{{\"files\":{},\"events\":{},\"lost\":{},\"seconds\":{:.2}}}",
        files.len(),
        n,
        sim.dropped[0] + sim.dropped[1],
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
