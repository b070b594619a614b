//! Servos, linuxptp's split: the algorithm interface ([`algorithm`]), the
//! state machine and factory ([`machine`]), and one file per algorithm
//! ([`pi`], [`linreg`]). Pure arithmetic: no servo makes a system call.

pub mod algorithm;
pub mod linreg;
pub mod machine;
pub mod pi;

pub use algorithm::{AlgoOutput, PiGains, ServoAlgorithm, ServoConfig};
pub use machine::{Servo, ServoKind, ServoOutput, ServoState};
