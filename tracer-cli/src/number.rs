//! Bounded numbers: whole numbers, reals, seconds, milliseconds and
//! powers of two. NaN, infinities, negative values where the range has
//! none, and anything past the range are refused, so that no later
//! conversion (`Duration::from_secs_f64`, `Instant + Duration`) can panic
//! or overflow.

use std::fmt::Display;
use std::time::Duration;

/// A whole-number type the parsers produce (every value fits an `i128`,
/// so one comparison serves signed and unsigned types).
pub trait Whole: Copy + Display + TryFrom<i128> + Send + Sync + 'static {
    /// The value, widened.
    fn wide(self) -> i128;
}

macro_rules! whole {
    ($($t:ty),*) => {$(
        impl Whole for $t {
            fn wide(self) -> i128 {
                self as i128
            }
        }
    )*};
}
whole!(u16, u32, u64, usize, i64);

/// Parse a decimal whole number (optional sign). `Err(true)` when it is
/// one but does not fit even an `i128`, `Err(false)` when it is no number.
fn parse_wide(s: &str) -> Result<i128, bool> {
    let t = s.trim();
    if let Ok(n) = t.parse::<i128>() {
        return Ok(n);
    }
    let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
    Err(!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
}

/// The text of a range for messages and help: `lo..=hi unit`.
fn range_text(lo: impl Display, hi: impl Display, unit: &str) -> String {
    if unit.is_empty() {
        format!("{lo}..={hi}")
    } else {
        format!("{lo}..={hi} {unit}")
    }
}

/// A whole number in `lo..=hi` (decimal).
pub fn int<T: Whole>(lo: T, hi: T) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync {
    move |s| whole_in(s, lo, hi, "")
}

fn whole_in<T: Whole>(s: &str, lo: T, hi: T, unit: &str) -> Result<T, String> {
    let range = range_text(lo, hi, unit);
    let n = match parse_wide(s) {
        Ok(n) => n,
        Err(true) => return Err(format!("{s} is not in {range}")),
        Err(false) => return Err(format!("`{s}` is not a whole number in {range}")),
    };
    if n < lo.wide() || n > hi.wide() {
        return Err(format!("{s} is not in {range}"));
    }
    T::try_from(n).map_err(|_| format!("{s} is not in {range}"))
}

/// A power of two in `lo..=hi` (both powers of two themselves).
pub fn power_of_two(
    lo: u32,
    hi: u32,
) -> impl Fn(&str) -> Result<u32, String> + Clone + Send + Sync {
    move |s| {
        let n = whole_in(s, lo, hi, "")?;
        if !n.is_power_of_two() {
            return Err(format!(
                "{s} is not a power of two (in {lo}..={hi}); e.g. {}",
                n.next_power_of_two().min(hi)
            ));
        }
        Ok(n)
    }
}

/// A finite real number in `lo..=hi`, in `unit` (for messages).
fn real_in(s: &str, lo: f64, hi: f64, unit: &str) -> Result<f64, String> {
    let range = range_text(lo, hi, unit);
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number in {range}"))?;
    // NaN compares false with everything: `contains` refuses it too.
    if !(lo..=hi).contains(&v) {
        return Err(format!("{s} is not in {range}"));
    }
    Ok(v)
}

/// A finite real number in `lo..=hi`.
pub fn real(lo: f64, hi: f64) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync {
    move |s| real_in(s, lo, hi, "")
}

/// A duration in seconds (fractions allowed) in `lo..=hi`; `lo >= 0`.
pub fn secs(lo: f64, hi: f64) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync {
    debug_assert!(lo >= 0.0 && hi >= lo && hi.is_finite());
    move |s| real_in(s, lo, hi, "s").map(Duration::from_secs_f64)
}

/// A duration in seconds in `lo..=hi`, or exactly 0 (which the option
/// gives a meaning of its own, e.g. "off"): `Duration::ZERO`.
pub fn secs_or_zero(
    lo: f64,
    hi: f64,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync {
    debug_assert!(lo > 0.0 && hi >= lo && hi.is_finite());
    move |s| match s.trim().parse::<f64>() {
        // A float pattern compares with ==, so "-0" is 0 too.
        Ok(0.0) => Ok(Duration::ZERO),
        _ => real_in(s, lo, hi, "s")
            .map(Duration::from_secs_f64)
            .map_err(|_| format!("{s} is neither 0 nor in {lo}..={hi} s")),
    }
}

/// A duration in whole milliseconds in `lo..=hi`.
pub fn millis(lo: u64, hi: u64) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync {
    move |s| whole_in(s, lo, hi, "ms").map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values every numeric option is driven with.
    const HOSTILE: [&str; 8] = [
        "nan",
        "NaN",
        "inf",
        "-inf",
        "infinity",
        "1e30",
        "18446744073709551615",
        "",
    ];

    #[test]
    fn whole_numbers_have_a_range_and_say_it() {
        let p = int(1u32, 1000);
        assert_eq!(p("1"), Ok(1));
        assert_eq!(p(" 1000 "), Ok(1000));
        assert_eq!(p("0").unwrap_err(), "0 is not in 1..=1000");
        assert_eq!(p("-1").unwrap_err(), "-1 is not in 1..=1000");
        assert_eq!(p("1001").unwrap_err(), "1001 is not in 1..=1000");
        assert_eq!(
            p("99999999999999999999999999999999999999999").unwrap_err(),
            "99999999999999999999999999999999999999999 is not in 1..=1000"
        );
        assert_eq!(
            p("1.5").unwrap_err(),
            "`1.5` is not a whole number in 1..=1000"
        );
        for v in HOSTILE {
            assert!(p(v).is_err(), "{v:?}");
        }
        let full = int(0u64, u64::MAX);
        assert_eq!(full("18446744073709551615"), Ok(u64::MAX));
        assert!(full("18446744073709551616").is_err());
        let signed = int(-5i64, 5);
        assert_eq!(signed("-5"), Ok(-5));
        assert!(signed("-6").is_err());
    }

    #[test]
    fn powers_of_two_only() {
        let p = power_of_two(64, 1 << 20);
        assert_eq!(p("64"), Ok(64));
        assert_eq!(p("1048576"), Ok(1 << 20));
        let e = p("100").unwrap_err();
        assert!(e.contains("not a power of two") && e.contains("128"), "{e}");
        assert!(p("32").is_err());
        assert!(p("2097152").is_err());
        assert!(p("0").is_err());
    }

    #[test]
    fn reals_refuse_nan_infinities_and_the_outside() {
        let p = real(0.0, 100.0);
        assert_eq!(p("0"), Ok(0.0));
        assert_eq!(p("-0"), Ok(0.0));
        assert_eq!(p("100"), Ok(100.0));
        assert_eq!(p("-1").unwrap_err(), "-1 is not in 0..=100");
        assert!(p("100.00000000000001").is_err());
        for v in HOSTILE {
            assert!(p(v).is_err(), "{v:?}");
        }
        assert_eq!(p("fast").unwrap_err(), "`fast` is not a number in 0..=100");
    }

    #[test]
    fn seconds_convert_without_panic_at_every_edge() {
        let p = secs(0.01, 3600.0);
        assert_eq!(p("0.01"), Ok(Duration::from_millis(10)));
        assert_eq!(p("3600"), Ok(Duration::from_secs(3600)));
        assert_eq!(p("1e-12").unwrap_err(), "1e-12 is not in 0.01..=3600 s");
        assert!(p("0").is_err());
        assert!(p("-1").is_err());
        for v in HOSTILE {
            assert!(p(v).is_err(), "{v:?}");
        }
        let z = secs(0.0, 60.0);
        assert_eq!(z("0"), Ok(Duration::ZERO));
        assert!(z("-0.001").is_err());
    }

    #[test]
    fn zero_keeps_its_meaning_and_nothing_else_slips_through() {
        let p = secs_or_zero(0.1, 86400.0);
        assert_eq!(p("0"), Ok(Duration::ZERO));
        assert_eq!(p("0.0"), Ok(Duration::ZERO));
        assert_eq!(p("0.1"), Ok(Duration::from_millis(100)));
        assert_eq!(
            p("0.05").unwrap_err(),
            "0.05 is neither 0 nor in 0.1..=86400 s"
        );
        assert!(p("86400.001").is_err());
        for v in HOSTILE.iter().chain(&["-1", "-0.5"]) {
            assert!(p(v).is_err(), "{v:?}");
        }
    }

    #[test]
    fn milliseconds_are_whole() {
        let p = millis(1, 10_000);
        assert_eq!(p("100"), Ok(Duration::from_millis(100)));
        assert_eq!(p("0").unwrap_err(), "0 is not in 1..=10000 ms");
        assert!(p("0.5").is_err());
        for v in HOSTILE {
            assert!(p(v).is_err(), "{v:?}");
        }
    }
}
