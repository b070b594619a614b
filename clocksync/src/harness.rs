//! Test harness, not part of the library's path: run a servo against the
//! simulated PHC in simulated time and summarise the true error. Used by
//! the servo tests and `examples/servo_bench.rs`; no library module imports
//! it (a test in `tests/module_graph.rs` checks that).

use crate::discipline::{ClockReport, Discipline};
use crate::global::GlobalClock;
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
/// (simulated time: returns at once).
pub fn simulate(
    sim: SimConfig,
    kind: ServoKind,
    servo_cfg: ServoConfig,
    count: usize,
) -> Vec<SimStep> {
    let interval_ns = (servo_cfg.interval_s * 1e9).round() as u64;
    let start = sim.start_mono_ns;
    let clock = GlobalClock::default();
    let mut d = Discipline::new(SimPhc::new(sim), Servo::new(kind, servo_cfg), clock.clone());
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
