//! Conversion of raw kernel stamps (CLOCK_MONOTONIC) to the global axis.

use clocksync::{measure_offset, ClockId};
use tracer_codec::{ClockSource, ClockState};

/// Maps CLOCK_MONOTONIC to CLOCK_TAI of this host by a bracketed offset,
/// refreshed periodically (the offset moves only when the system clock is
/// stepped: both clocks share NTP's frequency corrections).
#[derive(Debug, Clone)]
pub struct SystemTai {
    offset_ns: i64,
    width_ns: u64,
    refreshed: bool,
}

impl SystemTai {
    /// Brackets per refresh; the narrowest wins.
    const BRACKETS: usize = 16;

    /// Measure the mapping now.
    pub fn new() -> Result<Self, clocksync::bracket::ClockError> {
        let mut s = SystemTai {
            offset_ns: 0,
            width_ns: 0,
            refreshed: false,
        };
        s.refresh()?;
        Ok(s)
    }

    /// Re-measure the offset.
    pub fn refresh(&mut self) -> Result<(), clocksync::bracket::ClockError> {
        let b = measure_offset(ClockId::Monotonic, ClockId::Tai, Self::BRACKETS)?;
        self.offset_ns = b.offset_ns();
        self.width_ns = b.width_ns;
        self.refreshed = true;
        Ok(())
    }

    /// Global (TAI) ns of a monotonic stamp.
    #[inline]
    pub fn to_global_ns(&self, mono_ns: u64) -> u64 {
        mono_ns.wrapping_add(self.offset_ns as u64)
    }

    /// Clock source advertised in datagram headers.
    pub fn source(&self) -> ClockSource {
        ClockSource::System
    }

    /// State advertised in datagram headers.
    pub fn state(&self) -> ClockState {
        if self.refreshed {
            ClockState::Locked
        } else {
            ClockState::Unlocked
        }
    }

    /// Uncertainty of the last measurement (bracket width).
    pub fn width_ns(&self) -> u64 {
        self.width_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_monotonic_now_to_tai_now() {
        let m = SystemTai::new().unwrap();
        let mono = clocksync::bracket::now_ns(ClockId::Monotonic).unwrap();
        let tai = clocksync::bracket::now_ns(ClockId::Tai).unwrap();
        let err = m.to_global_ns(mono) as i64 - tai as i64;
        assert!(err.abs() < 1_000_000, "mapping off by {err} ns");
    }
}
