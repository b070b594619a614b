//! nettrace matcher: reads the pcapng traces the sink writes (one or many
//! files, several sinks' included), links each sender skb to the
//! receiver's RX skb holding its bytes, and reports each packet's life
//! across the two hosts, the one-way latency per stage, unmatched skbs by
//! reason, causality violations (a receive before its send means the
//! clocks disagree) and the interval each host pair's clock offset must
//! lie in, as the data prove it; and what the network stack cost each
//! host's CPUs, from the agents' CPU events. See docs/matching.md.
//!
//! Streaming: files are merged in global-time order through a bounded
//! reorder window ([`input::merge`]), and the matcher holds only the
//! events of about three matching windows ([`matcher`]), so memory does
//! not grow with the trace.

pub mod cpu;
pub mod error;
pub mod fasthash;
pub mod flow;
pub mod hist;
pub mod html;
pub mod input;
pub mod lifetime;
pub mod loss;
pub mod matcher;
pub mod pairs;
pub mod receiver;
pub mod report;
pub mod stats;
pub mod text;

use std::path::PathBuf;

pub use error::MatchError;
pub use input::merge::MergeConfig;
pub use matcher::{MatchConfig, Matcher};
pub use report::{Charts, Report};

/// Match the events of `files` (merged in global-time order).
pub fn run(
    files: &[PathBuf],
    merge: MergeConfig,
    cfg: MatchConfig,
) -> Result<(Report, Charts), MatchError> {
    run_with_pairs(files, merge, cfg, None)
}

/// [`run`], also writing every matched pair to `pairs` as JSON lines
/// ([`pairs::PairWriter`]).
pub fn run_with_pairs(
    files: &[PathBuf],
    merge: MergeConfig,
    cfg: MatchConfig,
    pairs: Option<&mut dyn std::io::Write>,
) -> Result<(Report, Charts), MatchError> {
    let mut input = input::merge::Merge::open(files, merge)?;
    let mut m = Matcher::new(cfg);
    if pairs.is_some() {
        m.write_pairs(pairs::PairWriter::new());
    }
    while let Some(ev) = input.next_event()? {
        m.push(&ev);
    }
    m.finish_input();
    if let (Some(out), Some(w)) = (pairs, m.pairs.take()) {
        let hosts = input.hosts();
        w.write_to(out, |h| hosts.name(h).to_owned())
            .map_err(MatchError::WritePairs)?;
    }
    Ok(report::build(
        m,
        input.hosts(),
        input.stats().clone(),
        input.agent_totals(),
        merge.reorder_window_ns,
    ))
}
