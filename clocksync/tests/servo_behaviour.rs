//! Behaviour of the servos and the global clock against the simulated PHC
//! (simulated time: every test runs in milliseconds).

use std::time::Duration;

use clocksync::harness::{simulate, summarize};
use clocksync::servo::SanityConfig;
use clocksync::sim::{SimConfig, SimPhc};
use clocksync::{
    Discipline, FrequencyLimit, GlobalClock, PiGains, Servo, ServoConfig, ServoKind, ServoState,
};

const KINDS: [ServoKind; 2] = [ServoKind::Pi, ServoKind::LinReg];

#[test]
fn converges_from_100_ppm() {
    for kind in KINDS {
        let sim = SimConfig {
            freq_error_ppm: 100.0,
            read_jitter_ns: 50,
            ..Default::default()
        };
        let steps = simulate(sim, kind, ServoConfig::default(), 300);
        let s = summarize(&steps, 100);
        let settle = s.settle_s.expect("never settled");
        assert!(settle <= 10.0, "{kind:?}: settled after {settle} s");
        assert!(s.rms_ns <= 50.0, "{kind:?}: rms {} ns", s.rms_ns);
        // The frequency estimate is the PHC's frequency error.
        let last = steps.last().unwrap();
        assert!((last.report.freq_ppb - 100_000.0).abs() < 500.0, "{kind:?}");
    }
}

#[test]
fn converges_from_minus_100_ppm_with_software_gains() {
    // ptp4l's software gains (kp 0.1, ki 0.001) are slow but must get there.
    let cfg = ServoConfig {
        pi_gains: PiGains::PTP4L,
        hardware_timestamps: false,
        ..Default::default()
    };
    let sim = SimConfig {
        freq_error_ppm: -100.0,
        ..Default::default()
    };
    let steps = simulate(sim, ServoKind::Pi, cfg, 600);
    let s = summarize(&steps, 1_000);
    assert!(s.settle_s.is_some_and(|t| t < 300.0), "{s:?}");
}

#[test]
fn tracks_frequency_wander() {
    for kind in KINDS {
        let sim = SimConfig {
            wander_ppb: 20.0,
            seed: 42,
            ..Default::default()
        };
        let steps = simulate(sim, kind, ServoConfig::default(), 1000);
        let tail: Vec<_> = steps[20..].to_vec();
        let s = summarize(&tail, u64::MAX);
        assert!(s.rms_ns < 100.0, "{kind:?}: rms {} under wander", s.rms_ns);
    }
}

#[test]
fn the_clamp_follows_the_simulated_phcs_own_limit() {
    // 800 ppm is beyond what the simulated PHC reports (FrequencyLimit):
    // the servo saturates at exactly that limit instead of locking.
    let limit = SimPhc::new(SimConfig::default()).max_freq_ppb().unwrap();
    assert!(limit < 800_000.0);
    let sim = SimConfig {
        freq_error_ppm: 800.0,
        wander_ppb: 0.0,
        ..Default::default()
    };
    let steps = simulate(sim.clone(), ServoKind::Pi, ServoConfig::default(), 30);
    assert!(
        steps[2..].iter().all(|s| s.report.freq_ppb == limit),
        "{:?}",
        steps.iter().map(|s| s.report.freq_ppb).collect::<Vec<_>>()
    );
    // Told of a clock that takes 1000 ppm, the same servo locks.
    let cfg = ServoConfig {
        clock_max_freq_ppb: Some(1_000_000.0),
        ..Default::default()
    };
    let steps = simulate(sim, ServoKind::Pi, cfg, 30);
    assert!((steps[29].report.freq_ppb - 800_000.0).abs() < 100.0);
    assert!(steps[29].true_error_ns.abs() < 1_000);
}

fn run(d: &mut Discipline<SimPhc>, n: usize) -> Vec<ServoState> {
    (0..n)
        .map(|_| {
            let r = d.tick().unwrap().state;
            d.wait(Duration::from_secs(1));
            r
        })
        .collect()
}

#[test]
fn state_transitions_unlocked_jump_locked_stable() {
    for kind in KINDS {
        let clock = GlobalClock::default();
        let cfg = ServoConfig {
            stable_offset_threshold_ns: 200,
            num_offset_values: 5,
            ..Default::default()
        };
        let mut d = Discipline::new(
            SimPhc::new(SimConfig::default()),
            Servo::new(kind, cfg),
            clock.clone(),
        );
        let states = run(&mut d, 20);
        assert_eq!(states[0], ServoState::Unlocked, "{kind:?}");
        assert_eq!(states[1], ServoState::Jump, "{kind:?}");
        assert!(
            states[2..6].iter().all(|s| *s == ServoState::Locked),
            "{kind:?} {states:?}"
        );
        assert_eq!(states[19], ServoState::LockedStable, "{kind:?} {states:?}");
        assert_eq!(clock.state(), Some(ServoState::LockedStable));
        assert!(
            clock.error_estimate_ns() < 200,
            "{}",
            clock.error_estimate_ns()
        );
    }
}

#[test]
fn steps_on_a_large_offset() {
    // Without the sanity check the step threshold resets the servo at once
    // (linuxptp); with it the step is held for FOLLOW_AFTER updates first,
    // then followed through UNLOCKED and JUMP (here with no limit on the
    // moves followed: by default 5 ms is beyond it, see forged_reference.rs).
    let follow_any = SanityConfig {
        max_change_ns: None,
        ..Default::default()
    };
    for (sanity, first) in [
        (SanityConfig::OFF, ServoState::Unlocked),
        (follow_any, ServoState::Holdover),
    ] {
        for kind in KINDS {
            let clock = GlobalClock::default();
            let cfg = ServoConfig {
                step_threshold_ns: 100_000,
                sanity,
                ..Default::default()
            };
            let mut d = Discipline::new(
                SimPhc::new(SimConfig::default()),
                Servo::new(kind, cfg),
                clock.clone(),
            );
            run(&mut d, 10);
            // Someone sets the PHC 5 ms ahead.
            d.source_mut().step_phase_ns(5_000_000);
            let states = run(&mut d, 7);
            assert_eq!(states[0], first, "{kind:?} {states:?}");
            let jump = states.iter().position(|s| *s == ServoState::Jump);
            assert!(jump.is_some(), "{kind:?} {states:?}");
            assert!(states.last().unwrap().is_locked(), "{kind:?} {states:?}");
            let m = d.source().mono_ns();
            let err = clock.to_global_ns(m).unwrap() as i64 - d.source().true_ref_ns(m) as i64;
            assert!(err.abs() < 1_000, "{kind:?}: error {err} ns after the step");
        }
    }
}

#[test]
fn small_offset_is_slewed_not_stepped() {
    let clock = GlobalClock::default();
    let mut d = Discipline::new(
        SimPhc::new(SimConfig {
            freq_error_ppm: 5.0,
            ..Default::default()
        }),
        Servo::new(ServoKind::Pi, ServoConfig::default()),
        clock,
    );
    let states = run(&mut d, 10);
    assert!(!states.contains(&ServoState::Jump), "{states:?}");
}

#[test]
fn global_clock_is_monotonic_while_locked_and_history_converts_past_stamps() {
    let clock = GlobalClock::default();
    let sim = SimConfig {
        wander_ppb: 50.0,
        ..Default::default()
    };
    let start = sim.start_mono_ns;
    let mut d = Discipline::new(
        SimPhc::new(sim),
        Servo::new(ServoKind::Pi, ServoConfig::default()),
        clock.clone(),
    );
    run(&mut d, 3);
    let locked_from = d.source().mono_ns();
    // Convert stamps as they happen ("live"), remember the results.
    let mut live = Vec::new();
    for _ in 0..30 {
        let snap = clock.snapshot();
        let now = d.source().mono_ns();
        for k in 0..10 {
            let m = now - 1_000_000_000 + k * 100_000_000 + 1;
            if m >= locked_from {
                live.push((m, snap.to_global_ns(m).unwrap()));
            }
        }
        d.tick().unwrap();
        d.wait(Duration::from_secs(1));
    }
    // Later, the same stamps convert to the same values: each uses the
    // segment in force at its time, not today's frequency.
    let snap = clock.snapshot();
    for &(m, g) in &live {
        let again = snap.convert(m).unwrap();
        assert!(!again.stale);
        // Stamps taken just before an update were converted by
        // extrapolation; the new segment starts at the sample instant, so
        // they agree exactly.
        assert_eq!(
            again.global_ns,
            g,
            "stamp at {} s",
            (m - start) / 1_000_000_000
        );
    }
    // Monotonic over the whole locked period.
    let mut prev = 0;
    let mut m = locked_from;
    while m < d.source().mono_ns() {
        let g = snap.to_global_ns(m).unwrap();
        assert!(g > prev);
        prev = g;
        m += 7_777_777;
    }
}
