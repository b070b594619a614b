//! Test-only clock error injection: make this host's CLOCK_REALTIME and
//! CLOCK_TAI look off by an offset plus a drift, as an independent
//! oscillator would be, so one machine can test what two would show.

use crate::bracket::{now_ns, ClockId};
use crate::error::ClockError;

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
}
