//! tracer-agent: loads the BPF probes, converts kernel stamps to the
//! global clock, batches events into datagrams and sends them to a sink.

pub mod acks;
pub mod clock;
pub mod collect;
pub mod cpucost;
pub mod filter;
#[cfg(test)]
mod host_c;
pub mod metrics;
pub mod pipeline;
pub mod preflight;
pub mod probes;
pub mod run;
pub mod self_traffic;
pub mod sender;
pub mod stamp;
pub mod stats;
pub mod synthetic;
