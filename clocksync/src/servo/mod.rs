//! Servos, linuxptp's split: the algorithm interface ([`algorithm`]), the
//! state machine and factory ([`machine`]), one file per algorithm
//! ([`pi`], [`linreg`]), and the sanity check common to all ([`sanity`]).
//! Pure arithmetic: no servo makes a system call.

pub mod algorithm;
pub mod linreg;
pub mod machine;
pub mod pi;
pub mod sanity;

pub use algorithm::{AlgoOutput, PiGains, ServoAlgorithm, ServoConfig};
pub use machine::{Servo, ServoKind, ServoOutput, ServoState};
pub use sanity::{MaxChange, SanityConfig, SanityCounters, SanityEvent};
