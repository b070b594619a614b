//! Test-only clock error injection: make this host's CLOCK_REALTIME and
//! CLOCK_TAI look off by an offset plus a drift, as an independent
//! oscillator would be, so one machine can test what two would show.

use crate::bracket::{now_ns, ClockId};
use crate::error::ClockError;

/// Largest injected offset either way, ns (one day): any clock error a test
/// needs, far from where `offset + drift·elapsed` could overflow.
pub const MAX_INJECTED_OFFSET_NS: i64 = 86_400_000_000_000;
/// Largest injected drift either way, ppm (a thousand times a common
/// crystal's tolerance; the simulated oscillator takes the same bound).
pub const MAX_INJECTED_DRIFT_PPM: f64 = 1000.0;

/// Behave as if this host's CLOCK_REALTIME and CLOCK_TAI were off by
/// `offset_ns + drift_ppm·1e-6·(mono - start_mono_ns)`. Applied to every
/// realtime/TAI reading (the system source, the exchange's
/// realtime→monotonic mapping) and every kernel realtime stamp the exchange
/// reads. CLOCK_MONOTONIC is never touched.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct ErrorInjection {
    /// Error at `start_mono_ns`, ns.
    pub offset_ns: i64,
    /// Frequency error, ppm (the error grows by this many µs per second).
    pub drift_ppm: f64,
    /// Monotonic instant the drift is counted from, ns.
    pub start_mono_ns: u64,
}

impl ErrorInjection {
    /// An injection whose drift starts now.
    pub fn starting_now(offset_ns: i64, drift_ppm: f64) -> Result<Self, ClockError> {
        if offset_ns.unsigned_abs() > MAX_INJECTED_OFFSET_NS.unsigned_abs() {
            return Err(ClockError::BadInjection(format!(
                "injected offset {offset_ns} ns is outside ±{MAX_INJECTED_OFFSET_NS} ns"
            )));
        }
        if !(-MAX_INJECTED_DRIFT_PPM..=MAX_INJECTED_DRIFT_PPM).contains(&drift_ppm) {
            return Err(ClockError::BadInjection(format!(
                "injected drift {drift_ppm} ppm is outside ±{MAX_INJECTED_DRIFT_PPM} ppm"
            )));
        }
        Ok(ErrorInjection {
            offset_ns,
            drift_ppm,
            start_mono_ns: now_ns(ClockId::Monotonic)?,
        })
    }

    /// An injection starting now, or `None` when both figures are zero.
    pub fn nonzero(offset_ns: i64, drift_ppm: f64) -> Result<Option<Self>, ClockError> {
        if offset_ns == 0 && drift_ppm == 0.0 {
            Ok(None)
        } else {
            Self::starting_now(offset_ns, drift_ppm).map(Some)
        }
    }

    /// True when it changes nothing.
    pub fn is_zero(&self) -> bool {
        self.offset_ns == 0 && self.drift_ppm == 0.0
    }

    /// The injected error at monotonic instant `mono_ns`, ns.
    pub fn error_ns(&self, mono_ns: u64) -> i64 {
        let elapsed_ns = mono_ns.wrapping_sub(self.start_mono_ns) as i64;
        self.offset_ns + (elapsed_ns as f64 * self.drift_ppm * 1e-6).round() as i64
    }

    /// A realtime/TAI reading or kernel stamp taken at about `mono_ns`, as the
    /// faulty host would see it.
    pub fn apply(&self, realtime_ns: u64, mono_ns: u64) -> u64 {
        realtime_ns.wrapping_add(self.error_ns(mono_ns) as u64)
    }
}

/// Apply an optional injection.
pub fn inject(inj: Option<&ErrorInjection>, realtime_ns: u64, mono_ns: u64) -> u64 {
    inj.map_or(realtime_ns, |i| i.apply(realtime_ns, mono_ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn injection_offsets_and_drifts() {
        let inj = ErrorInjection {
            offset_ns: 3_000_000,
            drift_ppm: 50.0,
            start_mono_ns: 1_000_000_000,
        };
        assert_eq!(inj.error_ns(1_000_000_000), 3_000_000);
        assert_eq!(inj.error_ns(3_000_000_000), 3_100_000);
        assert_eq!(inj.apply(10, 1_000_000_000), 3_000_010);
        assert_eq!(inject(None, 10, 1_000_000_000), 10);
    }

    #[test]
    fn injections_outside_their_range_are_refused() {
        let day = MAX_INJECTED_OFFSET_NS;
        assert!(ErrorInjection::starting_now(day, 1000.0).is_ok());
        assert!(ErrorInjection::starting_now(-day, -1000.0).is_ok());
        for (off, drift) in [
            (day + 1, 0.0),
            (i64::MIN, 0.0),
            (0, 1000.001),
            (0, f64::NAN),
            (0, f64::INFINITY),
        ] {
            let e = ErrorInjection::nonzero(off, drift).unwrap_err();
            assert!(e.to_string().contains("outside"), "{e}");
        }
    }
}
