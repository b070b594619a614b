//! Clocks, offset measurement, servos and the global software clock.
//!
//! The global clock is a mapping from CLOCK_MONOTONIC to a TAI-scale time
//! axis; it never adjusts a system clock, so tracing cannot disturb the host.
//!
//! Layers, bottom up; a module imports only from layers below it
//! (the workspace's `tests/tests/module_graph.rs` fails on an import cycle):
//! * [`error`], [`worker`]: the error type; a stoppable background thread.
//! * [`bracket`]: bracketed reads of system clocks.
//! * [`source`]: the [`Clock`] / [`ReferenceClock`] traits
//!   ([`source::traits`]), one file per source ([`source::system`],
//!   [`source::phc`], [`source::sim`], [`source::exchange`]), and
//!   [`SourceSpec`] ([`source::spec`]), the one place that knows them all;
//!   [`source::oscillator`], a simulated separate machine's clock (tests).
//! * [`servo`]: the algorithm trait, the state machine and factory, PI and
//!   linreg: pure arithmetic.
//! * [`limit`]: each clock's own frequency limit ([`FrequencyLimit`]), the
//!   servo's default clamp.
//! * [`global`]: the software clock with history, cheap to read.
//! * [`discipline`]: source + servo + global clock, one `tick()` per update.
//! * [`harness`]: simulation runs for tests and benchmarks; nothing in the
//!   library imports it.

pub mod bracket;
pub mod discipline;
pub mod error;
pub mod global;
pub mod harness;
pub mod limit;
pub mod servo;
pub mod source;
pub mod worker;

pub use source::exchange;
pub use source::sim;

pub use bracket::{measure_offset, now_ns, BracketSample, ClockId};
pub use discipline::{ClockReport, Discipline};
pub use error::{ClockError, MessageError};
pub use global::{ClockSnapshot, Conversion, GlobalClock, GlobalClockConfig};
pub use limit::FrequencyLimit;
pub use servo::{
    MaxChange, PiGains, SanityConfig, SanityCounters, Servo, ServoConfig, ServoKind, ServoOutput,
    ServoState,
};
pub use source::inject::{MAX_INJECTED_DRIFT_PPM, MAX_INJECTED_OFFSET_NS};
pub use source::{
    Clock, ErrorInjection, OffsetSample, Oscillator, OscillatorSpec, ReferenceClock, SourceOptions,
    SourceSpec, SystemClock,
};
pub use worker::{StopFlag, Worker};
