//! How far a forged answer stream moves a clock: runs the servos against
//! the simulated PHC behind a man in the middle without the key
//! ([`clocksync::harness::Forged`]), with the sanity check on (the
//! default) and off (every sample followed, as before issue 16), and
//! prints one line per forgery. Simulated time: runs in a second.
//!
//! `cargo run -p clocksync --example forged_reference`

use clocksync::harness::{simulate_forged, SimStep};
use clocksync::{SanityConfig, ServoKind};

/// The forgery starts here (the servo locked long before).
const ATTACK_S: f64 = 60.0;
/// Updates, 1 s apart.
const UPDATES: usize = 400;

/// One forgery: from ATTACK_S on, a constant shift, or a ramp.
#[derive(Debug, Clone, Copy)]
enum Forgery {
    /// Shift every reading by this, ns.
    Step(i64),
    /// Shift by this many ns per second, for this many seconds (then
    /// keep the shift reached).
    Ramp(f64, f64),
}

impl Forgery {
    fn shift(self) -> impl Fn(f64) -> i64 + Send + 'static {
        move |t| match self {
            Forgery::Step(ns) if t >= ATTACK_S => ns,
            Forgery::Step(_) => 0,
            Forgery::Ramp(rate, secs) => ((t - ATTACK_S).clamp(0.0, secs) * rate).round() as i64,
        }
    }
}

fn run(
    kind: ServoKind,
    sanity: SanityConfig,
    shift: impl Fn(f64) -> i64 + Send + 'static,
) -> Vec<SimStep> {
    simulate_forged(kind, sanity, UPDATES, shift)
}

/// Largest |true error| from the attack on, ns; and whether every update's
/// estimate from then on covered the true error its mapping had.
fn outcome(steps: &[SimStep]) -> (u64, bool) {
    let after = steps.iter().filter(|s| s.t_s >= ATTACK_S);
    let worst = after
        .clone()
        .map(|s| {
            s.true_error_ns
                .unsigned_abs()
                .max(s.true_error_after_ns.unsigned_abs())
        })
        .max()
        .unwrap_or(0);
    let covered = after
        .filter(|s| s.report.state != clocksync::ServoState::Jump)
        .all(|s| s.report.error_estimate_ns >= s.true_error_after_ns.unsigned_abs());
    (worst, covered)
}

fn main() {
    let scenarios = [
        ("+5 ms step", Forgery::Step(5_000_000)),
        ("+600 us step", Forgery::Step(600_000)),
        ("100 us/s for 30 s", Forgery::Ramp(100_000.0, 30.0)),
        ("15 us/s for 300 s", Forgery::Ramp(15_000.0, 300.0)),
        ("12 us/s for 300 s", Forgery::Ramp(12_000.0, 300.0)),
        ("5 us/s for 300 s", Forgery::Ramp(5_000.0, 300.0)),
    ];
    println!(
        "{:<20} {:<7} {:>16} {:>16}  {:<8} {:<8} sanity counters (on)",
        "forgery", "servo", "moved, off (ns)", "moved, on (ns)", "covered", "end"
    );
    for (name, forgery) in scenarios {
        for kind in [ServoKind::Pi, ServoKind::LinReg] {
            let (off, _) = outcome(&run(kind, SanityConfig::OFF, forgery.shift()));
            let on = run(kind, SanityConfig::default(), forgery.shift());
            let (worst, covered) = outcome(&on);
            let last = on.last().map(|s| s.report);
            println!(
                "{name:<20} {:<7} {off:>16} {worst:>16}  {:<8} {:<8} {:?}",
                format!("{kind:?}"),
                covered,
                last.map_or("-".into(), |r| format!("{:?}", r.state)),
                last.map(|r| r.sanity).unwrap_or_default(),
            );
        }
    }
}
