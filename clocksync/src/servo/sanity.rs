//! The servo's sanity check, common to every algorithm (linuxptp's
//! `sanity_freq_limit` and chrony's `maxchange` had the idea; this is an
//! independent design): a reference that moves further or faster than
//! this clock plausibly can is not followed silently.
//!
//! Nothing here can tell a forged reference from one that really moved:
//! without a key an on-path bridge can rewrite the exchange's t2/t3 at
//! will. What the check guarantees is that a move the clock cannot explain
//! is *seen* (a WARN, a counter, the HOLDOVER state in every clock event)
//! and that how far it can drag the clock is bounded:
//!
//! * **Phase.** Once the servo is LOCKED, a sample whose |offset| exceeds
//!   `max(jump_factor × median |offset| of the last [`WINDOW`] accepted
//!   samples, jump_floor_ns)` is *held*: not fed to the algorithm; the
//!   clock runs on (HOLDOVER) at the frequency it learned at lock. The
//!   median, not the RMS, so one accepted outlier cannot widen the gate.
//! * **Persistence.** After `follow_after` consecutive held samples that
//!   agree with each other, the servo re-acquires the reference (UNLOCKED,
//!   re-estimate, JUMP), as long as the moves it followed this way add up
//!   to at most `max_change_ns`; beyond that it keeps holding, whatever the
//!   reference does, until restarted. Two held samples agree when they
//!   differ by no more than `jump_factor × median` (noise) plus
//!   `max_freq_change_ppb × the time between them` (what the clock, held
//!   at its baseline, may plausibly drift): the reference moved and stands
//!   still. One still running away (a ramp faster than the band) is never
//!   followed, so it cannot be followed in a ratchet of small steps.
//! * **Frequency.** After [`BASELINE_MIN_S`] of LOCKED updates the mean
//!   correction is the clock's *baseline*; from then on the correction is
//!   kept within `baseline ± max_freq_change_ppb` (the algorithm's clamp).
//!   An update that hits that band, or the clock's own limit, is flagged
//!   HOLDOVER as well. A reference that drifts away faster than the band
//!   drags the clock at the band's edge at most, and its offset then grows
//!   until the phase check holds it. While flagged, the error estimate
//!   also counts how far the clock ran from its baseline since the episode
//!   began (the band's edge is not what the oscillator does).
//!
//! So without a key a forged answer stream moves the clock by at most
//! `max_freq_change_ppb` ns per second without a flag (a frequency change
//! the oscillator could have made itself), plus `max_change_ns` in all
//! through flagged re-acquisitions of moves that then stood still; any
//! faster move is held (after at most `jump_floor_ns / (rate − band)` s
//! at the band's edge) and shows.
//!
//! The defaults, and why:
//! * [`JUMP_FACTOR`] 10: ten times the typical residual. The kernel-stamped
//!   exchange's error is heavy-tailed (p99 ≈ 36 × p50 on a loaded veth),
//!   which is why the floor, not the factor, sets the limit there.
//! * [`JUMP_FLOOR_NS`] 20 µs: linuxptp's `first_step_threshold`, the offset
//!   below which a servo slews rather than steps even at its first update;
//!   about 50 × the exchange's p99 error under load. A ramp faster than
//!   20 µs per update is held from its first sample.
//! * [`FOLLOW_AFTER`] 4 updates: one bad burst, a delay spike or a single
//!   forged answer is over by then; a reference that really stepped is
//!   followed 4 updates (plus the re-estimation) later.
//! * [`MAX_CHANGE_NS`] 1 ms in all: a sink whose clock is itself held this
//!   way never steps once it serves time, so a followed move is rare; a
//!   larger one is for an operator to judge (`--servo-max-change`).
//! * [`MAX_FREQ_CHANGE_PPB`] 10 ppm: a server's crystal moves a few ppm with
//!   temperature over hours, the test oscillators' wander at most 3 ppm;
//!   a forger below it is indistinguishable from the oscillator's drift.

mod config;
mod report;
mod residuals;

pub use config::{
    MaxChange, SanityConfig, BASELINE_MIN_S, BASELINE_MIN_UPDATES, FOLLOW_AFTER, JUMP_FACTOR,
    JUMP_FLOOR_NS, MAX_CHANGE_LIMIT_NS, MAX_CHANGE_NS, MAX_FREQ_CHANGE_LIMIT_PPB,
    MAX_FREQ_CHANGE_PPB, WINDOW,
};
pub use report::{SanityCounters, SanityEvent};
pub use residuals::Residuals;

/// The check's verdict on a sample, before the algorithm sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Judgement {
    /// Feed it to the algorithm.
    Accept,
    /// Do not: hold the clock.
    Hold(SanityEvent),
    /// Re-acquire the reference with this sample (reset, re-estimate, step).
    Follow(SanityEvent),
}

/// The frequency the servo learned at lock.
#[derive(Debug, Clone, Default)]
struct Baseline {
    value_ppb: Option<f64>,
    sum_ppb_s: f64,
    sum_s: f64,
    updates: u32,
    /// The previous LOCKED update: its instant and the correction it set.
    prev: Option<(u64, f64)>,
}

impl Baseline {
    fn add(&mut self, local_ts_ns: u64, freq_ppb: f64) {
        if self.value_ppb.is_some() {
            return;
        }
        if let Some((t0, f0)) = self.prev {
            if local_ts_ns > t0 {
                // The correction set at t0 was in force until now.
                let dt_s = (local_ts_ns - t0) as f64 / 1e9;
                self.sum_ppb_s += f0 * dt_s;
                self.sum_s += dt_s;
                self.updates += 1;
            }
        }
        self.prev = Some((local_ts_ns, freq_ppb));
        if self.updates >= BASELINE_MIN_UPDATES && self.sum_s >= BASELINE_MIN_S {
            self.value_ppb = Some(self.sum_ppb_s / self.sum_s);
        }
    }

    /// A run of LOCKED updates was broken before the baseline was learned.
    fn interrupt(&mut self) {
        if self.value_ppb.is_none() {
            *self = Baseline::default();
        }
    }
}

/// The check's state: arming, the held streak, the moves followed, the
/// baseline and the counters. Pure arithmetic, driven by the servo's
/// state machine ([`crate::servo::machine::Servo`]).
#[derive(Debug, Clone)]
pub struct Sanity {
    cfg: SanityConfig,
    /// The servo has locked since its last (re-)acquisition.
    armed: bool,
    streak: u32,
    /// The last held sample: offset and instant.
    last_held: Option<(i64, u64)>,
    episode: u64,
    followed_total_ns: i64,
    baseline: Baseline,
    counters: SanityCounters,
    /// The last update: instant, correction set, flagged.
    last_update: Option<(u64, f64, bool)>,
    /// How far the clock ran from its baseline during this flagged
    /// episode, ns.
    episode_drift_ns: f64,
}

impl Sanity {
    /// A check with this configuration, not armed yet.
    pub fn new(cfg: SanityConfig) -> Self {
        Sanity {
            cfg,
            armed: false,
            streak: 0,
            last_held: None,
            episode: 0,
            followed_total_ns: 0,
            baseline: Baseline::default(),
            counters: SanityCounters::default(),
            last_update: None,
            episode_drift_ns: 0.0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SanityConfig {
        &self.cfg
    }

    /// The counters.
    pub fn counters(&self) -> SanityCounters {
        self.counters
    }

    /// The baseline frequency, once learned, ppb.
    pub fn baseline_ppb(&self) -> Option<f64> {
        self.baseline.value_ppb
    }

    /// The phase limit now, ns.
    pub fn limit_ns(&self, recent: &Residuals) -> u64 {
        let scaled = (self.cfg.jump_factor * recent.median_abs_ns() as f64).round() as u64;
        scaled.max(self.cfg.jump_floor_ns)
    }

    /// How far two held samples `dt_ns` apart may differ and still agree
    /// (module docs), ns.
    pub fn agreement_ns(&self, recent: &Residuals, dt_ns: u64) -> u64 {
        let noise = self.cfg.jump_factor * recent.median_abs_ns() as f64;
        let drift = self.cfg.max_freq_change_ppb * dt_ns as f64 * 1e-9;
        (noise + drift).round() as u64
    }

    /// Judge a sample's offset, taken at `local_ts_ns`, before the
    /// algorithm sees it.
    pub fn judge(&mut self, offset_ns: i64, local_ts_ns: u64, recent: &Residuals) -> Judgement {
        if !self.cfg.enabled || !self.armed {
            return Judgement::Accept;
        }
        let limit_ns = self.limit_ns(recent);
        if offset_ns.unsigned_abs() <= limit_ns {
            self.streak = 0;
            self.last_held = None;
            return Judgement::Accept;
        }
        self.counters.rejected += 1;
        self.episode += 1;
        let agrees = self.last_held.is_some_and(|(p, t)| {
            let dt_ns = local_ts_ns.saturating_sub(t);
            p.abs_diff(offset_ns) <= self.agreement_ns(recent, dt_ns)
        });
        self.streak = if agrees { self.streak + 1 } else { 1 };
        self.last_held = Some((offset_ns, local_ts_ns));
        if self.streak < self.cfg.follow_after.max(1) {
            return Judgement::Hold(SanityEvent::Held {
                offset_ns,
                limit_ns,
                streak: self.streak,
                episode: self.episode,
            });
        }
        // The step re-acquiring the reference moves the clock by -offset.
        let total_ns = self.followed_total_ns.saturating_sub(offset_ns);
        if let Some(max) = self.cfg.max_change_ns {
            if total_ns.unsigned_abs() > max {
                self.counters.beyond_max_change += 1;
                return Judgement::Hold(SanityEvent::Refused {
                    offset_ns,
                    total_ns,
                    max_change_ns: max,
                    episode: self.episode,
                });
            }
        }
        self.followed_total_ns = total_ns;
        self.counters.reacquired += 1;
        self.streak = 0;
        self.last_held = None;
        self.armed = false;
        Judgement::Follow(SanityEvent::Following {
            offset_ns,
            total_ns,
        })
    }

    /// The clamp for the algorithm: the baseline band once learned, within
    /// the clock's own limit `max_freq_ppb`.
    pub fn freq_bounds(&self, max_freq_ppb: f64) -> (f64, f64) {
        let clock = (-max_freq_ppb, max_freq_ppb);
        let w = self.cfg.max_freq_change_ppb;
        match self.baseline.value_ppb {
            Some(b) if self.cfg.enabled && w > 0.0 => {
                let (lo, hi) = ((b - w).max(clock.0), (b + w).min(clock.1));
                if lo <= hi {
                    (lo, hi)
                } else {
                    clock
                }
            }
            _ => clock,
        }
    }

    /// The frequency to hold the clock at: the baseline, once learned (a
    /// forger may have dragged the algorithm to the band's edge), else
    /// `estimate_ppb`, the algorithm's frequency estimate (the last
    /// correction also answers the last offset).
    pub fn hold_freq_ppb(&self, estimate_ppb: f64) -> f64 {
        self.baseline.value_ppb.unwrap_or(estimate_ppb)
    }

    /// Account for the correction `freq_ppb` an update set at
    /// `local_ts_ns`, `flagged` (HOLDOVER) or not, and return how far the
    /// clock ran from its baseline during the flagged episode this update
    /// is part of, ns (0 when not flagged). Call once per update.
    pub fn track(&mut self, local_ts_ns: u64, freq_ppb: f64, flagged: bool) -> u64 {
        if !flagged {
            self.episode_drift_ns = 0.0;
        } else if let (Some((t0, f0, true)), Some(b)) = (self.last_update, self.baseline.value_ppb)
        {
            // The correction set at t0, flagged, was in force until now.
            let dt_ns = local_ts_ns.saturating_sub(t0) as f64;
            self.episode_drift_ns += (f0 - b) * dt_ns * 1e-9;
        }
        self.last_update = Some((local_ts_ns, freq_ppb, flagged));
        self.episode_drift_ns.abs().round() as u64
    }

    /// Account for an update the algorithm made: `locked` (LOCKED or
    /// LOCKED_STABLE, or a limited correction while locked), `stepped`
    /// (JUMP) or neither (UNLOCKED); `limited` when the correction hit the
    /// bounds. Returns what an operator should hear of.
    pub fn after_update(
        &mut self,
        outcome: UpdateKind,
        limited: Option<(f64, f64)>,
        local_ts_ns: u64,
        freq_ppb: f64,
    ) -> Option<SanityEvent> {
        if !self.cfg.enabled {
            return None;
        }
        let limited_event = limited.map(|(lo_ppb, hi_ppb)| {
            self.counters.freq_limited += 1;
            self.episode += 1;
            SanityEvent::FreqLimited {
                freq_ppb,
                lo_ppb,
                hi_ppb,
                baseline_ppb: self.baseline.value_ppb,
                episode: self.episode,
            }
        });
        match outcome {
            UpdateKind::Unlocked | UpdateKind::Stepped => {
                // Arm again once the servo has locked after this.
                self.armed = false;
                self.baseline.interrupt();
                limited_event
            }
            UpdateKind::Locked if limited_event.is_some() => {
                self.armed = true;
                self.baseline.interrupt();
                limited_event
            }
            UpdateKind::Locked => {
                self.armed = true;
                self.baseline.add(local_ts_ns, freq_ppb);
                let flagged = std::mem::take(&mut self.episode);
                (flagged > 0).then_some(SanityEvent::Agrees { flagged })
            }
        }
    }
}

/// What the algorithm's answer did to the clock, for [`Sanity::after_update`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateKind {
    /// No estimate: the clock was left alone.
    Unlocked,
    /// The clock was stepped.
    Stepped,
    /// A new correction, no step.
    Locked,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(offsets: &[i64]) -> Residuals {
        let mut r = Residuals::default();
        for &o in offsets {
            r.push(o);
        }
        r
    }

    fn armed(cfg: SanityConfig) -> Sanity {
        let mut s = Sanity::new(cfg);
        s.after_update(UpdateKind::Locked, None, 0, 0.0);
        s
    }

    #[test]
    fn max_change_parses_and_prints_back() {
        for (text, v) in [
            ("0", Some(0)),
            ("1000000", Some(1_000_000)),
            ("unlimited", None),
        ] {
            let m: MaxChange = text.parse().unwrap();
            assert_eq!(m, MaxChange(v));
            assert_eq!(m.to_string(), text);
        }
        assert!("-1".parse::<MaxChange>().is_err());
        assert!("1ms".parse::<MaxChange>().is_err());
        assert_eq!(MaxChange::default().0, Some(MAX_CHANGE_NS));
    }

    #[test]
    fn the_limit_is_k_times_the_median_and_at_least_the_floor() {
        let s = Sanity::new(SanityConfig::default());
        assert_eq!(s.limit_ns(&Residuals::default()), JUMP_FLOOR_NS);
        assert_eq!(s.limit_ns(&window(&[100, -200, 300])), JUMP_FLOOR_NS);
        // One outlier does not move a median.
        let w = window(&[5_000, -5_000, 5_000, 1_000_000]);
        assert_eq!(s.limit_ns(&w), 50_000);
        assert_eq!(w.rms_ns().round(), 500_019.0);
    }

    #[test]
    fn nothing_is_judged_before_the_first_lock_or_when_off() {
        let w = Residuals::default();
        let mut s = Sanity::new(SanityConfig::default());
        assert_eq!(s.judge(5_000_000, 0, &w), Judgement::Accept);
        let mut off = armed(SanityConfig::OFF);
        assert_eq!(off.judge(5_000_000, 0, &w), Judgement::Accept);
    }

    #[test]
    fn a_persisting_move_is_followed_after_m_agreeing_samples() {
        let w = Residuals::default();
        let mut s = armed(SanityConfig::default());
        for k in 1..FOLLOW_AFTER {
            assert!(
                matches!(
                    s.judge(-500_000 + k as i64, u64::from(k) * 1_000_000_000, &w),
                    Judgement::Hold(SanityEvent::Held { streak, .. }) if streak == k
                ),
                "{k}"
            );
        }
        assert_eq!(
            s.judge(-500_000, u64::from(FOLLOW_AFTER) * 1_000_000_000, &w),
            Judgement::Follow(SanityEvent::Following {
                offset_ns: -500_000,
                total_ns: 500_000
            })
        );
        assert_eq!(s.counters().rejected, u64::from(FOLLOW_AFTER));
        assert_eq!(s.counters().reacquired, 1);
        // Disarmed until the servo locks again.
        assert_eq!(s.judge(-900_000, 10, &w), Judgement::Accept);
    }

    #[test]
    fn a_running_away_reference_is_never_followed() {
        let w = Residuals::default();
        let mut s = armed(SanityConfig::default());
        // 100 µs further each second: no two held samples agree.
        for k in 1..20 {
            assert!(matches!(
                s.judge(-100_000 * k, k as u64 * 1_000_000_000, &w),
                Judgement::Hold(SanityEvent::Held { streak: 1, .. })
            ));
        }
        // 11 µs per second, just beyond what the 10 ppm band allows a held
        // clock, is still running away; 9 µs per second agrees.
        let ramp = |s: &mut Sanity, rate: i64| {
            (1..=i64::from(FOLLOW_AFTER))
                .map(|k| s.judge(-100_000 - rate * k, k as u64 * 1_000_000_000, &w))
                .last()
                .unwrap()
        };
        assert!(matches!(ramp(&mut s, 11_000), Judgement::Hold(_)));
        s.judge(0, 0, &w);
        assert!(matches!(ramp(&mut s, 9_000), Judgement::Follow(_)));
    }

    #[test]
    fn moves_beyond_the_total_max_change_are_refused() {
        let w = Residuals::default();
        let mut s = armed(SanityConfig::default());
        let follow = |s: &mut Sanity, offset: i64| {
            (0..FOLLOW_AFTER)
                .map(|k| s.judge(offset, u64::from(k), &w))
                .last()
                .unwrap()
        };
        assert!(matches!(follow(&mut s, -600_000), Judgement::Follow(_)));
        s.after_update(UpdateKind::Locked, None, 1, 0.0);
        // 600 µs followed; another 600 µs the same way would make 1.2 ms.
        assert!(matches!(
            follow(&mut s, -600_000),
            Judgement::Hold(SanityEvent::Refused {
                total_ns: 1_200_000,
                ..
            })
        ));
        // Back the other way is within the total.
        s.judge(0, 0, &w);
        assert!(matches!(follow(&mut s, 500_000), Judgement::Follow(_)));
        assert_eq!(s.counters().beyond_max_change, 1);
        // max_change 0: nothing held is ever followed.
        let mut never = armed(SanityConfig {
            max_change_ns: Some(0),
            ..Default::default()
        });
        assert!(matches!(
            follow(&mut never, 30_000),
            Judgement::Hold(SanityEvent::Refused { .. })
        ));
    }

    #[test]
    fn the_band_is_centred_on_the_baseline_learned_over_16_s() {
        let mut s = Sanity::new(SanityConfig::default());
        let max = 500_000.0;
        for k in 0..=16u64 {
            assert_eq!(s.freq_bounds(max), (-max, max), "{k}");
            s.after_update(UpdateKind::Locked, None, k * 1_000_000_000, 100_000.0);
        }
        assert_eq!(s.baseline_ppb(), Some(100_000.0));
        assert_eq!(s.freq_bounds(max), (90_000.0, 110_000.0));
        assert_eq!(s.hold_freq_ppb(123.0), 100_000.0);
        assert_eq!(
            Sanity::new(SanityConfig::default()).hold_freq_ppb(123.0),
            123.0
        );
        // The clock's own limit still applies.
        assert_eq!(s.freq_bounds(105_000.0), (90_000.0, 105_000.0));
    }

    #[test]
    fn a_flagged_episode_counts_the_run_away_from_the_baseline() {
        let mut s = Sanity::new(SanityConfig::default());
        for k in 0..=17u64 {
            s.after_update(UpdateKind::Locked, None, k * 1_000_000_000, 100_000.0);
            assert_eq!(s.track(k * 1_000_000_000, 100_000.0, false), 0);
        }
        let t = |k: u64| (17 + k) * 1_000_000_000;
        // Limited at the band's edge for 3 s, then held at the baseline.
        assert_eq!(s.track(t(1), 110_000.0, true), 0);
        assert_eq!(s.track(t(2), 110_000.0, true), 10_000);
        assert_eq!(s.track(t(3), 100_000.0, true), 20_000);
        assert_eq!(s.track(t(4), 100_000.0, true), 20_000);
        // The episode ends: nothing more is owed to it.
        assert_eq!(s.track(t(5), 100_000.0, false), 0);
    }

    #[test]
    fn a_broken_run_restarts_the_baseline() {
        let mut s = Sanity::new(SanityConfig::default());
        for k in 0..10u64 {
            s.after_update(UpdateKind::Locked, None, k * 1_000_000_000, 5.0);
        }
        s.after_update(UpdateKind::Stepped, None, 10_000_000_000, 5.0);
        for k in 11..27u64 {
            s.after_update(UpdateKind::Locked, None, k * 1_000_000_000, 7.0);
        }
        assert_eq!(s.baseline_ppb(), None, "15 intervals since the step");
        s.after_update(UpdateKind::Locked, None, 27_000_000_000, 7.0);
        assert_eq!(s.baseline_ppb(), Some(7.0));
    }
}
