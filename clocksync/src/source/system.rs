//! The system clocks (CLOCK_TAI, CLOCK_REALTIME, CLOCK_MONOTONIC_RAW) as a
//! source, read against CLOCK_MONOTONIC with tight brackets.

use crate::bracket::{measure_offset, now_ns, ClockId};
use crate::error::ClockError;
use crate::source::inject::{inject, ErrorInjection};
use crate::source::oscillator::Oscillator;
use crate::source::traits::{Clock, OffsetSample, ReferenceClock, DEFAULT_READS};

/// A system clock (CLOCK_TAI, CLOCK_REALTIME, ...), read against
/// CLOCK_MONOTONIC with the narrowest of `reads` brackets.
#[derive(Debug, Clone)]
pub struct SystemClock {
    id: ClockId,
    injection: Option<ErrorInjection>,
    oscillator: Option<Oscillator>,
    reads: usize,
}

impl SystemClock {
    /// A system clock with [`DEFAULT_READS`] reads per sample.
    pub fn new(id: ClockId) -> Self {
        SystemClock {
            id,
            injection: None,
            oscillator: None,
            reads: DEFAULT_READS,
        }
    }

    /// Apply an error injection (only to REALTIME and TAI).
    pub fn with_injection(mut self, inj: Option<ErrorInjection>) -> Self {
        self.injection = inj.filter(|i| !i.is_zero());
        self
    }

    /// Read every clock as a machine running on `osc` would: all system
    /// clocks of a machine share its oscillator, so each reading (the
    /// bracket's monotonic instant and the clock read with it) is shifted
    /// by the oscillator's error at that instant.
    pub fn with_oscillator(mut self, osc: Option<Oscillator>) -> Self {
        self.oscillator = osc;
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
        if self.injection().is_none() && self.oscillator.is_none() {
            return Ok(t);
        }
        let mono = now_ns(ClockId::Monotonic)?;
        let t = inject(self.injection(), t, mono);
        Ok(match &self.oscillator {
            Some(osc) => t.wrapping_add(osc.error_ns(mono) as u64),
            None => t,
        })
    }
    fn name(&self) -> String {
        format!("{:?}", self.id).to_uppercase()
    }
}

impl ReferenceClock for SystemClock {
    fn sample(&mut self) -> Result<OffsetSample, ClockError> {
        let b = measure_offset(ClockId::Monotonic, self.id, self.reads)?;
        let ref_ns = inject(self.injection(), b.target_ns, b.base_ns);
        // Both readings of the bracket come from the one oscillator.
        let err = self
            .oscillator
            .as_ref()
            .map_or(0, |o| o.error_ns(b.base_ns));
        Ok(OffsetSample {
            mono_ns: b.base_ns.wrapping_add(err as u64),
            ref_ns: ref_ns.wrapping_add(err as u64),
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

    #[test]
    fn on_an_oscillator_the_monotonic_instant_and_the_reading_shift_together() {
        use crate::source::oscillator::OscillatorSpec;
        let osc = OscillatorSpec::new(3_000_000, 50.0).start_now().unwrap();
        let mut plain = SystemClock::new(ClockId::Tai);
        let mut local = SystemClock::new(ClockId::Tai).with_oscillator(Some(osc.clone()));
        let a = plain.sample().unwrap();
        let b = local.sample().unwrap();
        // TAI - MONO is the same on the simulated machine...
        let d = b.ref_minus_mono_ns() - a.ref_minus_mono_ns();
        assert!(d.abs() < 100_000, "{d}");
        // ...but both readings are the local clock's: 3 ms ahead.
        let ahead = b.mono_ns as i64 - a.mono_ns as i64 - 3_000_000;
        assert!((0..100_000_000).contains(&ahead), "{ahead}");
        let tai = now_ns(ClockId::Tai).unwrap();
        let local_tai = local.now_ns().unwrap() as i64;
        assert!((local_tai - tai as i64 - 3_000_000).abs() < 100_000);
    }
}
