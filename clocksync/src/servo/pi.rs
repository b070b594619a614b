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
//! * Gains: phc2sys's constants kp 0.7 / ki 0.3 (default) or ptp4l's
//!   interval-derived ones ([`PiGains`], [`gains`]). At a 1 s interval
//!   with hardware scales both give 0.7 / 0.3; elsewhere they differ.

use crate::servo::algorithm::{AlgoOutput, PiGains, ServoAlgorithm, ServoConfig};

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

/// linuxptp `MAX_KP_NORM_MAX`: a constant kp is capped at 1.0 / interval.
pub const CONST_KP_NORM_MAX: f64 = 1.0;
/// linuxptp `MAX_KI_NORM_MAX`: a constant ki is capped at 2.0 / interval.
pub const CONST_KI_NORM_MAX: f64 = 2.0;

/// One gain as linuxptp's `pi_sync_interval` computes it:
/// `scale · interval^exponent`, capped at `norm_max / interval`.
/// (Same operations in the same order, so the result is bit-identical.)
fn gain(scale: f64, exponent: f64, norm_max: f64, interval_s: f64) -> f64 {
    let g = scale * interval_s.powf(exponent);
    if g > norm_max / interval_s {
        norm_max / interval_s
    } else {
        g
    }
}

/// Gains `(kp, ki)` for an update interval, as linuxptp's `pi_servo_create`
/// and `pi_sync_interval` choose them (see [`PiGains`]): a constant term is
/// `min(const, norm / interval)` with norm 1.0 (kp) or 2.0 (ki); a zero one
/// is ptp4l's `min(scale · interval^-0.3, 0.7 / interval)` (kp),
/// `min(scale · interval^0.4, 0.3 / interval)` (ki).
///
/// phc2sys at 4 s: kp = 0.25, ki = 0.3; ptp4l at 4 s: kp = 0.175, ki = 0.075.
pub fn gains(interval_s: f64, pi_gains: PiGains, hardware_timestamps: bool) -> (f64, f64) {
    let (kp_scale, ki_scale) = if hardware_timestamps {
        (HW_KP_SCALE, HW_KI_SCALE)
    } else {
        (SW_KP_SCALE, SW_KI_SCALE)
    };
    let kp = if pi_gains.kp_const > 0.0 {
        gain(pi_gains.kp_const, 0.0, CONST_KP_NORM_MAX, interval_s)
    } else {
        gain(kp_scale, KP_EXPONENT, KP_NORM_MAX, interval_s)
    };
    let ki = if pi_gains.ki_const > 0.0 {
        gain(pi_gains.ki_const, 0.0, CONST_KI_NORM_MAX, interval_s)
    } else {
        gain(ki_scale, KI_EXPONENT, KI_NORM_MAX, interval_s)
    };
    (kp, ki)
}

/// The PI algorithm.
#[derive(Debug, Clone)]
pub struct PiServo {
    kp: f64,
    ki: f64,
    pi_gains: PiGains,
    hardware_timestamps: bool,
    /// Bounds of the correction, ppb (`set_freq_bounds`; ± the clock's
    /// limit until told otherwise).
    lo_ppb: f64,
    hi_ppb: f64,
    /// Integral term, linuxptp convention (local rate vs reference), ppb.
    drift_ppb: f64,
    first: Option<(i64, u64)>,
    estimated: bool,
}

impl PiServo {
    /// A PI servo with gains from `cfg.pi_gains`, `cfg.interval_s` and
    /// `cfg.hardware_timestamps`.
    pub fn new(cfg: &ServoConfig) -> Self {
        let (kp, ki) = gains(cfg.interval_s, cfg.pi_gains, cfg.hardware_timestamps);
        PiServo {
            kp,
            ki,
            pi_gains: cfg.pi_gains,
            hardware_timestamps: cfg.hardware_timestamps,
            lo_ppb: -cfg.max_freq_ppb(),
            hi_ppb: cfg.max_freq_ppb(),
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
        // drift_ppb is the negated correction: its bounds swap and negate.
        let (min, max) = (-self.hi_ppb, -self.lo_ppb);
        if self.estimated {
            let ki_term = self.ki * offset_ns as f64;
            let ppb = self.kp * offset_ns as f64 + self.drift_ppb + ki_term;
            let ppb = if ppb < min {
                min
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
        // pi.c's order of operations, so the boundary case matches too.
        let mut local_diff_s = dt_ns / 1e9;
        local_diff_s += local_diff_s * FREQ_EST_MARGIN;
        let min_interval_s = (FREQ_EST_KI_NUMERATOR / self.ki).min(FREQ_EST_MAX_INTERVAL_S);
        if local_diff_s < min_interval_s {
            return AlgoOutput::Collecting;
        }
        self.drift_ppb += (1e9 - self.drift_ppb) * (offset_ns - offset0) as f64 / dt_ns;
        self.drift_ppb = self.drift_ppb.clamp(min, max);
        self.estimated = true;
        AlgoOutput::Ready {
            freq_ppb: -self.drift_ppb,
            first: true,
        }
    }

    fn set_interval(&mut self, interval_s: f64) {
        (self.kp, self.ki) = gains(interval_s, self.pi_gains, self.hardware_timestamps);
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

    fn set_freq_bounds(&mut self, lo_ppb: f64, hi_ppb: f64) {
        (self.lo_ppb, self.hi_ppb) = (lo_ppb, hi_ppb);
    }

    fn frequency_ppb(&self) -> Option<f64> {
        // The integral term: the proportional one answers the last offset.
        self.estimated.then_some(-self.drift_ppb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTP4L: PiGains = PiGains::PTP4L;
    const PHC2SYS: PiGains = PiGains::PHC2SYS;

    #[test]
    fn ptp4l_gains_follow_the_interval() {
        assert_eq!(gains(1.0, PTP4L, true), (0.7, 0.3));
        assert_eq!(gains(1.0, PTP4L, false), (0.1, 0.001));
        // 8 s interval: kp = 0.7·8^-0.3 = 0.3789 (< 0.7/8? no: 0.0875 wins).
        let (kp, ki) = gains(8.0, PTP4L, true);
        assert!((kp - 0.0875).abs() < 1e-12, "{kp}");
        assert!((ki - 0.0375).abs() < 1e-12, "{ki}");
        // 1/16 s: kp = 0.7·16^0.3 = 1.6, ki = 0.3·16^-0.4 = 0.0991.
        let (kp, ki) = gains(1.0 / 16.0, PTP4L, true);
        assert!((kp - 0.7 * 16f64.powf(0.3)).abs() < 1e-12);
        assert!((ki - 0.3 * 16f64.powf(-0.4)).abs() < 1e-12);
    }

    #[test]
    fn phc2sys_gains_are_constant_up_to_the_stability_caps() {
        // phc2sys: kp 0.7 / ki 0.3 at any rate the caps (1.0/interval,
        // 2.0/interval) allow; the software scales play no part.
        for hw in [true, false] {
            assert_eq!(gains(1.0, PHC2SYS, hw), (0.7, 0.3));
            assert_eq!(gains(0.25, PHC2SYS, hw), (0.7, 0.3));
            assert_eq!(gains(1.0 / 16.0, PHC2SYS, hw), (0.7, 0.3));
            // 4 s: kp capped at 1.0/4, ki (0.3 < 2.0/4) is not.
            assert_eq!(gains(4.0, PHC2SYS, hw), (0.25, 0.3));
            // 10 s: both capped.
            assert_eq!(gains(10.0, PHC2SYS, hw), (0.1, 0.2));
        }
        // phc2sys -P 0 (only kp from the interval, with hardware scales).
        let mixed = PiGains {
            kp_const: 0.0,
            ki_const: 0.3,
        };
        assert_eq!(gains(4.0, mixed, true).1, 0.3);
        assert_eq!(gains(4.0, mixed, true).0, gains(4.0, PTP4L, true).0);
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
            clock_max_freq_ppb: Some(1_000.0),
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
