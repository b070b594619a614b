//! The forged-reference run shared by the tests that drive it.

use clocksync::harness::{simulate_source, Forged, SimStep};
use clocksync::sim::{SimConfig, SimPhc};
use clocksync::{FrequencyLimit, Servo, ServoConfig, ServoKind};

/// The forgery starts here, well after the servo locked.
pub const ATTACK_S: f64 = 60.0;
/// Updates (1 s apart) per run.
pub const UPDATES: usize = 150;

/// `UPDATES` updates of a `kind` servo following the simulated PHC, every
/// reading shifted by `shift(t_s)` ns.
pub fn run(kind: ServoKind, shift: impl Fn(f64) -> i64 + Send + 'static) -> Vec<SimStep> {
    let sim = SimConfig::default();
    let start = sim.start_mono_ns;
    let phc = SimPhc::new(sim);
    let cfg = ServoConfig {
        clock_max_freq_ppb: phc.max_freq_ppb().ok(),
        ..Default::default()
    };
    simulate_source(
        Forged::new(phc, start, shift),
        start,
        Servo::new(kind, cfg),
        UPDATES,
    )
}
