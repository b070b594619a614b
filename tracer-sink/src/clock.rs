//! The sink's own clock and UTC formatting of file names.
//!
//! Events that carry no global timestamp (kinds this build does not know)
//! are stamped with the sink's receive time. Today that is CLOCK_TAI of the
//! sink host; [`SinkClock`] leaves room for a later `--clock
//! system|phc:<dev>|iface:<name>` without touching the callers.

use std::time::{SystemTime, UNIX_EPOCH};

/// Which clock stamps events without a global time of their own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SinkClock {
    /// CLOCK_TAI of the sink host (the agents' `system` source).
    #[default]
    System,
}

impl SinkClock {
    /// Current time on this clock, nanoseconds since the epoch.
    pub fn now_ns(&self) -> u64 {
        match self {
            SinkClock::System => tai_now_ns(),
        }
    }
}

/// CLOCK_TAI now, in nanoseconds since 1970 (falls back to CLOCK_REALTIME
/// if the kernel refuses CLOCK_TAI).
pub fn tai_now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid, exclusively
    // borrowed `ts` and reads nothing else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_TAI, &mut ts) };
    if rc == 0 {
        (ts.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(ts.tv_nsec as u64)
    } else {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    }
}

/// `YYYYmmddTHHMMSSZ` for a time in seconds since the epoch (UTC).
pub fn utc_compact(unix_s: u64) -> String {
    let days = (unix_s / 86_400) as i64;
    let secs = unix_s % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

/// Proleptic Gregorian date of a day count since 1970-01-01.
///
/// Shifts the year to start in March so the leap day is the last day of the
/// year, then splits days into 400-year eras (146,097 days each).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468; // days from 0000-03-01 to 1970-01-01
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of era, 0..=146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // 0..=399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of (March-based) year
    let mp = (5 * doy + 2) / 153; // March-based month, 0..=11
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formatting_matches_known_dates() {
        assert_eq!(utc_compact(0), "19700101T000000Z");
        assert_eq!(utc_compact(951_782_400), "20000229T000000Z");
        assert_eq!(utc_compact(1_700_000_000), "20231114T221320Z");
        assert_eq!(utc_compact(4_102_444_799), "20991231T235959Z");
    }

    #[test]
    fn tai_clock_is_after_2020() {
        assert!(tai_now_ns() > 1_577_836_800 * 1_000_000_000);
    }
}
