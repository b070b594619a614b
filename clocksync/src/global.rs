//! The global clock: a software clock mapping CLOCK_MONOTONIC ns to global
//! ns (TAI scale), disciplined by a servo. It never adjusts a system clock.
//!
//! The mapping is piecewise linear. Each servo update appends a segment
//! `{mono_start_ns, global_start_ns, freq_ppb}`:
//! `global(m) = global_start + (m - mono_start)·(1 + freq_ppb·1e-9)`.
//! A frequency change starts a segment continuous with the previous one, so
//! the output is continuous and monotonic (rates stay positive) while locked;
//! only a JUMP (a step) breaks continuity. A bounded history of segments is
//! kept so an event stamped up to `max_history_age_ns` ago converts with the
//! mapping in force at its time, not with today's frequency.
//!
//! # Threads
//! [`GlobalClock`] is a cheap `Clone` handle. The discipline thread calls
//! [`GlobalClock::apply`], which publishes a new immutable
//! [`ClockSnapshot`] (`Arc`) under a short write lock. Readers call
//! [`GlobalClock::snapshot`] once per batch (one read lock + `Arc` clone) and
//! then convert any number of stamps with [`ClockSnapshot::to_global_ns`]
//! without locks: usually the last segment, a compare and a few
//! multiplications.

use std::sync::{Arc, RwLock};

use crate::servo::machine::ServoState;

/// One piece of the mapping.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Segment {
    /// First monotonic instant this segment is in force, ns.
    pub mono_start_ns: u64,
    /// Global time at `mono_start_ns`, ns.
    pub global_start_ns: u64,
    /// Rate correction, ppb: global advances `1 + freq_ppb·1e-9` ns per mono ns.
    pub freq_ppb: f64,
    /// Servo state when the segment was created.
    pub state: ServoState,
}

impl Segment {
    /// Global ns at `mono_ns` under this segment (also before/after it).
    #[inline]
    pub fn at(&self, mono_ns: u64) -> u64 {
        let delta = mono_ns.wrapping_sub(self.mono_start_ns) as i64;
        let corr = (delta as f64 * self.freq_ppb * 1e-9).round() as i64;
        self.global_start_ns
            .wrapping_add(delta.wrapping_add(corr) as u64)
    }
}

/// A conversion with its provenance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conversion {
    /// The global time, ns.
    pub global_ns: u64,
    /// The stamp is older than the history: converted with the oldest
    /// segment, so its error may exceed the estimate. Callers count these.
    pub stale: bool,
}

/// Global clock configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct GlobalClockConfig {
    /// Keep segments needed to convert stamps up to this old (relative to
    /// the newest segment start), ns. Default 60 s: far more than an agent's
    /// batching delay, and at 1 update/s only ~60 segments.
    pub max_history_age_ns: u64,
    /// Hard cap on the number of segments (protects against fast updates).
    pub max_segments: usize,
}

impl Default for GlobalClockConfig {
    fn default() -> Self {
        GlobalClockConfig {
            max_history_age_ns: 60_000_000_000,
            max_segments: 4096,
        }
    }
}

/// An immutable view of the mapping, cheap to share between threads.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ClockSnapshot {
    /// Segments, oldest first. Empty until the first sample.
    pub segments: Vec<Segment>,
    /// Servo state at the last update.
    pub state: Option<ServoState>,
    /// Error estimate at the last update, ns (see [`GlobalClock::error_estimate_ns`]).
    pub error_estimate_ns: u64,
    /// Incremented by every update.
    pub generation: u64,
}

impl ClockSnapshot {
    /// The segment in force at `mono_ns`, and whether it is stale.
    #[inline]
    fn segment_for(&self, mono_ns: u64) -> Option<(&Segment, bool)> {
        let last = self.segments.last()?;
        if mono_ns >= last.mono_start_ns {
            return Some((last, false));
        }
        // Partition point: first segment starting after mono_ns.
        let i = self
            .segments
            .partition_point(|s| s.mono_start_ns <= mono_ns);
        if i == 0 {
            Some((&self.segments[0], true))
        } else {
            Some((&self.segments[i - 1], false))
        }
    }

    /// Global ns for a CLOCK_MONOTONIC stamp; `None` before the first sample.
    #[inline]
    pub fn to_global_ns(&self, mono_ns: u64) -> Option<u64> {
        self.segment_for(mono_ns).map(|(s, _)| s.at(mono_ns))
    }

    /// Like [`Self::to_global_ns`], telling whether the stamp predates the history.
    #[inline]
    pub fn convert(&self, mono_ns: u64) -> Option<Conversion> {
        self.segment_for(mono_ns).map(|(s, stale)| Conversion {
            global_ns: s.at(mono_ns),
            stale,
        })
    }

    /// True once the servo is LOCKED or LOCKED_STABLE.
    pub fn is_locked(&self) -> bool {
        self.state.is_some_and(ServoState::is_locked)
    }

    /// True while the clock serves time: LOCKED, LOCKED_STABLE or HOLDOVER
    /// (see [`ServoState::serves_time`]).
    pub fn serves_time(&self) -> bool {
        self.state.is_some_and(ServoState::serves_time)
    }
}

/// What the discipline does to the clock at one sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adjustment {
    /// The sample's monotonic instant: the new segment starts here.
    pub mono_ns: u64,
    /// Step to add to the mapping at `mono_ns` (0 = continuous), ns.
    pub step_ns: i64,
    /// New rate correction, ppb.
    pub freq_ppb: f64,
    /// Servo state.
    pub state: ServoState,
    /// Error estimate after this update, ns.
    pub error_estimate_ns: u64,
}

#[derive(Debug)]
struct Shared {
    cfg: GlobalClockConfig,
    current: RwLock<Arc<ClockSnapshot>>,
}

/// Handle to a global clock; clones share it.
#[derive(Debug, Clone)]
pub struct GlobalClock {
    shared: Arc<Shared>,
}

impl Default for GlobalClock {
    fn default() -> Self {
        Self::new(GlobalClockConfig::default())
    }
}

impl GlobalClock {
    /// An empty (unsynchronised) clock.
    pub fn new(cfg: GlobalClockConfig) -> Self {
        GlobalClock {
            shared: Arc::new(Shared {
                cfg,
                current: RwLock::new(Arc::new(ClockSnapshot::default())),
            }),
        }
    }

    /// A clock fixed to `global = mono + offset_ns` (rate 1, state LOCKED).
    /// For tests and for a sink whose axis is its own monotonic clock.
    pub fn fixed(offset_ns: i64) -> Self {
        let c = Self::default();
        c.initialize(0, offset_ns as u64, ServoState::Locked);
        c
    }

    /// The current mapping. Take it once per batch of conversions.
    pub fn snapshot(&self) -> Arc<ClockSnapshot> {
        match self.shared.current.read() {
            Ok(g) => Arc::clone(&g),
            // A panicking writer cannot leave a half-built snapshot: the
            // Arc is replaced whole, so the old one is still consistent.
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Convert one stamp (takes a snapshot: prefer [`Self::snapshot`] in loops).
    pub fn to_global_ns(&self, mono_ns: u64) -> Option<u64> {
        self.snapshot().to_global_ns(mono_ns)
    }

    /// Servo state at the last update (`None` before the first sample).
    pub fn state(&self) -> Option<ServoState> {
        self.snapshot().state
    }

    /// Estimated |global - reference| at the last update, ns: the larger of
    /// the RMS of recent accepted offsets and the last |offset|, plus the
    /// last sample's uncertainty (see `servo/machine.rs`).
    pub fn error_estimate_ns(&self) -> u64 {
        self.snapshot().error_estimate_ns
    }

    /// True before the first sample.
    pub fn is_empty(&self) -> bool {
        self.snapshot().segments.is_empty()
    }

    fn publish(&self, f: impl FnOnce(&mut ClockSnapshot)) {
        let mut guard = match self.shared.current.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let mut next = ClockSnapshot::clone(&guard);
        f(&mut next);
        next.generation += 1;
        *guard = Arc::new(next);
    }

    /// Start (or restart) the mapping at `global(mono_ns) = global_ns`, rate 1.
    pub fn initialize(&self, mono_ns: u64, global_ns: u64, state: ServoState) {
        self.publish(|s| {
            s.segments.clear();
            s.segments.push(Segment {
                mono_start_ns: mono_ns,
                global_start_ns: global_ns,
                freq_ppb: 0.0,
                state,
            });
            s.state = Some(state);
        });
    }

    /// Apply one servo update: a new segment at `adj.mono_ns`, continuous
    /// with the mapping in force there plus `adj.step_ns`. An update older
    /// than the newest segment start is applied at that start instead, so
    /// segments stay ordered.
    pub fn apply(&self, adj: Adjustment) {
        let cfg = self.shared.cfg.clone();
        self.publish(|s| {
            let Some(last) = s.segments.last().copied() else {
                s.segments.push(Segment {
                    mono_start_ns: adj.mono_ns,
                    global_start_ns: adj.mono_ns.wrapping_add(adj.step_ns as u64),
                    freq_ppb: adj.freq_ppb,
                    state: adj.state,
                });
                s.state = Some(adj.state);
                s.error_estimate_ns = adj.error_estimate_ns;
                return;
            };
            let start = adj.mono_ns.max(last.mono_start_ns);
            let seg = Segment {
                mono_start_ns: start,
                global_start_ns: last.at(start).wrapping_add(adj.step_ns as u64),
                freq_ppb: adj.freq_ppb,
                state: adj.state,
            };
            if start == last.mono_start_ns {
                if let Some(l) = s.segments.last_mut() {
                    *l = seg;
                }
            } else {
                s.segments.push(seg);
            }
            // Keep every segment that covers something within max age.
            let horizon = start.saturating_sub(cfg.max_history_age_ns);
            let first_needed = s
                .segments
                .partition_point(|x| x.mono_start_ns <= horizon)
                .saturating_sub(1);
            let excess = s.segments.len().saturating_sub(cfg.max_segments);
            let drop = first_needed.max(excess);
            if drop > 0 {
                s.segments.drain(..drop);
            }
            s.state = Some(adj.state);
            s.error_estimate_ns = adj.error_estimate_ns;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adj(mono_ns: u64, step_ns: i64, freq_ppb: f64) -> Adjustment {
        Adjustment {
            mono_ns,
            step_ns,
            freq_ppb,
            state: ServoState::Locked,
            error_estimate_ns: 0,
        }
    }

    #[test]
    fn empty_clock_converts_nothing() {
        let c = GlobalClock::default();
        assert_eq!(c.to_global_ns(5), None);
        assert!(c.is_empty());
    }

    #[test]
    fn rate_applies_from_segment_start() {
        let c = GlobalClock::default();
        c.initialize(1_000, 1_000_000, ServoState::Unlocked);
        assert_eq!(c.to_global_ns(2_000), Some(1_001_000));
        // +100 ppm from mono 1 s on.
        c.apply(adj(1_000_000_000, 0, 100_000.0));
        let at_1s = 1_000_000 + 1_000_000_000 - 1_000;
        assert_eq!(c.to_global_ns(1_000_000_000), Some(at_1s));
        assert_eq!(c.to_global_ns(2_000_000_000), Some(at_1s + 1_000_100_000));
        // History: a stamp from before the change still uses rate 1.
        assert_eq!(
            c.to_global_ns(500_000_000),
            Some(1_000_000 + 500_000_000 - 1_000)
        );
    }

    #[test]
    fn monotonic_across_many_frequency_changes() {
        let c = GlobalClock::default();
        c.initialize(0, 0, ServoState::Locked);
        let mut seed = 1u64;
        for k in 1..200u64 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            let ppb = ((seed >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 2.0e5;
            c.apply(adj(k * 10_000_000, 0, ppb));
        }
        let snap = c.snapshot();
        let mut prev = 0;
        for m in (0..2_000_000_000u64).step_by(99_991) {
            let g = snap.to_global_ns(m).unwrap();
            assert!(g >= prev, "not monotonic at {m}: {g} < {prev}");
            prev = g;
        }
    }

    #[test]
    fn step_moves_only_the_future() {
        let c = GlobalClock::fixed(0);
        c.apply(adj(1_000, -500, 0.0));
        assert_eq!(c.to_global_ns(999), Some(999));
        assert_eq!(c.to_global_ns(1_000), Some(500));
        assert_eq!(c.to_global_ns(2_000), Some(1_500));
    }

    #[test]
    fn history_is_bounded_and_old_stamps_are_stale() {
        let c = GlobalClock::new(GlobalClockConfig {
            max_history_age_ns: 10_000,
            max_segments: 100,
        });
        c.initialize(0, 0, ServoState::Locked);
        for k in 1..=100u64 {
            c.apply(adj(k * 1_000, 0, k as f64));
        }
        let snap = c.snapshot();
        // Newest start 100_000; keep what covers 90_000 onwards.
        assert_eq!(snap.segments.first().unwrap().mono_start_ns, 90_000);
        assert_eq!(snap.segments.len(), 11);
        assert!(!snap.convert(90_000).unwrap().stale);
        let old = snap.convert(10).unwrap();
        assert!(old.stale);
        assert_eq!(old.global_ns, snap.segments[0].at(10));
    }

    #[test]
    fn segment_cap_applies() {
        let c = GlobalClock::new(GlobalClockConfig {
            max_history_age_ns: u64::MAX,
            max_segments: 8,
        });
        c.initialize(0, 0, ServoState::Locked);
        for k in 1..50u64 {
            c.apply(adj(k, 0, 0.0));
        }
        assert_eq!(c.snapshot().segments.len(), 8);
    }

    #[test]
    fn snapshot_is_shared_across_threads() {
        let c = GlobalClock::fixed(7);
        let r = c.clone();
        let h = std::thread::spawn(move || r.to_global_ns(10));
        assert_eq!(h.join().unwrap(), Some(17));
    }
}
