//! Test harness, not part of the library's path: run a servo against the
//! simulated PHC in simulated time and summarise the true error. Used by
//! the servo tests and `examples/servo_bench.rs`; no library module imports
//! it (a test in `tests/module_graph.rs` checks that).

use crate::discipline::{ClockReport, Discipline};
use crate::global::GlobalClock;
use crate::limit::FrequencyLimit;
use crate::servo::algorithm::ServoConfig;
use crate::servo::machine::{Servo, ServoKind};
use crate::source::sim::{SimConfig, SimPhc};

/// One simulated update: the servo's report and the true error of the
/// global clock at the sample instant.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct SimStep {
    /// Simulated time since the start, s.
    pub t_s: f64,
    /// The discipline's report.
    pub report: ClockReport,
    /// `global - true PHC` at the sample's monotonic instant under the
    /// mapping in force *before* this update: the error events stamped at
    /// the end of the past interval got (the worst point of a segment), ns.
    pub true_error_ns: i64,
}

/// Run a servo against a simulated PHC for `count` updates of `interval_s`
/// (simulated time: returns at once). Unless `servo_cfg` names a clock
/// limit, the simulated PHC's own ([`FrequencyLimit`]) is used.
pub fn simulate(
    sim: SimConfig,
    kind: ServoKind,
    mut servo_cfg: ServoConfig,
    count: usize,
) -> Vec<SimStep> {
    let interval_ns = (servo_cfg.interval_s * 1e9).round() as u64;
    let start = sim.start_mono_ns;
    let clock = GlobalClock::default();
    let phc = SimPhc::new(sim);
    if servo_cfg.clock_max_freq_ppb.is_none() {
        servo_cfg.clock_max_freq_ppb = phc.max_freq_ppb().ok();
    }
    let mut d = Discipline::new(phc, Servo::new(kind, servo_cfg), clock.clone());
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let before = clock.snapshot();
        // The simulated PHC cannot fail.
        if let Ok(report) = d.tick() {
            let m = report.mono_ns;
            let g = before
                .to_global_ns(m)
                .or_else(|| clock.to_global_ns(m))
                .unwrap_or(0);
            let truth = d.source().true_ref_ns(m);
            out.push(SimStep {
                t_s: (m - start) as f64 / 1e9,
                report,
                true_error_ns: g.wrapping_sub(truth) as i64,
            });
        }
        d.wait(std::time::Duration::from_nanos(interval_ns));
    }
    out
}

/// Figures of merit of a simulated run.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct SimSummary {
    /// First time after which |true error| stays below the threshold, s.
    pub settle_s: Option<f64>,
    /// RMS of the true error after settling, ns.
    pub rms_ns: f64,
    /// Max |true error| after settling, ns.
    pub max_ns: u64,
}

/// Summarise a run: settling time to `threshold_ns`, then RMS and max.
pub fn summarize(steps: &[SimStep], threshold_ns: u64) -> SimSummary {
    let last_bad = steps
        .iter()
        .rposition(|s| s.true_error_ns.unsigned_abs() >= threshold_ns);
    let first_good = match last_bad {
        None => 0,
        Some(i) => i + 1,
    };
    let tail = &steps[first_good.min(steps.len())..];
    let settle_s = tail.first().map(|s| s.t_s);
    let n = tail.len().max(1) as f64;
    let rms_ns = (tail
        .iter()
        .map(|s| (s.true_error_ns as f64).powi(2))
        .sum::<f64>()
        / n)
        .sqrt();
    let max_ns = tail
        .iter()
        .map(|s| s.true_error_ns.unsigned_abs())
        .max()
        .unwrap_or(0);
    SimSummary {
        settle_s,
        rms_ns,
        max_ns,
    }
}

/// A deterministic closed loop for comparing the servo with linuxptp's
/// step by step (`bench/clock-servo.sh` drives linuxptp's `servo.c` +
/// `pi.c` through the same plant in C, `bench/ref/pi_parity.c`).
///
/// `phase = disciplined - reference` (ns). Each update measures
/// `round(phase) + noise`, feeds the servo at `t0 + k·interval`, steps
/// `phase` by `-offset` on JUMP, applies the servo's frequency on JUMP and
/// LOCKED*, and then lets one interval pass:
/// `phase += (drift + applied) · interval`. Everything is done in the same
/// order as the C twin, so equal servos give bit-equal outputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ParityPlant {
    /// How fast the undisciplined clock runs against the reference, ppb.
    pub drift_ppb: f64,
    /// Initial `disciplined - reference`, ns.
    pub phase_ns: f64,
    /// Measurement noise: uniform integer in `[-noise_ns, noise_ns]` from a
    /// 64-bit LCG (Knuth's MMIX constants, bits 33..63).
    pub noise_ns: u64,
    /// LCG seed.
    pub seed: u64,
    /// The reference steps by `.1` ns just before update `.0`.
    pub event: Option<(usize, i64)>,
    /// Local timestamp of update 0, ns.
    pub t0_ns: u64,
}

impl Default for ParityPlant {
    fn default() -> Self {
        ParityPlant {
            drift_ppb: 0.0,
            phase_ns: 0.0,
            noise_ns: 0,
            seed: 1,
            event: None,
            t0_ns: 1_000_000_000,
        }
    }
}

/// Run [`ParityPlant`] for `count` updates. Each report's `freq_ppb` is the
/// correction in force after the update (as [`Discipline`] reports it);
/// linuxptp's servo output is its negation.
pub fn parity_loop(
    plant: ParityPlant,
    kind: ServoKind,
    cfg: ServoConfig,
    count: usize,
) -> Vec<ClockReport> {
    use crate::servo::machine::ServoState;
    use crate::source::traits::OffsetSample;

    let interval_s = cfg.interval_s;
    let interval_ns = (interval_s * 1e9).round() as u64;
    let mut servo = Servo::new(kind, cfg);
    let mut phase = plant.phase_ns;
    let mut applied = 0.0f64;
    let mut lcg = plant.seed;
    let mut out = Vec::with_capacity(count);
    for k in 0..count {
        if let Some((at, step_ns)) = plant.event {
            if at == k {
                phase += step_ns as f64;
            }
        }
        let mut noise = 0i64;
        if plant.noise_ns > 0 {
            lcg = lcg
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            noise = ((lcg >> 33) % (2 * plant.noise_ns + 1)) as i64 - plant.noise_ns as i64;
        }
        let offset_ns = phase.round() as i64 + noise;
        let ts = plant.t0_ns + k as u64 * interval_ns;
        let o = servo.sample(offset_ns, ts);
        match o.state {
            ServoState::Unlocked => {}
            ServoState::Jump => {
                phase -= offset_ns as f64;
                applied = o.freq_ppb;
            }
            ServoState::Locked | ServoState::LockedStable => applied = o.freq_ppb,
        }
        out.push(ClockReport {
            mono_ns: ts,
            offset_ns,
            freq_ppb: o.freq_ppb,
            delay_ns: 0,
            state: o.state,
            error_estimate_ns: 0,
            sample: OffsetSample::default(),
        });
        phase += (plant.drift_ppb + applied) * interval_s;
    }
    out
}
