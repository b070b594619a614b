//! nettrace matcher: reads the pcapng traces the sink writes (one or many
//! files, several sinks' included), links each sender skb to the
//! receiver's RX skb holding its bytes, and reports each packet's life
//! across the two hosts, the one-way latency per stage, unmatched skbs by
//! reason, causality violations (a receive before its send means the
//! clocks disagree) and the interval each host pair's clock offset must
//! lie in, as the data prove it. See docs/matching.md.
//!
//! Streaming: files are merged in global-time order through a bounded
//! reorder window ([`input::merge`]), and the matcher holds only the
//! events of about three matching windows ([`matcher`]), so memory does
//! not grow with the trace.

pub mod error;
pub mod fasthash;
pub mod flow;
pub mod hist;
pub mod html;
pub mod input;
pub mod lifetime;
pub mod loss;
pub mod matcher;
pub mod receiver;
pub mod report;
pub mod stats;
pub mod synth;
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
    let mut input = input::merge::Merge::open(files, merge)?;
    let mut m = Matcher::new(cfg);
    while let Some(ev) = input.next_event()? {
        m.push(&ev);
    }
    m.finish_input();
    Ok(report::build(
        m,
        input.hosts(),
        input.stats().clone(),
        input.agent_totals(),
        merge.reorder_window_ns,
    ))
}
