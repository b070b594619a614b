//! Shared by the dissector tests, one concern per file: the events sent
//! ([`events`]) and the golden set ([`golden`]), agent datagrams
//! ([`datagrams`]), trace files written by the sink's writer ([`frames`]),
//! the stage-latency rule computed independently of the Lua script
//! ([`latency`]), and the field-by-field comparison of a decoded event
//! ([`checks`]).
// Each test crate uses a different subset of these helpers (and so of
// the re-exports below).
#![allow(dead_code)]

pub mod checks;
pub mod datagrams;
pub mod events;
pub mod frames;
pub mod golden;
pub mod latency;

#[allow(unused_imports)]
pub use checks::*;
#[allow(unused_imports)]
pub use datagrams::*;
#[allow(unused_imports)]
pub use events::*;
#[allow(unused_imports)]
pub use frames::*;
#[allow(unused_imports)]
pub use golden::*;
#[allow(unused_imports)]
pub use latency::*;
