//! A man in the middle without the key (issue 16): a bridge that rewrites
//! the reference's answers moves every reading it forwards. Simulated
//! time, deterministic: the reference is the simulated PHC, the forgery
//! [`Forged`], the truth the PHC's own. The servo's sanity check
//! (`servo/sanity.rs`) must flag what the clock cannot explain, bound how
//! far it follows, and keep its error estimate honest.

mod forged;

use clocksync::harness::SimStep;
use clocksync::servo::sanity::{JUMP_FLOOR_NS, MAX_CHANGE_NS, MAX_FREQ_CHANGE_PPB};
use clocksync::{ServoKind, ServoState};
use forged::{run, ATTACK_S};

const KINDS: [ServoKind; 2] = [ServoKind::Pi, ServoKind::LinReg];

fn attacked(steps: &[SimStep]) -> impl Iterator<Item = &SimStep> {
    steps.iter().filter(|s| s.t_s >= ATTACK_S)
}

/// Largest |true error| once the forgery started, ns.
fn max_true_error_ns(steps: &[SimStep]) -> u64 {
    attacked(steps)
        .map(|s| {
            s.true_error_ns
                .unsigned_abs()
                .max(s.true_error_after_ns.unsigned_abs())
        })
        .max()
        .unwrap_or(0)
}

/// Before the forgery the servo is locked and accurate: what follows is
/// the forgery's doing.
fn assert_locked_before_the_attack(kind: ServoKind, steps: &[SimStep]) {
    let before: Vec<_> = steps
        .iter()
        .filter(|s| (30.0..ATTACK_S).contains(&s.t_s))
        .collect();
    assert!(
        before.iter().all(|s| s.report.state.is_locked()),
        "{kind:?}: not locked before the attack"
    );
    let worst = before
        .iter()
        .map(|s| s.true_error_ns.unsigned_abs())
        .max()
        .unwrap_or(0);
    assert!(worst < 1_000, "{kind:?}: {worst} ns off before the attack");
}

/// The error estimate is never below what the data show, and it covers the
/// true error: from the first lock on, every update's estimate is at least
/// its sample's |offset| (except a JUMP, which removes it) and at least the
/// true error of the mapping it put in force.
fn assert_estimate_covers(kind: ServoKind, steps: &[SimStep]) {
    let first_lock = steps
        .iter()
        .position(|s| s.report.state.is_locked())
        .expect("the servo locked");
    for s in &steps[first_lock..] {
        let r = &s.report;
        assert!(
            r.error_estimate_ns >= s.true_error_after_ns.unsigned_abs(),
            "{kind:?} at {:.0} s: estimate {} ns, true error {} ns ({:?})",
            s.t_s,
            r.error_estimate_ns,
            s.true_error_after_ns,
            r.state
        );
        if r.state != ServoState::Jump {
            assert!(
                r.error_estimate_ns >= r.offset_ns.unsigned_abs(),
                "{kind:?} at {:.0} s: estimate {} ns below the offset {} ns the sample shows ({:?})",
                s.t_s,
                r.error_estimate_ns,
                r.offset_ns,
                r.state
            );
        }
    }
}

fn states_from(steps: &[SimStep], t_s: f64) -> Vec<ServoState> {
    steps
        .iter()
        .filter(|s| s.t_s >= t_s)
        .map(|s| s.report.state)
        .collect()
}

/// The defect: a bridge rewriting t2/t3 by +5 ms took an agent's clock
/// 5 ms off in one update, and its estimate said 1.4 ms at most.
#[test]
fn a_forged_5_ms_step_is_not_followed_and_the_estimate_shows_it() {
    for kind in KINDS {
        let steps = run(kind, |t| if t >= ATTACK_S { 5_000_000 } else { 0 });
        assert_locked_before_the_attack(kind, &steps);
        let worst = max_true_error_ns(&steps);
        assert!(
            worst < JUMP_FLOOR_NS,
            "{kind:?}: the forged step moved the clock {worst} ns"
        );
        assert_estimate_covers(kind, &steps);
        // Flagged from the first forged answer on, and counted; it stays
        // put, but 5 ms is beyond the moves the servo follows.
        let states = states_from(&steps, ATTACK_S);
        assert!(
            states.iter().all(|&s| s == ServoState::Holdover),
            "{kind:?}: {states:?}"
        );
        let c = steps.last().unwrap().report.sanity;
        assert_eq!(c.rejected, states.len() as u64, "{kind:?}: {c:?}");
        assert_eq!(c.reacquired, 0, "{kind:?}: {c:?}");
        assert!(c.beyond_max_change > 0, "{kind:?}: {c:?}");
    }
}

/// The defect's second half: a 100 µs/s ramp over 30 s moved the clock
/// 3 ms while it reported LOCKED with a 22-60 µs estimate.
#[test]
fn a_forged_100_us_per_s_ramp_is_not_followed_and_the_estimate_shows_it() {
    for kind in KINDS {
        let steps = run(kind, |t| {
            ((t - ATTACK_S).clamp(0.0, 30.0) * 100_000.0).round() as i64
        });
        assert_locked_before_the_attack(kind, &steps);
        let worst = max_true_error_ns(&steps);
        assert!(
            worst < JUMP_FLOOR_NS,
            "{kind:?}: the forged ramp moved the clock {worst} ns"
        );
        assert_estimate_covers(kind, &steps);
        // 100 µs per update is beyond the 20 µs floor from the first
        // sample: held throughout, never followed (a running-away
        // reference never agrees with itself; once it stops, 3 ms is
        // beyond the moves the servo follows).
        let states = states_from(&steps, ATTACK_S + 1.0);
        assert!(
            states.iter().all(|&s| s == ServoState::Holdover),
            "{kind:?}: {states:?}"
        );
        assert_eq!(steps.last().unwrap().report.sanity.reacquired, 0);
    }
}

/// A ramp slower than the floor per update but faster than the band:
/// dragged at the band's edge (flagged) until its offset passes the
/// floor, then held. It moves the clock at most `floor + band ×
/// floor / (rate − band)`: here 20 µs + 10 ppm × 4 s = 60 µs.
#[test]
fn a_slow_forged_ramp_beyond_the_band_is_limited_then_held() {
    let rate = 15_000.0;
    let band = MAX_FREQ_CHANGE_PPB;
    let floor = JUMP_FLOOR_NS as f64;
    let bound = (floor + band * floor / (rate - band)) as u64;
    for kind in KINDS {
        let steps = run(kind, move |t| {
            ((t - ATTACK_S).clamp(0.0, 300.0) * rate).round() as i64
        });
        assert_locked_before_the_attack(kind, &steps);
        let worst = max_true_error_ns(&steps);
        assert!(
            worst <= bound,
            "{kind:?}: moved {worst} ns, more than {bound} ns"
        );
        assert_estimate_covers(kind, &steps);
        let c = steps.last().unwrap().report.sanity;
        assert!(c.freq_limited > 0 && c.rejected > 0, "{kind:?}: {c:?}");
        assert_eq!(c.reacquired, 0, "{kind:?}: {c:?}");
    }
}

/// What no check can see: a ramp slower than the band looks like the
/// oscillator's own drift. It is the one way to move the clock silently,
/// and the band bounds it: at most `MAX_FREQ_CHANGE_PPB` ns per second.
#[test]
fn a_forged_ramp_below_the_band_is_bounded_by_it() {
    let secs = 80.0;
    for kind in KINDS {
        let steps = run(kind, move |t| {
            ((t - ATTACK_S).clamp(0.0, secs) * 5_000.0).round() as i64
        });
        let worst = max_true_error_ns(&steps);
        let bound = (MAX_FREQ_CHANGE_PPB * secs) as u64;
        assert!(worst <= bound, "{kind:?}: {worst} ns > {bound} ns");
        // Followed (5 ppm is a drift a crystal may have), unflagged.
        assert!(worst > 350_000, "{kind:?}: {worst} ns");
        assert_eq!(steps.last().unwrap().report.sanity.rejected, 0);
    }
}

/// A move within `MAX_CHANGE_NS` that stays put is followed, visibly:
/// FOLLOW_AFTER held updates, then UNLOCKED (re-estimation) and a JUMP,
/// counted as a re-acquisition. That is the documented limit of what a
/// persistent forger achieves this way.
#[test]
fn a_forged_step_within_max_change_is_followed_visibly() {
    for kind in KINDS {
        let steps = run(kind, |t| if t >= ATTACK_S { 600_000 } else { 0 });
        let states = states_from(&steps, ATTACK_S);
        use ServoState::*;
        assert_eq!(
            states[..6],
            [Holdover, Holdover, Holdover, Unlocked, Jump, Locked],
            "{kind:?}"
        );
        assert!(states[6..].iter().all(|s| s.is_locked()), "{kind:?}");
        let c = steps.last().unwrap().report.sanity;
        assert_eq!((c.rejected, c.reacquired), (4, 1), "{kind:?}: {c:?}");
        // The clock now follows the forged reference: 600 µs off, within
        // the limit on what it follows.
        let end = steps.last().unwrap().true_error_ns.unsigned_abs();
        assert!(
            (590_000..=MAX_CHANGE_NS).contains(&end),
            "{kind:?}: {end} ns"
        );
    }
}

/// A forgery that stops leaves nothing behind: the clock held through it
/// and locks again where it was.
#[test]
fn a_transient_forgery_leaves_the_clock_where_it_was() {
    for kind in KINDS {
        let steps = run(kind, |t| {
            if (ATTACK_S..ATTACK_S + 10.0).contains(&t) {
                -5_000_000
            } else {
                0
            }
        });
        let states = states_from(&steps, ATTACK_S + 10.0);
        assert!(states.iter().all(|s| s.is_locked()), "{kind:?}: {states:?}");
        let worst = max_true_error_ns(&steps);
        assert!(worst < 1_000, "{kind:?}: {worst} ns");
        assert_eq!(steps.last().unwrap().report.sanity.rejected, 10);
    }
}
