//! Clocks, offset measurement, servos and the global software clock.
//!
//! The global clock is a mapping from CLOCK_MONOTONIC to a TAI-scale time
//! axis; it never adjusts a system clock, so tracing cannot disturb the host.
//!
//! Layers, bottom up:
//! * [`bracket`]: bracketed reads of system clocks.
//! * [`clock`]: the [`Clock`] and [`ReferenceClock`] traits, system clocks,
//!   error injection, and [`SourceSpec`] to open a source from a string.
//! * [`phc`] (real PTP hardware clock), [`sim`] (simulated PHC),
//!   [`exchange`] (two-way exchange over UDP, kernel stamped): more sources.
//! * [`servo`] (trait + state machine), [`pi`], [`linreg`]: pure arithmetic.
//! * [`global`]: the software clock with history, cheap to read.
//! * [`discipline`]: source + servo + global clock, one `tick()` per update.

pub mod bracket;
pub mod clock;
pub mod discipline;
pub mod error;
pub mod exchange;
pub mod global;
pub mod linreg;
pub mod phc;
pub mod pi;
pub mod servo;
pub mod sim;

pub use bracket::{measure_offset, now_ns, BracketSample, ClockId};
pub use clock::{Clock, ErrorInjection, OffsetSample, ReferenceClock, SourceSpec, SystemClock};
pub use discipline::{ClockReport, Discipline};
pub use error::ClockError;
pub use global::{ClockSnapshot, Conversion, GlobalClock, GlobalClockConfig};
pub use servo::{Servo, ServoConfig, ServoKind, ServoOutput, ServoState};
