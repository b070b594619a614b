//! The forged-reference run shared by the tests that drive it.

use clocksync::harness::{simulate_forged, SimStep};
use clocksync::{SanityConfig, ServoKind};

/// The forgery starts here, well after the servo locked.
pub const ATTACK_S: f64 = 60.0;
/// Updates (1 s apart) per run.
pub const UPDATES: usize = 150;

/// `UPDATES` updates of a `kind` servo with the default sanity check,
/// every reading shifted by `shift(t_s)` ns.
pub fn run(kind: ServoKind, shift: impl Fn(f64) -> i64 + Send + 'static) -> Vec<SimStep> {
    simulate_forged(kind, SanityConfig::default(), UPDATES, shift)
}
