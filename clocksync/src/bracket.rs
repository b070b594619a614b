//! Offset between two kernel clocks by tight `clock_gettime` brackets:
//! read A, B, A and keep the reading whose A-bracket is narrowest, as
//! phc2sys does for system clocks without a cross-timestamp ioctl.

/// A system clock readable with `clock_gettime`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockId {
    /// CLOCK_MONOTONIC: what `bpf_ktime_get_ns()` returns.
    Monotonic,
    /// CLOCK_MONOTONIC_RAW: not slewed by NTP.
    MonotonicRaw,
    /// CLOCK_REALTIME.
    Realtime,
    /// CLOCK_TAI.
    Tai,
}

impl ClockId {
    /// The libc clock id.
    pub fn raw(self) -> libc::clockid_t {
        match self {
            ClockId::Monotonic => libc::CLOCK_MONOTONIC,
            ClockId::MonotonicRaw => libc::CLOCK_MONOTONIC_RAW,
            ClockId::Realtime => libc::CLOCK_REALTIME,
            ClockId::Tai => libc::CLOCK_TAI,
        }
    }

    /// The C name ("CLOCK_TAI").
    pub fn name(self) -> &'static str {
        match self {
            ClockId::Monotonic => "CLOCK_MONOTONIC",
            ClockId::MonotonicRaw => "CLOCK_MONOTONIC_RAW",
            ClockId::Realtime => "CLOCK_REALTIME",
            ClockId::Tai => "CLOCK_TAI",
        }
    }
}

use crate::error::ClockError;

/// Read a system clock in nanoseconds.
pub fn now_ns(clock: ClockId) -> Result<u64, ClockError> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(clock.raw(), &mut ts) };
    if rc != 0 {
        return Err(ClockError::Gettime {
            clock: clock.name(),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// One bracketed reading of `target` against `base`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BracketSample {
    /// Midpoint of the two `base` readings.
    pub base_ns: u64,
    /// The `target` reading taken between them.
    pub target_ns: u64,
    /// Width of the bracket (the uncertainty of the pairing).
    pub width_ns: u64,
}

impl BracketSample {
    /// `target - base`, signed.
    pub fn offset_ns(&self) -> i64 {
        self.target_ns.wrapping_sub(self.base_ns) as i64
    }
}

/// Take `n` brackets base/target/base and return the narrowest.
pub fn measure_offset(
    base: ClockId,
    target: ClockId,
    n: usize,
) -> Result<BracketSample, ClockError> {
    let mut best: Option<BracketSample> = None;
    for _ in 0..n.max(1) {
        let b1 = now_ns(base)?;
        let t = now_ns(target)?;
        let b2 = now_ns(base)?;
        let s = BracketSample {
            base_ns: b1 + (b2.saturating_sub(b1)) / 2,
            target_ns: t,
            width_ns: b2.saturating_sub(b1),
        };
        if best.is_none_or(|b| s.width_ns < b.width_ns) {
            best = Some(s);
        }
    }
    // n.max(1) iterations ran, so best is set.
    Ok(best.expect("at least one bracket"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_to_tai_offset_matches_direct_reads() {
        let s = measure_offset(ClockId::Monotonic, ClockId::Tai, 16).unwrap();
        assert!(s.width_ns < 1_000_000, "bracket too wide: {}", s.width_ns);
        let m = now_ns(ClockId::Monotonic).unwrap();
        let t = now_ns(ClockId::Tai).unwrap();
        let err = (t as i64 - m as i64) - s.offset_ns();
        assert!(err.abs() < 1_000_000, "offset moved by {err} ns");
    }

    #[test]
    fn same_clock_offset_is_near_zero() {
        let s = measure_offset(ClockId::Monotonic, ClockId::Monotonic, 16).unwrap();
        assert!(s.offset_ns().abs() <= s.width_ns as i64);
    }
}
