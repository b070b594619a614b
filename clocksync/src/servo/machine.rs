//! The logic common to every servo: the state machine, first-step / step
//! thresholds and stable detection, and the factory that picks an
//! algorithm ([`ServoKind`] → `Box<dyn ServoAlgorithm>`).
//!
//! A servo is pure arithmetic. It is fed `offset_ns = local - reference`
//! (the disciplined clock minus the reference, sampled at the local
//! monotonic instant `local_ts_ns`) and answers with a frequency correction
//! and a state. The caller (see `discipline.rs`) applies both to the global
//! clock; no servo ever makes a system call.
//!
//! # State machine (same meaning as linuxptp's `enum servo_state`)
//!
//! ```text
//!            first samples, or reset (offset > step threshold)
//!   UNLOCKED ─────────────────────────────┐
//!      │ frequency estimate ready          │
//!      ├── |offset| > first-step / step ──► JUMP ──┐ caller steps the clock
//!      │                                          │ by -offset, sets freq
//!      └──────────────► LOCKED ◄──────────────────┘
//!                        │  ▲  num_offset_values consecutive samples with
//!                        ▼  │  |offset| < stable_offset_threshold_ns
//!                     LOCKED_STABLE
//! ```
//!
//! * `UNLOCKED`: no frequency estimate yet; the caller leaves the clock alone.
//! * `JUMP`: the caller steps the clock by `-offset_ns` and applies
//!   `freq_ppb`. Only on the first update (`first_step_threshold_ns`) or when
//!   `step_threshold_ns` is non-zero.
//! * `LOCKED`: the caller applies `freq_ppb`.
//! * `LOCKED_STABLE`: as LOCKED, and the last `num_offset_values` offsets were
//!   all under `stable_offset_threshold_ns`.
//!
//! Once the algorithm has its estimate (state JUMP, LOCKED or
//! LOCKED_STABLE), an offset above a non-zero `step_threshold_ns` resets it
//! (state UNLOCKED); it re-estimates the frequency and then JUMPs. That
//! includes the sample right after a JUMP (a step that did not take, or a
//! reference that moved again): linuxptp's `pi.c` checks in its
//! "estimated" phase, which a JUMP has already entered.
//!
//! # HOLDOVER: the sanity check (`sanity.rs`, not in linuxptp)
//!
//! ```text
//!   LOCKED ── offset beyond the phase limit, or correction at the band ──► HOLDOVER
//!   HOLDOVER ── offset within the limit again ──► LOCKED
//!   HOLDOVER ── M agreeing held samples, within max_change ──► UNLOCKED ──► JUMP ──► LOCKED
//! ```
//!
//! * `HOLDOVER`: the reference moved further or faster than this clock
//!   can; the caller applies `freq_ppb` (for a held sample the baseline
//!   frequency, or before it is learned the algorithm's frequency estimate;
//!   the band's edge for a limited one) and does not step.
//!
//! Before the algorithm sees a sample, the sanity check may hold it (it is
//! not fed: HOLDOVER) or decide to follow a persisting move (the algorithm
//! is reset, and its first estimate JUMPs whatever the step thresholds
//! say). The step threshold applies to the samples it lets through.
//!
//! # Error estimate
//!
//! Each update also says how far the clock may be from the reference
//! after it (`error_estimate_ns`), never less than the data show:
//! `max(RMS of the last accepted offsets, |this offset|) + the sample's
//! uncertainty` (half its bracket or round trip); a held sample is not
//! accepted, but its |offset| counts: the reference disagrees by that
//! much. In HOLDOVER, add how far the clock ran from its baseline
//! frequency during the episode (`sanity.rs`). UNLOCKED: |offset| +
//! uncertainty; JUMP: the uncertainty alone (the step removed the offset).

use crate::error::ClockError;
use crate::servo::algorithm::{AlgoOutput, ServoAlgorithm, ServoConfig};
use crate::servo::linreg::LinReg;
use crate::servo::pi::PiServo;
use crate::servo::sanity::{Judgement, Residuals, Sanity, SanityCounters, SanityEvent, UpdateKind};

/// Servo state; see the module documentation for the transitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ServoState {
    /// No frequency estimate yet: do not touch the clock.
    Unlocked,
    /// Step the clock by `-offset_ns`, then apply `freq_ppb`.
    Jump,
    /// Apply `freq_ppb`.
    Locked,
    /// Apply `freq_ppb`; the offset has been small for a while.
    LockedStable,
    /// The reference moved beyond what this clock can explain (sanity
    /// check): apply `freq_ppb`, do not step; the clock is not following
    /// the reference (fully).
    Holdover,
}

impl ServoState {
    /// The number phc2sys prints after `s` (s0 unlocked, s1 jump, s2 locked,
    /// s3 locked stable; phc2sys has no s4, nettrace's holdover).
    pub fn code(self) -> u8 {
        match self {
            ServoState::Unlocked => 0,
            ServoState::Jump => 1,
            ServoState::Locked => 2,
            ServoState::LockedStable => 3,
            ServoState::Holdover => 4,
        }
    }

    /// True in LOCKED and LOCKED_STABLE: following the reference.
    pub fn is_locked(self) -> bool {
        matches!(self, ServoState::Locked | ServoState::LockedStable)
    }

    /// True in LOCKED, LOCKED_STABLE and HOLDOVER: the clock has its
    /// frequency and runs continuously, so it can serve time to others
    /// (a sink's responder answers as synchronised).
    pub fn serves_time(self) -> bool {
        self.is_locked() || self == ServoState::Holdover
    }
}

/// Which algorithm drives the frequency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ServoKind {
    /// Proportional-integral controller (phc2sys default), `pi.rs`.
    #[default]
    Pi,
    /// Least-squares fit over a sliding, self-sizing window, `linreg.rs`.
    LinReg,
}

impl std::str::FromStr for ServoKind {
    type Err = ClockError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "pi" => Ok(ServoKind::Pi),
            "linreg" => Ok(ServoKind::LinReg),
            other => Err(ClockError::UnknownServo(other.into())),
        }
    }
}

impl ServoKind {
    /// A fresh algorithm of this kind.
    pub fn algorithm(self, cfg: &ServoConfig) -> Box<dyn ServoAlgorithm> {
        match self {
            ServoKind::Pi => Box::new(PiServo::new(cfg)),
            ServoKind::LinReg => Box::new(LinReg::new(cfg)),
        }
    }
}

/// The servo's answer to one sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServoOutput {
    /// Frequency correction for the local clock, ppb (positive = faster).
    pub freq_ppb: f64,
    /// What to do with it.
    pub state: ServoState,
    /// How far the clock may be from the reference after this update, ns
    /// (see the module documentation).
    pub error_estimate_ns: u64,
    /// What the sanity check has to report about this sample.
    pub event: Option<SanityEvent>,
}

/// A servo: an algorithm plus the common state machine.
pub struct Servo {
    algo: Box<dyn ServoAlgorithm>,
    cfg: ServoConfig,
    first_update: bool,
    /// Samples still needed below the stable threshold (linuxptp's
    /// `curr_offset_values`).
    stable_countdown: u32,
    last_freq_ppb: f64,
    state: ServoState,
    sanity: Sanity,
    /// Offsets of the last accepted LOCKED updates.
    recent: Residuals,
    /// Following a persisting move: the next first estimate steps.
    pending_step: bool,
}

impl std::fmt::Debug for Servo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Servo")
            .field("algo", &self.algo.name())
            .field("state", &self.state)
            .field("freq_ppb", &self.last_freq_ppb)
            .finish()
    }
}

impl Servo {
    /// A servo of the given kind.
    pub fn new(kind: ServoKind, cfg: ServoConfig) -> Self {
        Self::with_algorithm(kind.algorithm(&cfg), cfg)
    }

    /// A servo around any algorithm.
    pub fn with_algorithm(algo: Box<dyn ServoAlgorithm>, cfg: ServoConfig) -> Self {
        Servo {
            algo,
            stable_countdown: cfg.num_offset_values,
            sanity: Sanity::new(cfg.sanity),
            cfg,
            first_update: true,
            last_freq_ppb: 0.0,
            state: ServoState::Unlocked,
            recent: Residuals::default(),
            pending_step: false,
        }
    }

    /// The algorithm's name.
    pub fn name(&self) -> &'static str {
        self.algo.name()
    }

    /// The configuration.
    pub fn config(&self) -> &ServoConfig {
        &self.cfg
    }

    /// The state after the last sample.
    pub fn state(&self) -> ServoState {
        self.state
    }

    /// Change the update interval (re-derives the PI gains).
    pub fn set_interval(&mut self, interval_s: f64) {
        self.cfg.interval_s = interval_s;
        self.algo.set_interval(interval_s);
    }

    /// What the sanity check did so far.
    pub fn sanity_counters(&self) -> SanityCounters {
        self.sanity.counters()
    }

    /// The frequency learned at lock, the centre of the sanity check's
    /// band, once learned, ppb.
    pub fn baseline_ppb(&self) -> Option<f64> {
        self.sanity.baseline_ppb()
    }

    /// Back to UNLOCKED (keeps the last frequency, and the sanity check's
    /// baseline and moves followed: the oscillator did not change).
    pub fn reset(&mut self) {
        self.algo.reset();
        self.stable_countdown = self.cfg.num_offset_values;
        self.state = ServoState::Unlocked;
        self.recent.clear();
        self.pending_step = false;
        self.sanity
            .after_update(UpdateKind::Unlocked, None, 0, self.last_freq_ppb);
    }

    fn exceeds(threshold_ns: i64, offset_ns: i64) -> bool {
        threshold_ns > 0 && offset_ns.unsigned_abs() > threshold_ns.unsigned_abs()
    }

    /// Feed one sample: `offset_ns = local - reference` at `local_ts_ns`,
    /// of unknown uncertainty (see [`Self::update`]).
    pub fn sample(&mut self, offset_ns: i64, local_ts_ns: u64) -> ServoOutput {
        self.update(offset_ns, local_ts_ns, 0)
    }

    /// Feed one sample: `offset_ns = local - reference` at `local_ts_ns`,
    /// within ± `uncertainty_ns` of the truth (asymmetry aside).
    /// On [`ServoState::Jump`] the caller must step the local clock by
    /// `-offset_ns` (and apply `freq_ppb`); this servo already assumes it did.
    pub fn update(&mut self, offset_ns: i64, local_ts_ns: u64, uncertainty_ns: u64) -> ServoOutput {
        let mut event = None;
        match self.sanity.judge(offset_ns, local_ts_ns, &self.recent) {
            Judgement::Accept => {}
            Judgement::Hold(e) => return self.hold(offset_ns, local_ts_ns, uncertainty_ns, e),
            Judgement::Follow(e) => {
                // The reference moved and stayed: re-acquire it.
                self.algo.reset();
                self.pending_step = true;
                event = Some(e);
            }
        }
        let (lo, hi) = self.sanity.freq_bounds(self.cfg.max_freq_ppb());
        self.algo.set_freq_bounds(lo, hi);
        // Past UNLOCKED the algorithm has its estimate (pi.c's count 2).
        let estimated = self.state != ServoState::Unlocked && !self.pending_step;
        let state = if estimated && Self::exceeds(self.cfg.step_threshold_ns, offset_ns) {
            // Too far off to slew: re-estimate, then JUMP (linuxptp does the same).
            self.algo.reset();
            ServoState::Unlocked
        } else {
            match self.algo.sample(offset_ns, local_ts_ns) {
                AlgoOutput::Collecting => ServoState::Unlocked,
                AlgoOutput::Ready { freq_ppb, first } => {
                    self.last_freq_ppb = freq_ppb;
                    let step = first
                        && (self.pending_step
                            || (self.first_update
                                && Self::exceeds(self.cfg.first_step_threshold_ns, offset_ns))
                            || Self::exceeds(self.cfg.step_threshold_ns, offset_ns));
                    if step {
                        self.pending_step = false;
                        self.last_freq_ppb = self.algo.stepped(offset_ns);
                        ServoState::Jump
                    } else {
                        ServoState::Locked
                    }
                }
            }
        };
        // At a bound the algorithm clamped: the reference wants more than
        // this clock plausibly does.
        let limited = (self.cfg.sanity.enabled
            && state != ServoState::Unlocked
            && (self.last_freq_ppb <= lo || self.last_freq_ppb >= hi))
            .then_some((lo, hi));
        let (state, kind) = match state {
            ServoState::Unlocked => {
                self.stable_countdown = self.cfg.num_offset_values;
                (state, UpdateKind::Unlocked)
            }
            ServoState::Jump => {
                self.stable_countdown = self.cfg.num_offset_values;
                self.first_update = false;
                (state, UpdateKind::Stepped)
            }
            ServoState::Locked | ServoState::LockedStable | ServoState::Holdover => {
                self.first_update = false;
                let state = if limited.is_some() {
                    self.stable_countdown = self.cfg.num_offset_values;
                    ServoState::Holdover
                } else if self.stable(offset_ns) {
                    ServoState::LockedStable
                } else {
                    ServoState::Locked
                };
                (state, UpdateKind::Locked)
            }
        };
        match state {
            ServoState::Unlocked | ServoState::Jump => self.recent.clear(),
            ServoState::Locked | ServoState::LockedStable => self.recent.push(offset_ns),
            // A limited update is not evidence of how well the clock tracks.
            ServoState::Holdover => {}
        }
        let after = self
            .sanity
            .after_update(kind, limited, local_ts_ns, self.last_freq_ppb);
        let drift_ns = self.sanity.track(
            local_ts_ns,
            self.last_freq_ppb,
            state == ServoState::Holdover,
        );
        self.state = state;
        ServoOutput {
            freq_ppb: self.last_freq_ppb,
            state,
            error_estimate_ns: self
                .estimate(state, offset_ns, uncertainty_ns)
                .saturating_add(drift_ns),
            // A follow decision matters more than what came of the update.
            event: event.or(after),
        }
    }

    /// A sample the sanity check held: not fed to the algorithm; the clock
    /// runs on at the held frequency.
    fn hold(
        &mut self,
        offset_ns: i64,
        local_ts_ns: u64,
        uncertainty_ns: u64,
        event: SanityEvent,
    ) -> ServoOutput {
        let estimate = self.algo.frequency_ppb().unwrap_or(self.last_freq_ppb);
        let freq_ppb = self.sanity.hold_freq_ppb(estimate);
        self.algo.hold(local_ts_ns, freq_ppb);
        self.last_freq_ppb = freq_ppb;
        self.stable_countdown = self.cfg.num_offset_values;
        self.state = ServoState::Holdover;
        let drift_ns = self.sanity.track(local_ts_ns, freq_ppb, true);
        ServoOutput {
            freq_ppb,
            state: ServoState::Holdover,
            error_estimate_ns: self
                .estimate(ServoState::Holdover, offset_ns, uncertainty_ns)
                .saturating_add(drift_ns),
            event: Some(event),
        }
    }

    /// The error estimate after an update in `state` (module docs).
    fn estimate(&self, state: ServoState, offset_ns: i64, uncertainty_ns: u64) -> u64 {
        let offset = offset_ns.unsigned_abs();
        let seen = match state {
            ServoState::Unlocked => offset,
            ServoState::Jump => 0,
            ServoState::Locked | ServoState::LockedStable | ServoState::Holdover => {
                (self.recent.rms_ns().round() as u64).max(offset)
            }
        };
        seen.saturating_add(uncertainty_ns)
    }

    /// Stable detection, common to all algorithms: `num_offset_values`
    /// consecutive offsets under the threshold.
    fn stable(&mut self, offset_ns: i64) -> bool {
        let threshold = self.cfg.stable_offset_threshold_ns;
        if threshold <= 0 {
            return false;
        }
        if offset_ns.unsigned_abs() < threshold.unsigned_abs() {
            self.stable_countdown = self.stable_countdown.saturating_sub(1);
        } else {
            self.stable_countdown = self.cfg.num_offset_values;
        }
        self.stable_countdown == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::servo::sanity::SanityConfig;

    /// An algorithm that reports a fixed frequency from the second sample.
    struct Fixed {
        n: u32,
        stepped: Vec<i64>,
    }
    impl ServoAlgorithm for Fixed {
        fn name(&self) -> &'static str {
            "fixed"
        }
        fn sample(&mut self, _offset_ns: i64, _ts: u64) -> AlgoOutput {
            self.n += 1;
            match self.n {
                1 => AlgoOutput::Collecting,
                n => AlgoOutput::Ready {
                    freq_ppb: 5.0,
                    first: n == 2,
                },
            }
        }
        fn set_interval(&mut self, _: f64) {}
        fn stepped(&mut self, offset_ns: i64) -> f64 {
            self.stepped.push(offset_ns);
            5.0
        }
        fn reset(&mut self) {
            self.n = 0;
        }
        fn set_freq_bounds(&mut self, _lo: f64, _hi: f64) {}
    }

    fn servo(cfg: ServoConfig) -> Servo {
        Servo::with_algorithm(
            Box::new(Fixed {
                n: 0,
                stepped: vec![],
            }),
            cfg,
        )
    }

    #[test]
    fn unlocked_then_jump_on_large_first_offset() {
        let mut s = servo(ServoConfig::default());
        assert_eq!(s.sample(0, 0).state, ServoState::Unlocked);
        assert_eq!(s.sample(50_000, 1).state, ServoState::Jump);
        assert_eq!(s.sample(10, 2).state, ServoState::Locked);
    }

    #[test]
    fn locked_when_first_offset_small() {
        let mut s = servo(ServoConfig::default());
        s.sample(0, 0);
        assert_eq!(s.sample(19_999, 1).state, ServoState::Locked);
    }

    #[test]
    fn stable_after_n_small_offsets_and_back() {
        let cfg = ServoConfig {
            stable_offset_threshold_ns: 100,
            num_offset_values: 3,
            ..Default::default()
        };
        let mut s = servo(cfg);
        s.sample(0, 0);
        let states: Vec<_> = (1..6).map(|i| s.sample(10, i).state).collect();
        assert_eq!(
            states,
            [
                ServoState::Locked,
                ServoState::Locked,
                ServoState::LockedStable,
                ServoState::LockedStable,
                ServoState::LockedStable
            ]
        );
        assert_eq!(s.sample(500, 7).state, ServoState::Locked);
    }

    #[test]
    fn step_threshold_resets_then_jumps() {
        let cfg = ServoConfig {
            step_threshold_ns: 1_000_000,
            sanity: SanityConfig::OFF,
            ..Default::default()
        };
        let mut s = servo(cfg);
        s.sample(0, 0);
        assert_eq!(s.sample(10, 1).state, ServoState::Locked);
        assert_eq!(s.sample(5_000_000, 2).state, ServoState::Unlocked);
        assert_eq!(s.sample(5_000_000, 3).state, ServoState::Unlocked);
        assert_eq!(s.sample(5_000_000, 4).state, ServoState::Jump);
    }

    #[test]
    fn above_step_threshold_right_after_a_jump_resets() {
        let cfg = ServoConfig {
            step_threshold_ns: 1_000_000,
            sanity: SanityConfig::OFF,
            ..Default::default()
        };
        let mut s = servo(cfg);
        s.sample(0, 0);
        assert_eq!(s.sample(5_000_000, 1).state, ServoState::Jump);
        // Still 3 ms off after the step: start over, as pi.c does.
        assert_eq!(s.sample(3_000_000, 2).state, ServoState::Unlocked);
        assert_eq!(s.sample(3_000_000, 3).state, ServoState::Unlocked);
        assert_eq!(s.sample(3_000_000, 4).state, ServoState::Jump);
        // Below the threshold after a JUMP: LOCKED.
        assert_eq!(s.sample(999_999, 5).state, ServoState::Locked);
    }

    /// Locked on `Fixed` (5 ppb) after two small samples.
    fn locked(cfg: ServoConfig) -> Servo {
        let mut s = servo(cfg);
        s.sample(0, 0);
        assert_eq!(s.sample(10, 1).state, ServoState::Locked);
        s
    }

    #[test]
    fn a_jump_beyond_the_sanity_limit_is_held_and_shows_in_the_estimate() {
        let mut s = locked(ServoConfig::default());
        let out = s.update(5_000_000, 2, 300);
        assert_eq!(out.state, ServoState::Holdover);
        // Not fed to the algorithm: the clock keeps its frequency.
        assert_eq!(out.freq_ppb, 5.0);
        // The reference disagrees by 5 ms: the estimate says so.
        assert_eq!(out.error_estimate_ns, 5_000_300);
        assert!(matches!(
            out.event,
            Some(SanityEvent::Held { streak: 1, .. })
        ));
        assert_eq!(s.sanity_counters().rejected, 1);
        // Back within the limit: locked again, and said so.
        let out = s.update(20, 3, 300);
        assert_eq!(out.state, ServoState::Locked);
        assert_eq!(out.event, Some(SanityEvent::Agrees { flagged: 1 }));
        // Off, the same jump is followed as linuxptp would.
        let mut off = locked(ServoConfig {
            sanity: SanityConfig::OFF,
            ..Default::default()
        });
        assert_eq!(off.sample(5_000_000, 2).state, ServoState::Locked);
    }

    #[test]
    fn a_persisting_move_is_reacquired_through_unlocked_and_jump() {
        let mut s = locked(ServoConfig::default());
        // The reference moves 800 µs and stays; once the step is taken the
        // offsets are small again.
        let offset = |t: u64| if t < 7 { 800_000 } else { 10 };
        let states: Vec<_> = (2..9).map(|t| s.sample(offset(t), t).state).collect();
        use ServoState::*;
        assert_eq!(
            states,
            [Holdover, Holdover, Holdover, Unlocked, Jump, Locked, Locked]
        );
        assert_eq!(s.sanity_counters().reacquired, 1);
        // Another 800 µs the same way would make 1.6 ms in all: refused.
        let states: Vec<_> = (9..16).map(|t| s.sample(800_000, t).state).collect();
        assert!(states.iter().all(|&st| st == Holdover), "{states:?}");
        assert_eq!(s.sanity_counters().beyond_max_change, 7 - 3);
    }

    #[test]
    fn a_correction_at_the_clocks_limit_is_flagged() {
        // Fixed answers 5 ppb; a clock that takes no more is at its limit.
        let mut s = servo(ServoConfig {
            clock_max_freq_ppb: Some(5.0),
            ..Default::default()
        });
        s.sample(0, 0);
        let out = s.sample(10, 1);
        assert_eq!(out.state, ServoState::Holdover);
        assert!(matches!(out.event, Some(SanityEvent::FreqLimited { .. })));
        assert_eq!(s.sanity_counters().freq_limited, 1);
    }

    #[test]
    fn without_a_step_threshold_a_jump_is_followed_by_lock() {
        let mut s = servo(ServoConfig::default());
        s.sample(0, 0);
        assert_eq!(s.sample(5_000_000, 1).state, ServoState::Jump);
        assert_eq!(s.sample(3_000_000, 2).state, ServoState::Locked);
    }

    #[test]
    fn parse_kind() {
        assert_eq!("pi".parse::<ServoKind>().unwrap(), ServoKind::Pi);
        assert_eq!("linreg".parse::<ServoKind>().unwrap(), ServoKind::LinReg);
        assert!(matches!(
            "x".parse::<ServoKind>(),
            Err(ClockError::UnknownServo(_))
        ));
    }

    #[test]
    fn too_close_second_sample_waits() {
        // PI with ptp4l's software gains: ki = 0.001 → estimate over at
        // least 16 s.
        let cfg = ServoConfig {
            pi_gains: crate::servo::algorithm::PiGains::PTP4L,
            hardware_timestamps: false,
            ..Default::default()
        };
        let mut s = Servo::new(ServoKind::Pi, cfg);
        assert_eq!(s.sample(0, 0).state, ServoState::Unlocked);
        assert_eq!(s.sample(10, 5_000_000_000).state, ServoState::Unlocked);
        assert_eq!(s.sample(16, 16_000_000_000).state, ServoState::Locked);
    }
}
