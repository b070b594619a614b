//! The PI servo against numbers taken from linuxptp's own `servo.c` +
//! `pi.c` (commit f98cb5d, June 2026), run in the closed loop of
//! `clocksync::harness::parity_loop` by its C twin `bench/ref/pi_parity.c`
//! with the same arguments (`bench/clock-servo.sh` reruns the whole
//! comparison against a linuxptp checkout). Each row is one update:
//! (offset ns, state as phc2sys prints it after `s`, linuxptp's servo
//! output in ppb, i.e. the negated correction).

use clocksync::harness::{parity_loop, ParityPlant};
use clocksync::{PiGains, ServoConfig, ServoKind};

/// linuxptp's defaults where this crate's differ.
fn linuxptp_cfg() -> ServoConfig {
    ServoConfig {
        stable_offset_threshold_ns: 0,
        clock_max_freq_ppb: Some(100_000_000.0),
        ..Default::default()
    }
}

fn check(plant: ParityPlant, cfg: ServoConfig, expected: &[(i64, u8, f64)]) {
    let got = parity_loop(plant, ServoKind::Pi, cfg.clone(), expected.len());
    for (k, (r, &(offset, state, ppb))) in got.iter().zip(expected).enumerate() {
        let ours = -r.freq_ppb;
        assert!(
            r.offset_ns == offset && r.state.code() == state && (ours - ppb).abs() < 1e-6,
            "update {k} with {cfg:?}: ours ({}, s{}, {ours:.9}), linuxptp ({offset}, s{state}, {ppb:.9})",
            r.offset_ns,
            r.state.code(),
        );
    }
}

/// 50 ppm fast, 3 µs off, ±200 ns noise (seed 7).
fn noisy() -> ParityPlant {
    ParityPlant {
        drift_ppb: 50_000.0,
        phase_ns: 3_000.0,
        noise_ns: 200,
        seed: 7,
        ..Default::default()
    }
}

#[test]
fn phc2sys_gains_at_a_quarter_second_match_phc2sys() {
    // pi_parity interval=0.25 (phc2sys: -R 4, kp 0.7, ki 0.3).
    let cfg = ServoConfig {
        interval_s: 0.25,
        pi_gains: PiGains::PHC2SYS,
        ..linuxptp_cfg()
    };
    check(
        noisy(),
        cfg,
        &[
            (3169, 0, -0.0),
            (15468, 2, 49196.0),
            (15650, 2, 64846.0),
            (11818, 2, 65709.0),
            (8060, 2, 65496.4),
            (4318, 2, 64172.4),
            (729, 2, 61878.8),
            (-2288, 2, 59080.5),
            (-4747, 2, 55935.1),
            (-6006, 2, 53252.0),
        ],
    );
}

#[test]
fn ptp4l_gains_at_a_quarter_second_match_ptp4l() {
    // pi_parity interval=0.25 kp=0 ki=0 (kp = 0.7·0.25^-0.3, ki = 0.3·0.25^0.4).
    let cfg = ServoConfig {
        interval_s: 0.25,
        pi_gains: PiGains::PTP4L,
        ..linuxptp_cfg()
    };
    check(
        noisy(),
        cfg,
        &[
            (3169, 0, -0.0),
            (15468, 2, 49196.0),
            (15650, 2, 68497.244374477),
            (10905, 2, 65341.775132999),
            (7239, 2, 62699.457388794),
            (4196, 2, 60193.820275105),
            (1602, 2, 57717.614348341),
            (-374, 2, 55556.633215829),
            (-1953, 2, 53544.800511768),
            (-2614, 2, 52393.073831450),
        ],
    );
}

#[test]
fn phc2sys_gains_at_four_seconds_match_phc2sys() {
    // pi_parity interval=4: kp capped at 1.0/4 = 0.25, ki stays 0.3.
    let cfg = ServoConfig {
        interval_s: 4.0,
        pi_gains: PiGains::PHC2SYS,
        ..linuxptp_cfg()
    };
    check(
        noisy(),
        cfg,
        &[
            (3169, 0, -0.0),
            (202968, 1, 49949.75),
            (182, 2, 50049.85),
            (-138, 2, 49928.45),
            (318, 2, 50137.85),
            (-102, 2, 50002.25),
            (-157, 2, 49941.4),
            (31, 2, 49997.7),
            (-149, 2, 49908.0),
            (444, 2, 50189.45),
        ],
    );
}

#[test]
fn ptp4l_gains_at_four_seconds_match_ptp4l() {
    // pi_parity interval=4 kp=0 ki=0: kp = 0.7/4, ki = 0.3/4 (both capped).
    let cfg = ServoConfig {
        interval_s: 4.0,
        pi_gains: PiGains::PTP4L,
        ..linuxptp_cfg()
    };
    check(
        noisy(),
        cfg,
        &[
            (3169, 0, -0.0),
            (202968, 1, 49949.75),
            (182, 2, 49995.25),
            (80, 2, 49983.4),
            (316, 2, 50048.4),
            (255, 2, 50056.85),
            (-19, 2, 50007.475),
            (-96, 2, 49986.8),
            (-232, 2, 49945.6),
            (211, 2, 50038.95),
        ],
    );
}

#[test]
fn the_default_is_phc2sys() {
    assert_eq!(ServoConfig::default().pi_gains, PiGains::PHC2SYS);
    assert_eq!("ptp4l".parse::<PiGains>(), Ok(PiGains::PTP4L));
    assert_eq!("phc2sys".parse::<PiGains>(), Ok(PiGains::PHC2SYS));
    assert!("pid".parse::<PiGains>().is_err());
}

#[test]
fn above_the_step_threshold_right_after_a_jump_starts_over_as_pi_c_does() {
    // pi_parity step=0.001 phase_ns=5000000 drift_ppb=10000 event_at=2
    // event_ns=3000000: JUMP at update 1, then the reference moves 3 ms
    // (above the 1 ms step threshold) before the next update: pi.c resets
    // (s0, s0), re-estimates and JUMPs again. Before the fix this servo
    // went s2 with +3 010 000 ppb.
    let plant = ParityPlant {
        drift_ppb: 10_000.0,
        phase_ns: 5_000_000.0,
        event: Some((2, 3_000_000)),
        ..Default::default()
    };
    let cfg = ServoConfig {
        step_threshold_ns: 1_000_000,
        ..linuxptp_cfg()
    };
    check(
        plant,
        cfg,
        &[
            (5_000_000, 0, -0.0),
            (5_010_000, 1, 10_000.0),
            (3_000_000, 0, 10_000.0),
            (3_000_000, 0, 10_000.0),
            (3_000_000, 1, 10_000.0),
            (0, 2, 10_000.0),
            (0, 2, 10_000.0),
        ],
    );
}

#[test]
fn below_the_step_threshold_right_after_a_jump_locks() {
    // Same, the reference moves -0.8 ms (below the threshold): s2 at once.
    let plant = ParityPlant {
        drift_ppb: 10_000.0,
        phase_ns: 5_000_000.0,
        event: Some((2, -800_000)),
        ..Default::default()
    };
    let cfg = ServoConfig {
        step_threshold_ns: 1_000_000,
        ..linuxptp_cfg()
    };
    let got = parity_loop(plant, ServoKind::Pi, cfg, 4);
    let states: Vec<u8> = got.iter().map(|r| r.state.code()).collect();
    assert_eq!(states, [0, 1, 2, 2]);
}

#[test]
fn the_clamp_is_the_clocks_limit_capped_by_max_frequency() {
    // pi_parity max_ppb=50000 drift_ppb=30000 first_step=0 phase_ns=100000:
    // a clock that takes at most 50 ppm; the output saturates there.
    let plant = ParityPlant {
        drift_ppb: 30_000.0,
        phase_ns: 100_000.0,
        ..Default::default()
    };
    let cfg = ServoConfig {
        first_step_threshold_ns: 0,
        clock_max_freq_ppb: Some(50_000.0),
        ..linuxptp_cfg()
    };
    check(
        plant,
        cfg.clone(),
        &[
            (100_000, 0, -0.0),
            (130_000, 2, 30_000.0),
            (130_000, 2, 50_000.0),
            (110_000, 2, 50_000.0),
            (90_000, 2, 50_000.0),
            (70_000, 2, 50_000.0),
        ],
    );
    // ... and max_frequency=20000 below it: the estimate itself is clamped.
    let capped = ServoConfig {
        max_frequency_ppb: 20_000.0,
        ..cfg
    };
    check(
        plant,
        capped,
        &[
            (100_000, 0, -0.0),
            (130_000, 2, 20_000.0),
            (140_000, 2, 20_000.0),
            (150_000, 2, 20_000.0),
            (160_000, 2, 20_000.0),
            (170_000, 2, 20_000.0),
        ],
    );
}

#[test]
fn phc2sys_lines_match_phc2sys_text() {
    // pi_parity n=6 interval=0.5 delay=1234 phase_ns=-30000
    // drift_ppb=12345.678 noise_ns=77 seed=99: the -m lines, character
    // for character (phc2sys's format string, its servo's sign).
    let plant = ParityPlant {
        drift_ppb: 12_345.678,
        phase_ns: -30_000.0,
        noise_ns: 77,
        seed: 99,
        ..Default::default()
    };
    let cfg = ServoConfig {
        interval_s: 0.5,
        ..linuxptp_cfg()
    };
    let lines: Vec<String> = parity_loop(plant, ServoKind::Pi, cfg, 6)
        .into_iter()
        .map(|mut r| {
            r.delay_ns = 1234;
            r.phc2sys_line()
        })
        .collect();
    assert_eq!(
        lines,
        [
            "offset    -30009 s0 freq      -0 delay   1234",
            "offset    -23868 s1 freq  +12282 delay   1234",
            "offset       103 s2 freq  +12385 delay   1234",
            "offset         3 s2 freq  +12316 delay   1234",
            "offset        75 s2 freq  +12389 delay   1234",
            "offset        47 s2 freq  +12383 delay   1234",
        ]
    );
}
