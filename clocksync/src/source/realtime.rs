//! Kernel CLOCK_REALTIME stamps (software timestamps, PHC cross-stamps)
//! on the CLOCK_MONOTONIC axis: one tight bracket, or a tracker that
//! intersects many brackets.

use crate::bracket::{measure_offset, now_ns, ClockId};
use crate::error::ClockError;
use crate::source::inject::{inject, ErrorInjection};

/// Converts kernel CLOCK_REALTIME stamps to CLOCK_MONOTONIC with one tight
/// bracket (both are the same kernel's clocks, so the offset only moves when
/// NTP steps or slews realtime; refresh it often).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RealtimeToMono {
    /// `realtime - monotonic` as seen by this host (injection included), ns.
    pub offset_ns: i64,
    /// Bracket width of the measurement, ns.
    pub width_ns: u64,
    /// When it was measured (monotonic), ns.
    pub mono_ns: u64,
}

impl RealtimeToMono {
    /// Measure now, best of `reads` brackets; `inj` shifts the realtime reads.
    pub fn measure(inj: Option<&ErrorInjection>, reads: usize) -> Result<Self, ClockError> {
        let b = measure_offset(ClockId::Monotonic, ClockId::Realtime, reads)?;
        let rt = inject(inj, b.target_ns, b.base_ns);
        Ok(RealtimeToMono {
            offset_ns: rt.wrapping_sub(b.base_ns) as i64,
            width_ns: b.width_ns,
            mono_ns: b.base_ns,
        })
    }

    /// A realtime stamp on the monotonic axis.
    pub fn to_mono(&self, realtime_ns: u64) -> u64 {
        realtime_ns.wrapping_sub(self.offset_ns as u64)
    }
}

/// `realtime - monotonic` of this kernel, known to a few ns.
///
/// Both clocks come from one timekeeper and NTP slews them alike, so their
/// difference is a constant that changes only when realtime is stepped.
/// Each bracket `mono1, rt, mono2` proves `rt - mono2 ≤ offset ≤ rt - mono1`;
/// the tracker intersects these intervals over many brackets, which pins the
/// offset far tighter than one bracket's width. A bracket disjoint from the
/// interval means realtime was stepped: start over. The interval is also
/// restarted every `max_age_ns` so a slow drift cannot leave it stale.
#[derive(Debug, Clone, Copy)]
pub struct RealtimeMonoTracker {
    lo_ns: i64,
    hi_ns: i64,
    since_mono_ns: u64,
    max_age_ns: u64,
}

impl RealtimeMonoTracker {
    /// A tracker primed with 16 brackets; restarted each second.
    pub fn new() -> Result<Self, ClockError> {
        let mut t = RealtimeMonoTracker {
            lo_ns: i64::MIN,
            hi_ns: i64::MAX,
            since_mono_ns: 0,
            max_age_ns: 1_000_000_000,
        };
        for _ in 0..16 {
            t.refresh()?;
        }
        Ok(t)
    }

    /// Take one more bracket.
    pub fn refresh(&mut self) -> Result<(), ClockError> {
        let m1 = now_ns(ClockId::Monotonic)?;
        let rt = now_ns(ClockId::Realtime)?;
        let m2 = now_ns(ClockId::Monotonic)?;
        let lo = rt.wrapping_sub(m2) as i64;
        let hi = rt.wrapping_sub(m1) as i64;
        let stale = m1.saturating_sub(self.since_mono_ns) > self.max_age_ns;
        if stale || lo > self.hi_ns || hi < self.lo_ns {
            // Fresh start (first use, age, or realtime stepped).
            self.lo_ns = lo;
            self.hi_ns = hi;
            self.since_mono_ns = m1;
        } else {
            self.lo_ns = self.lo_ns.max(lo);
            self.hi_ns = self.hi_ns.min(hi);
        }
        Ok(())
    }

    /// Best estimate of `realtime - monotonic`, ns.
    pub fn offset_ns(&self) -> i64 {
        self.lo_ns + (self.hi_ns - self.lo_ns) / 2
    }

    /// Width of the interval the offset is known to lie in, ns.
    pub fn width_ns(&self) -> u64 {
        (self.hi_ns - self.lo_ns).max(0) as u64
    }

    /// A (true) realtime stamp on the monotonic axis.
    pub fn to_mono(&self, realtime_ns: u64) -> u64 {
        realtime_ns.wrapping_sub(self.offset_ns() as u64)
    }

    /// A realtime stamp read by a host with injected error `inj`, on the
    /// monotonic axis, as that host computes it: its realtime readings carry
    /// the same error, so the error cancels.
    pub fn to_mono_injected(&self, realtime_ns: u64, inj: Option<&ErrorInjection>) -> u64 {
        match inj {
            None => self.to_mono(realtime_ns),
            Some(i) => {
                // Solve rt = mono + offset + err(mono) for mono. err depends
                // on mono (drift), and a first guess off by the injected
                // offset would misplace it by drift * offset (50 ppm of 3 ms
                // is 150 ns): iterate; each round shrinks that by the drift.
                let mut mono = self.to_mono(realtime_ns);
                for _ in 0..3 {
                    let its_offset = self.offset_ns() + i.error_ns(mono);
                    mono = realtime_ns.wrapping_sub(its_offset as u64);
                }
                mono
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn injected_realtime_stamps_map_back_to_the_true_monotonic_instant() {
        let map = RealtimeMonoTracker::new().unwrap();
        let inj = ErrorInjection {
            offset_ns: 3_000_000,
            drift_ppm: 50.0,
            start_mono_ns: 1_000_000_000,
        };
        for mono in [1_000_000_000u64, 5_000_000_000, 3_600_000_000_000] {
            // The stamp a host with this error would read at `mono`.
            let rt = mono.wrapping_add(map.offset_ns() as u64);
            let rt_inj = inject(Some(&inj), rt, mono);
            let back = map.to_mono_injected(rt_inj, Some(&inj));
            // A one-step inversion is off by drift * offset = 150 ns here.
            assert!((back as i64 - mono as i64).abs() <= 1, "{mono}: got {back}");
        }
    }

    #[test]
    fn realtime_to_mono_round_trips() {
        let map = RealtimeToMono::measure(None, 5).unwrap();
        let rt = now_ns(ClockId::Realtime).unwrap();
        let mono = now_ns(ClockId::Monotonic).unwrap();
        let err = map.to_mono(rt) as i64 - mono as i64;
        assert!(err.abs() < 1_000_000, "{err}");
    }
}
