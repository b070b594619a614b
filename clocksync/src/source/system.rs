//! The system clocks (CLOCK_TAI, CLOCK_REALTIME, CLOCK_MONOTONIC_RAW) as a
//! source, read against CLOCK_MONOTONIC with tight brackets.

use crate::bracket::{measure_offset, now_ns, ClockId};
use crate::error::ClockError;
use crate::source::inject::{inject, ErrorInjection};
use crate::source::traits::{Clock, OffsetSample, ReferenceClock, DEFAULT_READS};

/// A system clock (CLOCK_TAI, CLOCK_REALTIME, ...), read against
/// CLOCK_MONOTONIC with the narrowest of `reads` brackets.
#[derive(Debug, Clone)]
pub struct SystemClock {
    id: ClockId,
    injection: Option<ErrorInjection>,
    reads: usize,
}

impl SystemClock {
    /// A system clock with [`DEFAULT_READS`] reads per sample.
    pub fn new(id: ClockId) -> Self {
        SystemClock {
            id,
            injection: None,
            reads: DEFAULT_READS,
        }
    }

    /// Apply an error injection (only to REALTIME and TAI).
    pub fn with_injection(mut self, inj: Option<ErrorInjection>) -> Self {
        self.injection = inj.filter(|i| !i.is_zero());
        self
    }

    /// Readings per sample (the narrowest bracket wins).
    pub fn with_reads(mut self, reads: usize) -> Self {
        self.reads = reads.max(1);
        self
    }

    fn injection(&self) -> Option<&ErrorInjection> {
        match self.id {
            ClockId::Realtime | ClockId::Tai => self.injection.as_ref(),
            ClockId::Monotonic | ClockId::MonotonicRaw => None,
        }
    }
}

impl Clock for SystemClock {
    fn now_ns(&mut self) -> Result<u64, ClockError> {
        let t = now_ns(self.id)?;
        match self.injection() {
            Some(inj) => Ok(inj.apply(t, now_ns(ClockId::Monotonic)?)),
            None => Ok(t),
        }
    }
    fn name(&self) -> String {
        format!("{:?}", self.id).to_uppercase()
    }
}

impl ReferenceClock for SystemClock {
    fn sample(&mut self) -> Result<OffsetSample, ClockError> {
        let b = measure_offset(ClockId::Monotonic, self.id, self.reads)?;
        Ok(OffsetSample {
            mono_ns: b.base_ns,
            ref_ns: inject(self.injection(), b.target_ns, b.base_ns),
            uncertainty_ns: b.width_ns / 2,
            delay_ns: b.width_ns,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_source_with_injection_shows_the_error() {
        let inj = ErrorInjection::starting_now(3_000_000, 0.0).unwrap();
        let mut plain = SystemClock::new(ClockId::Tai);
        let mut bad = SystemClock::new(ClockId::Tai).with_injection(Some(inj));
        let a = plain.sample().unwrap();
        let b = bad.sample().unwrap();
        let diff = b.ref_minus_mono_ns() - a.ref_minus_mono_ns() - 3_000_000;
        assert!(diff.abs() < 100_000, "{diff}");
        // Monotonic is never shifted.
        let mut mono = SystemClock::new(ClockId::Monotonic).with_injection(Some(inj));
        let m = mono.sample().unwrap();
        assert!(m.ref_minus_mono_ns().abs() <= m.delay_ns as i64);
    }
}
