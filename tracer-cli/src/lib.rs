//! Value checks for the command lines of every nettrace binary
//! (tracer-agent, tracer-sink, clocksync, nettrace-match).
//!
//! Each parser is a plain `Fn(&str) -> Result<T, String>`, which clap takes
//! as a `value_parser`: a bad value is refused while the command line is
//! parsed, with one line naming the option and its range, and exit code 2,
//! before anything is opened, loaded or bound. Nothing is clamped: a value
//! outside its range is an error, never quietly moved inside it.
//!
//! The ranges are the binaries' to choose; each option's `--help` states
//! its range as `[range: LO..=HI UNIT]` (or `[range: 0 or LO..=HI UNIT]`
//! where 0 has a meaning of its own), which the workspace's
//! `tests/tests/cli_values.rs` reads back and checks against what the
//! binary accepts.

pub mod duration;
pub mod net;
pub mod number;
pub mod text;

pub use duration::duration_ns;
pub use net::{host_port, listen_addr};
pub use number::{int, millis, power_of_two, real, secs, secs_or_zero};
pub use text::{file_name_part, hostname, hostname_problem, iface_name, name_problem};
