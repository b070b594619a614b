//! Synthetic traces for the tests and the benchmark: two hosts with one
//! TCP connection between them (data one way or both ways), simulated
//! with known truth (one-way delay, clock offsets, losses, retransmissions,
//! GRO, sampling, lost events) and written as the sink writes its files:
//! SHB, one IDB per host, one EPB per event whose payload is the codec's
//! capture record, ISBs with cumulative totals at the end of each file
//! (the sink's [`TraceWriter`](tracer_sink::TraceWriter) encodes the blocks,
//! `tracer-codec` the payloads).
//!
//! The simulation is a discrete-event loop in true time; each host stamps
//! its events with true time plus its clock offset, so a negative offset
//! difference makes receives show up before their sends. Events come out
//! in stamped-time order through a small heap: memory stays bounded
//! whatever the number of events.
//!
//! [`config`] says what to simulate, [`sim`] runs it, [`writer`] writes
//! the files; [`write_trace`] does all three.

use std::path::{Path, PathBuf};

pub mod config;
pub mod sim;
pub mod writer;

pub use config::SynthConfig;
pub use sim::{Synth, SynthEvent};
pub use writer::{record_bytes, FileLayout, SynthWriter};

/// Simulate `cfg` and write it into `dir` laid out as `layout`; returns
/// the files and the events written.
pub fn write_trace(
    dir: &Path,
    cfg: &SynthConfig,
    layout: FileLayout,
) -> std::io::Result<(Vec<PathBuf>, u64)> {
    let mut sim = Synth::new(cfg.clone());
    let mut w = SynthWriter::new(dir, cfg, layout);
    let mut n = 0;
    while let Some(e) = sim.next() {
        w.write(&e, sim.dropped[e.host])?;
        n += 1;
    }
    Ok((w.finish()?, n))
}
