//! The discipline loop: one reference clock, one servo, one shared global
//! clock. Each [`Discipline::tick`] takes a sample, runs the servo, updates
//! the global clock and returns a [`ClockReport`] (what the agent ships as a
//! clock record). Threading is the caller's choice: call `tick` from your own
//! loop, or [`Discipline::spawn`] a thread that ticks every interval.

use std::time::Duration;

use crate::error::ClockError;
use crate::global::{Adjustment, GlobalClock};
use crate::servo::machine::{Servo, ServoState};
use crate::servo::sanity::{SanityCounters, SanityEvent};
use crate::source::traits::{OffsetSample, ReferenceClock};
use crate::worker::{StopFlag, Worker};

/// One update, as phc2sys -m prints it, plus the raw sample.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ClockReport {
    /// Monotonic instant of the sample, ns.
    pub mono_ns: u64,
    /// `global - reference` at that instant, before this update, ns.
    pub offset_ns: i64,
    /// Frequency correction now in force, ppb (positive = the global clock
    /// runs faster than CLOCK_MONOTONIC). phc2sys prints the negation.
    pub freq_ppb: f64,
    /// Read delay / round-trip delay of the sample, ns.
    pub delay_ns: u64,
    /// Servo state after this update.
    pub state: ServoState,
    /// Error estimate after this update, ns: how far the global clock may
    /// be from the reference, never less than this sample shows (see
    /// `servo/machine.rs`).
    pub error_estimate_ns: u64,
    /// The raw sample.
    pub sample: OffsetSample,
    /// What the servo's sanity check did so far (cumulative).
    pub sanity: SanityCounters,
}

impl ClockReport {
    /// The line phc2sys -m prints for an update, in its format
    /// (`offset %9 s%d freq %+7.0f delay %6`), e.g.
    /// `offset       -12 s2 freq   +3456 delay    789`.
    ///
    /// phc2sys prints its servo's output, which it then applies negated
    /// (`clockadj_set_freq(-ppb)`): how fast the disciplined clock runs
    /// against the reference. `freq_ppb` here is the correction applied,
    /// so the line shows its negation; both then read the same.
    pub fn phc2sys_line(&self) -> String {
        format!(
            "offset {:>9} s{} freq {:>+7.0} delay {:>6}",
            self.offset_ns,
            self.state.code(),
            -self.freq_ppb,
            self.delay_ns
        )
    }
}

/// Source + servo + global clock.
pub struct Discipline<R: ReferenceClock> {
    source: R,
    servo: Servo,
    clock: GlobalClock,
    freq_ppb: f64,
}

impl<R: ReferenceClock> std::fmt::Debug for Discipline<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discipline")
            .field("source", &self.source.name())
            .field("servo", &self.servo)
            .finish()
    }
}

impl<R: ReferenceClock> Discipline<R> {
    /// Discipline `clock` (a handle; keep clones for readers) to `source`.
    pub fn new(source: R, servo: Servo, clock: GlobalClock) -> Self {
        Discipline {
            source,
            servo,
            clock,
            freq_ppb: 0.0,
        }
    }

    /// The global clock handle.
    pub fn clock(&self) -> &GlobalClock {
        &self.clock
    }

    /// The source.
    pub fn source(&self) -> &R {
        &self.source
    }

    /// The source, mutably (e.g. to advance a simulation).
    pub fn source_mut(&mut self) -> &mut R {
        &mut self.source
    }

    /// The servo.
    pub fn servo(&self) -> &Servo {
        &self.servo
    }

    /// Take one sample and update the clock.
    ///
    /// The very first sample initialises an empty global clock to the
    /// reference (nothing to keep continuous yet); the servo then sees
    /// offsets against that mapping and estimates the frequency from its
    /// first two samples.
    pub fn tick(&mut self) -> Result<ClockReport, ClockError> {
        let sample = self.source.sample()?;
        Ok(self.apply_sample(sample))
    }

    /// Update with a sample obtained elsewhere (used by `tick`).
    pub fn apply_sample(&mut self, sample: OffsetSample) -> ClockReport {
        if self.clock.is_empty() {
            self.clock
                .initialize(sample.mono_ns, sample.ref_ns, ServoState::Unlocked);
        }
        let snap = self.clock.snapshot();
        let local = snap.to_global_ns(sample.mono_ns).unwrap_or(sample.ref_ns);
        let offset_ns = local.wrapping_sub(sample.ref_ns) as i64;
        let out = self
            .servo
            .update(offset_ns, sample.mono_ns, sample.uncertainty_ns);
        if let Some(e) = out.event {
            self.log_sanity(&e);
        }
        let step_ns = match out.state {
            ServoState::Jump => -offset_ns,
            ServoState::Unlocked
            | ServoState::Locked
            | ServoState::LockedStable
            | ServoState::Holdover => 0,
        };
        if out.state != ServoState::Unlocked {
            self.freq_ppb = out.freq_ppb;
        }
        let error_estimate_ns = out.error_estimate_ns;
        self.clock.apply(Adjustment {
            mono_ns: sample.mono_ns,
            step_ns,
            freq_ppb: self.freq_ppb,
            state: out.state,
            error_estimate_ns,
        });
        ClockReport {
            mono_ns: sample.mono_ns,
            offset_ns,
            freq_ppb: self.freq_ppb,
            delay_ns: sample.delay_ns,
            state: out.state,
            error_estimate_ns,
            sample,
            sanity: self.servo.sanity_counters(),
        }
    }

    /// Tell the operator what the sanity check did, rate-limited: the first
    /// flagged update of an episode and then every power of two.
    fn log_sanity(&self, e: &SanityEvent) {
        let source = self.source.name();
        let cfg = &self.servo.config().sanity;
        match *e {
            SanityEvent::Held {
                offset_ns,
                limit_ns,
                streak,
                episode,
            } if episode.is_power_of_two() => tracing::warn!(
                %source, offset_ns, limit_ns, streak, flagged = episode,
                follow_after = cfg.follow_after,
                "the reference moved beyond the clock's sanity limit; not following it, \
                 the clock holds its own frequency (HOLDOVER). A move that stays put for \
                 follow_after updates is followed within --servo-max-change; without a key \
                 (--key-file) an on-path attacker can forge such moves"
            ),
            SanityEvent::Refused {
                offset_ns,
                total_ns,
                max_change_ns,
                episode,
            } if episode.is_power_of_two() => tracing::warn!(
                %source, offset_ns, total_if_followed_ns = total_ns, max_change_ns, flagged = episode,
                "the reference has moved and stayed, but following it would move the clock \
                 beyond --servo-max-change in all: still holding (HOLDOVER). If the \
                 reference really moved, restart the agent or raise --servo-max-change"
            ),
            SanityEvent::Following {
                offset_ns,
                total_ns,
            } => tracing::warn!(
                %source, offset_ns, followed_total_ns = total_ns,
                max_change_ns = ?cfg.max_change_ns,
                "the reference moved and stayed: re-acquiring it (UNLOCKED, then a JUMP)"
            ),
            SanityEvent::FreqLimited {
                freq_ppb,
                lo_ppb,
                hi_ppb,
                baseline_ppb,
                episode,
            } if episode.is_power_of_two() => tracing::warn!(
                %source, freq_ppb, lo_ppb, hi_ppb, ?baseline_ppb, flagged = episode,
                "the reference drifts faster than this clock plausibly can: its frequency \
                 correction is limited (HOLDOVER); see --servo-max-freq-change"
            ),
            SanityEvent::Agrees { flagged } => tracing::info!(
                %source, flagged,
                "the reference agrees with the clock again"
            ),
            _ => {}
        }
    }

    /// Wait one interval through the source (sleeps; a simulation advances).
    pub fn wait(&mut self, interval: Duration) {
        self.source
            .wait_ns(interval.as_nanos() as u64, &StopFlag::default());
    }
}

impl<R: ReferenceClock + 'static> Discipline<R> {
    /// Run `tick` every `interval` on a new thread until the returned
    /// worker is stopped or dropped; [`Worker::finish`] hands the
    /// discipline back. Each result goes to `on_report` (errors too: a
    /// failed sample leaves the clock as it was, and the loop goes on).
    pub fn spawn<F>(
        mut self,
        interval: Duration,
        mut on_report: F,
    ) -> Result<Worker<Self>, ClockError>
    where
        F: FnMut(Result<ClockReport, ClockError>) + Send + 'static,
    {
        Worker::spawn("clocksync", move |stop| {
            while !stop.is_set() {
                on_report(self.tick());
                // Through the source (a simulation advances instead of
                // sleeping); a stop wakes it, so the thread wakes once per
                // sample, not every few hundred ms to look at the flag.
                self.source.wait_ns(interval.as_nanos() as u64, &stop);
            }
            self
        })
        .map_err(|e| ClockError::io("starting the clock thread", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(offset_ns: i64, state: ServoState, freq_ppb: f64, delay_ns: u64) -> ClockReport {
        ClockReport {
            mono_ns: 0,
            offset_ns,
            freq_ppb,
            delay_ns,
            state,
            error_estimate_ns: 0,
            sample: OffsetSample::default(),
            sanity: SanityCounters::default(),
        }
    }

    #[test]
    fn phc2sys_line_has_phc2sys_sign_and_format() {
        // Lines phc2sys's format string printed for the same updates (the
        // C twin of harness::parity_loop, built on linuxptp's servo). A
        // clock 12.3 ppm fast is slowed down: correction -12282 ppb,
        // printed by phc2sys as +12282.
        assert_eq!(
            report(-23868, ServoState::Jump, -12282.0, 1234).phc2sys_line(),
            "offset    -23868 s1 freq  +12282 delay   1234"
        );
        assert_eq!(
            report(3, ServoState::Locked, -12315.9, 1234).phc2sys_line(),
            "offset         3 s2 freq  +12316 delay   1234"
        );
        // Wider than the fields: nothing is cut.
        assert_eq!(
            report(-125956789, ServoState::Locked, 100_000_000.0, 5).phc2sys_line(),
            "offset -125956789 s2 freq -100000000 delay      5"
        );
        // Before any estimate: phc2sys prints its servo's negated initial
        // frequency, -0.
        assert_eq!(
            report(-30009, ServoState::Unlocked, 0.0, 1234).phc2sys_line(),
            "offset    -30009 s0 freq      -0 delay   1234"
        );
    }
}
