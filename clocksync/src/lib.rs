//! Clocks, offset measurement, servos and the global software clock.
//!
//! The global clock is a mapping from CLOCK_MONOTONIC to a TAI-scale time
//! axis; it never adjusts a system clock, so tracing cannot disturb the host.

pub mod bracket;

pub use bracket::{measure_offset, BracketSample, ClockId};
