//! Trace files for the tests and the benchmarks, never shipped: a
//! simulated two-host TCP connection with known truth ([`synth`]) and
//! traces shaped to be the worst case of the readers' indexes
//! ([`crafted`]). Both are written by the sink's own writer
//! ([`tracer_sink::TraceWriter`]), so the readers are fed the bytes the
//! sink writes.

pub mod crafted;
pub mod synth;
