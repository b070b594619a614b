//! The sink's own clock and UTC formatting of file names.
//!
//! Events that carry no global timestamp (kinds this build does not know)
//! are stamped with the sink's receive time on [`SinkClock`]: CLOCK_TAI of
//! the sink host, or the global clock its `--clock` disciplines.

use clocksync::{now_ns, ClockId, GlobalClock};

/// Which clock stamps events without a global time of their own.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub enum SinkClock {
    /// CLOCK_TAI of the sink host (the agents' `system` source).
    #[default]
    System,
    /// The sink's global clock, disciplined to its `--clock` (what agents
    /// with `--clock sink` follow).
    Global(GlobalClock),
}

impl SinkClock {
    /// Current time on this clock, nanoseconds since the epoch. A global
    /// clock without a first sample yet falls back to CLOCK_TAI.
    pub fn now_ns(&self) -> u64 {
        let global = match self {
            SinkClock::System => None,
            SinkClock::Global(c) => now_ns(ClockId::Monotonic)
                .ok()
                .and_then(|m| c.to_global_ns(m)),
        };
        // CLOCK_TAI cannot fail on Linux >= 3.10; 0 would show as 1970.
        global.unwrap_or_else(|| now_ns(ClockId::Tai).unwrap_or(0))
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
    fn system_clock_is_tai() {
        let t = SinkClock::System.now_ns();
        assert!(t > 1_577_836_800 * 1_000_000_000);
        let tai = now_ns(ClockId::Tai).unwrap();
        assert!(tai.abs_diff(t) < 1_000_000_000);
    }

    #[test]
    fn global_clock_is_followed_not_tai() {
        // A global clock an hour ahead of TAI: the sink must use it.
        let hour = 3_600_000_000_000i64;
        let tai_minus_mono = clocksync::measure_offset(ClockId::Monotonic, ClockId::Tai, 9)
            .unwrap()
            .offset_ns();
        let c = SinkClock::Global(GlobalClock::fixed(tai_minus_mono + hour));
        let t = c.now_ns() as i64;
        let tai = now_ns(ClockId::Tai).unwrap() as i64;
        assert!((t - tai - hour).abs() < 1_000_000_000, "{}", t - tai);
        // Before its first sample it falls back to TAI.
        let empty = SinkClock::Global(GlobalClock::default());
        assert!((empty.now_ns() as i64 - tai).abs() < 1_000_000_000);
    }
}
