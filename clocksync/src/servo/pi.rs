//! Proportional-integral servo with phc2sys semantics (linuxptp `pi.c`,
//! read for its constants and behaviour; this is an independent rewrite).
//!
//! Internally it works in linuxptp's convention: `drift_ppb` is how fast the
//! local clock runs relative to the reference. The correction handed to the
//! caller is its negation (phc2sys likewise calls `clockadj_set_freq(-ppb)`).
//!
//! * Sample 1: remembered. Sample 2 (if at least `0.016 / ki` s later, with
//!   linuxptp's 0.1 % margin): frequency estimate
//!   `drift += (1e9 - drift) * Δoffset / Δlocal`, clamped; the first estimate
//!   (a JUMP may follow, decided by the common servo logic).
//! * Afterwards: `ppb = kp·offset + drift + ki·offset`; if that exceeds the
//!   clamp it is clamped and the integral is *not* updated (anti-windup),
//!   else `drift += ki·offset`.

use crate::servo::algorithm::{AlgoOutput, ServoAlgorithm, ServoConfig};

/// linuxptp `HWTS_KP_SCALE`: proportional scale with hardware stamps.
pub const HW_KP_SCALE: f64 = 0.7;
/// linuxptp `HWTS_KI_SCALE`: integral scale with hardware stamps.
pub const HW_KI_SCALE: f64 = 0.3;
/// linuxptp `SWTS_KP_SCALE`: proportional scale with software stamps.
pub const SW_KP_SCALE: f64 = 0.1;
/// linuxptp `SWTS_KI_SCALE`: integral scale with software stamps.
pub const SW_KI_SCALE: f64 = 0.001;
/// linuxptp `pi_proportional_exponent` default (`default.cfg`).
pub const KP_EXPONENT: f64 = -0.3;
/// linuxptp `pi_integral_exponent` default.
pub const KI_EXPONENT: f64 = 0.4;
/// linuxptp `pi_proportional_norm_max` default: kp ≤ 0.7 / interval.
pub const KP_NORM_MAX: f64 = 0.7;
/// linuxptp `pi_integral_norm_max` default: ki ≤ 0.3 / interval.
pub const KI_NORM_MAX: f64 = 0.3;
/// linuxptp `FREQ_EST_MARGIN`: the two first samples may be 0.1 % closer
/// than the minimum estimation interval.
pub const FREQ_EST_MARGIN: f64 = 0.001;
/// linuxptp: the frequency is estimated over at least `0.016 / ki` seconds,
/// at most this many seconds.
pub const FREQ_EST_MAX_INTERVAL_S: f64 = 1000.0;
/// linuxptp: numerator of the minimum estimation interval (`0.016 / ki`).
pub const FREQ_EST_KI_NUMERATOR: f64 = 0.016;

/// Gains for an update interval, as linuxptp's `pi_sync_interval`:
/// `kp = min(kp_scale · interval^-0.3, 0.7 / interval)`,
/// `ki = min(ki_scale · interval^0.4, 0.3 / interval)`.
/// At 1 s with hardware stamps: kp = 0.7, ki = 0.3.
pub fn gains(interval_s: f64, hardware_timestamps: bool) -> (f64, f64) {
    let (kp_scale, ki_scale) = if hardware_timestamps {
        (HW_KP_SCALE, HW_KI_SCALE)
    } else {
        (SW_KP_SCALE, SW_KI_SCALE)
    };
    let kp = (kp_scale * interval_s.powf(KP_EXPONENT)).min(KP_NORM_MAX / interval_s);
    let ki = (ki_scale * interval_s.powf(KI_EXPONENT)).min(KI_NORM_MAX / interval_s);
    (kp, ki)
}

/// The PI algorithm.
#[derive(Debug, Clone)]
pub struct PiServo {
    kp: f64,
    ki: f64,
    hardware_timestamps: bool,
    max_freq_ppb: f64,
    /// Integral term, linuxptp convention (local rate vs reference), ppb.
    drift_ppb: f64,
    first: Option<(i64, u64)>,
    estimated: bool,
}

impl PiServo {
    /// A PI servo with gains from `cfg.interval_s` and `cfg.hardware_timestamps`.
    pub fn new(cfg: &ServoConfig) -> Self {
        let (kp, ki) = gains(cfg.interval_s, cfg.hardware_timestamps);
        PiServo {
            kp,
            ki,
            hardware_timestamps: cfg.hardware_timestamps,
            max_freq_ppb: cfg.max_freq_ppb,
            drift_ppb: 0.0,
            first: None,
            estimated: false,
        }
    }

    /// Current proportional and integral gains.
    pub fn gains(&self) -> (f64, f64) {
        (self.kp, self.ki)
    }

    /// The integral term as a correction (ppb, positive = speed up).
    pub fn integral_ppb(&self) -> f64 {
        -self.drift_ppb
    }
}

impl ServoAlgorithm for PiServo {
    fn name(&self) -> &'static str {
        "pi"
    }

    fn sample(&mut self, offset_ns: i64, local_ts_ns: u64) -> AlgoOutput {
        let max = self.max_freq_ppb;
        if self.estimated {
            let ki_term = self.ki * offset_ns as f64;
            let ppb = self.kp * offset_ns as f64 + self.drift_ppb + ki_term;
            let ppb = if ppb < -max {
                -max
            } else if ppb > max {
                max
            } else {
                // Anti-windup: integrate only while the output is unclamped.
                self.drift_ppb += ki_term;
                ppb
            };
            return AlgoOutput::Ready {
                freq_ppb: -ppb,
                first: false,
            };
        }
        let Some((offset0, local0)) = self.first else {
            self.first = Some((offset_ns, local_ts_ns));
            return AlgoOutput::Collecting;
        };
        if local0 >= local_ts_ns {
            // Time went backwards or stood still: start over.
            self.first = None;
            return AlgoOutput::Collecting;
        }
        let dt_ns = (local_ts_ns - local0) as f64;
        let local_diff_s = dt_ns / 1e9 * (1.0 + FREQ_EST_MARGIN);
        let min_interval_s = (FREQ_EST_KI_NUMERATOR / self.ki).min(FREQ_EST_MAX_INTERVAL_S);
        if local_diff_s < min_interval_s {
            return AlgoOutput::Collecting;
        }
        self.drift_ppb += (1e9 - self.drift_ppb) * (offset_ns - offset0) as f64 / dt_ns;
        self.drift_ppb = self.drift_ppb.clamp(-max, max);
        self.estimated = true;
        AlgoOutput::Ready {
            freq_ppb: -self.drift_ppb,
            first: true,
        }
    }

    fn set_interval(&mut self, interval_s: f64) {
        (self.kp, self.ki) = gains(interval_s, self.hardware_timestamps);
    }

    fn stepped(&mut self, _offset_ns: i64) -> f64 {
        // The estimate is a pure frequency: a step does not change it.
        -self.drift_ppb
    }

    fn reset(&mut self) {
        // Like linuxptp: the drift survives a reset, the sample count does not.
        self.first = None;
        self.estimated = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gains_follow_linuxptp_rules() {
        assert_eq!(gains(1.0, true), (0.7, 0.3));
        assert_eq!(gains(1.0, false), (0.1, 0.001));
        // 8 s interval: kp = 0.7·8^-0.3 = 0.3789 (< 0.7/8? no: 0.0875 wins).
        let (kp, ki) = gains(8.0, true);
        assert!((kp - 0.0875).abs() < 1e-12, "{kp}");
        assert!((ki - 0.0375).abs() < 1e-12, "{ki}");
        // 1/16 s: kp = 0.7·16^0.3 = 1.6, ki = 0.3·16^-0.4 = 0.0991.
        let (kp, ki) = gains(1.0 / 16.0, true);
        assert!((kp - 0.7 * 16f64.powf(0.3)).abs() < 1e-12);
        assert!((ki - 0.3 * 16f64.powf(-0.4)).abs() < 1e-12);
    }

    #[test]
    fn first_two_samples_estimate_frequency() {
        let mut pi = PiServo::new(&ServoConfig::default());
        assert_eq!(pi.sample(0, 1_000_000_000), AlgoOutput::Collecting);
        // Local gained 100 µs in 1 s: 100 ppm fast → correction -100000 ppb.
        match pi.sample(100_000, 2_000_000_000) {
            AlgoOutput::Ready { freq_ppb, first } => {
                assert!(first);
                assert!((freq_ppb + 100_000.0).abs() < 1e-6, "{freq_ppb}");
            }
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn anti_windup_at_clamp() {
        let cfg = ServoConfig {
            max_freq_ppb: 1_000.0,
            ..Default::default()
        };
        let mut pi = PiServo::new(&cfg);
        pi.sample(0, 0);
        pi.sample(0, 1_000_000_000);
        let before = pi.integral_ppb();
        // A huge offset saturates the output; the integral must not move.
        for i in 2..20u64 {
            match pi.sample(1_000_000, i * 1_000_000_000) {
                AlgoOutput::Ready { freq_ppb, .. } => assert_eq!(freq_ppb, -1_000.0),
                o => panic!("{o:?}"),
            }
        }
        assert_eq!(pi.integral_ppb(), before);
        // Unsaturated again: the integral moves.
        pi.sample(100, 21_000_000_000);
        assert!((pi.integral_ppb() - (before - 30.0)).abs() < 1e-9);
    }
}
