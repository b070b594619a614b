//! The servo algorithm interface alone (linuxptp's `servo.h`): an
//! algorithm turns offsets into a frequency; its typed configuration.
//! The state machine around it lives in `machine.rs`; PI and linear
//! regression implement it in `pi.rs` and `linreg.rs`.

/// Typed servo configuration. Defaults follow linuxptp's `default.cfg`
/// where a tracer has no reason to differ (noted per field).
#[derive(Debug, Clone, PartialEq)]
pub struct ServoConfig {
    /// Update interval in seconds; the PI gains are derived from it.
    pub interval_s: f64,
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
    /// Timestamps come from hardware (PHC, NIC). Selects the PI gain scales
    /// (hardware 0.7/0.3, software 0.1/0.001 in linuxptp).
    pub hardware_timestamps: bool,
}

impl Default for ServoConfig {
    fn default() -> Self {
        ServoConfig {
            interval_s: 1.0,
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
