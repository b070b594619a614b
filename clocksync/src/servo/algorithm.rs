//! The servo algorithm interface alone (linuxptp's `servo.h`): an
//! algorithm turns offsets into a frequency; its typed configuration.
//! The state machine around it lives in `machine.rs`; PI and linear
//! regression implement it in `pi.rs` and `linreg.rs`.

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
    /// Frequency correction clamp in ppb. linuxptp uses the clock's maximum
    /// adjustment (its `max_frequency` default 900000000 only caps that); a
    /// software clock has no such limit, so we take 1000 ppm, 10x the worst
    /// crystal a host is expected to have, which still catches a runaway.
    pub max_freq_ppb: f64,
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
}

impl Default for ServoConfig {
    fn default() -> Self {
        ServoConfig {
            interval_s: 1.0,
            pi_gains: PiGains::default(),
            first_step_threshold_ns: 20_000,
            step_threshold_ns: 0,
            max_freq_ppb: 1_000_000.0,
            stable_offset_threshold_ns: 1_000,
            num_offset_values: 10,
            hardware_timestamps: true,
        }
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
}
