//! The servo algorithm interface alone (linuxptp's `servo.h`): an
//! algorithm turns offsets into a frequency; its typed configuration.
//! The state machine around it lives in `machine.rs`; PI and linear
//! regression implement it in `pi.rs` and `linreg.rs`.

use crate::servo::sanity::SanityConfig;

/// Where the PI servo's gains come from: linuxptp's two rules, per term.
///
/// * A non-zero constant is used as it is, whatever the interval, capped
///   only where the loop would turn unstable: `kp ≤ 1.0 / interval`,
///   `ki ≤ 2.0 / interval` (pi.c's `MAX_KP_NORM_MAX`, `MAX_KI_NORM_MAX`).
///   phc2sys sets 0.7 / 0.3 this way (its `-P` / `-I`), so its loop does
///   the same per update at any `-R` rate.
/// * A zero constant derives the term from the interval as ptp4l does:
///   `kp = scale · interval^-0.3 ≤ 0.7 / interval`,
///   `ki = scale · interval^0.4 ≤ 0.3 / interval`, with the hardware or
///   software scales (see `servo/pi.rs`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PiGains {
    /// Proportional constant (phc2sys `-P`, linuxptp `pi_proportional_const`);
    /// 0 = derive it from the interval.
    pub kp_const: f64,
    /// Integral constant (phc2sys `-I`, linuxptp `pi_integral_const`);
    /// 0 = derive it from the interval.
    pub ki_const: f64,
}

impl PiGains {
    /// phc2sys: fixed kp 0.7, ki 0.3 (its `KP` / `KI` defaults).
    pub const PHC2SYS: PiGains = PiGains {
        kp_const: 0.7,
        ki_const: 0.3,
    };
    /// ptp4l (`default.cfg`): both gains derived from the interval.
    pub const PTP4L: PiGains = PiGains {
        kp_const: 0.0,
        ki_const: 0.0,
    };
}

impl Default for PiGains {
    /// phc2sys's: this crate disciplines a clock to a clock, as phc2sys does.
    fn default() -> Self {
        PiGains::PHC2SYS
    }
}

impl std::str::FromStr for PiGains {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "phc2sys" => Ok(PiGains::PHC2SYS),
            "ptp4l" => Ok(PiGains::PTP4L),
            other => Err(format!(
                "unknown PI gains {other:?}: expected phc2sys or ptp4l"
            )),
        }
    }
}

/// linuxptp's `max_frequency` default (`config.c`), ppb.
pub const MAX_FREQUENCY_PPB: f64 = 900_000_000.0;

/// The limit of a clock that was not asked: what linuxptp's
/// `clockadj_max_freq` assumes when the kernel reports no tolerance
/// (500 ppm, the kernel's `MAXFREQ`), ppb.
pub const FALLBACK_MAX_FREQ_PPB: f64 = 500_000.0;

/// Typed servo configuration. Defaults follow linuxptp's `default.cfg`
/// where a tracer has no reason to differ (noted per field).
#[derive(Debug, Clone, PartialEq)]
pub struct ServoConfig {
    /// Update interval in seconds (phc2sys `-R` is its inverse).
    pub interval_s: f64,
    /// PI gains: phc2sys's fixed constants (default) or ptp4l's
    /// interval-derived ones.
    pub pi_gains: PiGains,
    /// Step on the first update when |offset| exceeds this (0 = never).
    /// linuxptp `first_step_threshold` default: 0.00002 s = 20 µs.
    pub first_step_threshold_ns: i64,
    /// Step whenever |offset| exceeds this (0 = never, linuxptp default 0.0).
    pub step_threshold_ns: i64,
    /// The disciplined clock's own frequency limit, ppb: what phc2sys asks
    /// the clock it adjusts for (`clockadj_max_freq`, the PHC's `max_adj`);
    /// here [`crate::limit::FrequencyLimit`] of the reference. `None`: not
    /// asked, [`FALLBACK_MAX_FREQ_PPB`] stands in.
    pub clock_max_freq_ppb: Option<f64>,
    /// linuxptp `max_frequency`: caps the clock's limit (0 = no cap).
    /// Default 900 000 000, as linuxptp's.
    pub max_frequency_ppb: f64,
    /// LOCKED becomes LOCKED_STABLE after `num_offset_values` offsets below
    /// this (0 = never). linuxptp's `servo_offset_threshold` defaults to 0
    /// (off); a tracer wants the flag, so we default to 1 µs, about ten times
    /// the kernel-stamped exchange's p99 under load.
    pub stable_offset_threshold_ns: i64,
    /// linuxptp `servo_num_offset_values` default: 10.
    pub num_offset_values: u32,
    /// Timestamps come from hardware (PHC, NIC). Selects the scales of
    /// interval-derived PI gains (hardware 0.7/0.3, software 0.1/0.001 in
    /// linuxptp); constant gains ignore it, as phc2sys does.
    pub hardware_timestamps: bool,
    /// The sanity check common to every algorithm (`sanity.rs`): on by
    /// default; [`SanityConfig::OFF`] follows every sample, as linuxptp.
    pub sanity: SanityConfig,
}

impl Default for ServoConfig {
    fn default() -> Self {
        ServoConfig {
            interval_s: 1.0,
            pi_gains: PiGains::default(),
            first_step_threshold_ns: 20_000,
            step_threshold_ns: 0,
            clock_max_freq_ppb: None,
            max_frequency_ppb: MAX_FREQUENCY_PPB,
            stable_offset_threshold_ns: 1_000,
            num_offset_values: 10,
            hardware_timestamps: true,
            sanity: SanityConfig::default(),
        }
    }
}

impl ServoConfig {
    /// The frequency clamp the algorithms use, ppb: the clock's own limit,
    /// capped by `max_frequency_ppb` when that is non-zero (linuxptp's
    /// `servo_create`).
    pub fn max_freq_ppb(&self) -> f64 {
        let clock = self.clock_max_freq_ppb.unwrap_or(FALLBACK_MAX_FREQ_PPB);
        if self.max_frequency_ppb > 0.0 && clock > self.max_frequency_ppb {
            self.max_frequency_ppb
        } else {
            clock
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamp_is_the_clocks_limit_capped_by_max_frequency() {
        let cfg = |clock, cap| ServoConfig {
            clock_max_freq_ppb: clock,
            max_frequency_ppb: cap,
            ..Default::default()
        };
        // servo.c: the clock's limit, unless max_frequency is lower.
        assert_eq!(
            cfg(Some(62_499_999.0), MAX_FREQUENCY_PPB).max_freq_ppb(),
            62_499_999.0
        );
        assert_eq!(
            cfg(Some(1e9), MAX_FREQUENCY_PPB).max_freq_ppb(),
            MAX_FREQUENCY_PPB
        );
        assert_eq!(cfg(Some(100_000.0), 50_000.0).max_freq_ppb(), 50_000.0);
        // max_frequency 0: no cap.
        assert_eq!(cfg(Some(1e9), 0.0).max_freq_ppb(), 1e9);
        // Not asked: linuxptp's fallback.
        assert_eq!(ServoConfig::default().max_freq_ppb(), FALLBACK_MAX_FREQ_PPB);
    }
}

/// What an algorithm says about one sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AlgoOutput {
    /// Still collecting samples: no estimate yet.
    Collecting,
    /// A frequency correction (ppb, positive = speed the local clock up).
    /// `first` is true for the first estimate after creation or reset.
    Ready {
        /// Correction to apply, ppb.
        freq_ppb: f64,
        /// First estimate since reset (a JUMP may happen here).
        first: bool,
    },
}

/// One servo algorithm (PI, linear regression). The common state machine in
/// [`Servo`] wraps it; an algorithm only turns offsets into a frequency.
pub trait ServoAlgorithm: Send {
    /// Short name ("pi", "linreg").
    fn name(&self) -> &'static str;
    /// Feed one offset (`local - reference`, ns) measured at `local_ts_ns`.
    fn sample(&mut self, offset_ns: i64, local_ts_ns: u64) -> AlgoOutput;
    /// The update interval changed.
    fn set_interval(&mut self, interval_s: f64);
    /// The caller steps the local clock by `-offset_ns` (JUMP). Returns
    /// the frequency correction to use after the step (ppb).
    fn stepped(&mut self, offset_ns: i64) -> f64;
    /// Forget everything except the configuration (and the last frequency).
    fn reset(&mut self);
    /// Keep corrections within `[lo_ppb, hi_ppb]` from now on, instead of
    /// ±[`ServoConfig::max_freq_ppb`] (the sanity check's band, see
    /// `sanity.rs`); an output at a bound was clamped. Anti-windup applies
    /// at these bounds.
    fn set_freq_bounds(&mut self, lo_ppb: f64, hi_ppb: f64);
    /// The caller held a sample back and runs the clock at `freq_ppb` from
    /// `local_ts_ns` on, not at the last correction returned. An algorithm
    /// that keeps account of what it did to the clock updates it here.
    fn hold(&mut self, _local_ts_ns: u64, _freq_ppb: f64) {}
    /// The algorithm's estimate of the reference's frequency as a
    /// correction, ppb, without the part that removes the current offset:
    /// what the clock should run at when it stops following (holdover).
    fn frequency_ppb(&self) -> Option<f64> {
        None
    }
}
