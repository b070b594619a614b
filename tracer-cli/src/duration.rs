//! Durations written with a unit (`250ms`, `2s`, `500us`, `1.5µs`), for
//! options whose values span nanoseconds to hours.

/// Nanoseconds per unit, longest suffixes first so `ms` is not read as `s`.
const UNITS: [(&str, f64); 5] = [
    ("ns", 1.0),
    ("us", 1e3),
    ("µs", 1e3),
    ("ms", 1e6),
    ("s", 1e9),
];

/// `ns` written with the largest unit that divides it (`1us`, `86400s`).
pub fn ns_text(ns: u64) -> String {
    for (unit, per) in [("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)] {
        if ns >= per && ns % per == 0 {
            return format!("{}{unit}", ns / per);
        }
    }
    format!("{ns}ns")
}

/// A duration with a unit (ns, us, µs, ms, s; a bare number is
/// milliseconds) from `lo_ns` to `hi_ns`, as whole nanoseconds.
pub fn duration_ns(
    lo_ns: u64,
    hi_ns: u64,
) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync {
    move |s| {
        let range = format!("{}..={}", ns_text(lo_ns), ns_text(hi_ns));
        let t = s.trim();
        let (num, per) = UNITS
            .iter()
            .find_map(|&(unit, per)| t.strip_suffix(unit).map(|n| (n, per)))
            .unwrap_or((t, 1e6));
        // Only plain decimals: `f64::from_str` would also take "nan",
        // "inf" and exponents, none of which is a duration anyone writes.
        let plain = !num.is_empty()
            && num.bytes().all(|b| b.is_ascii_digit() || b == b'.')
            && num.bytes().filter(|&b| b == b'.').count() <= 1
            && num != ".";
        let bad = || {
            format!(
                "`{s}` is not a duration in {range} (e.g. 250ms, 2s, 500us; a bare number is ms)"
            )
        };
        if !plain {
            return Err(bad());
        }
        let v: f64 = num.parse().map_err(|_| bad())?;
        let ns = (v * per).round();
        if !(lo_ns as f64..=hi_ns as f64).contains(&ns) {
            return Err(format!("{s} is not in {range}"));
        }
        Ok(ns as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_bare_milliseconds() {
        let p = duration_ns(1_000, 86_400_000_000_000);
        assert_eq!(p("250ms"), Ok(250_000_000));
        assert_eq!(p("2s"), Ok(2_000_000_000));
        assert_eq!(p("500us"), Ok(500_000));
        assert_eq!(p("1.5µs"), Ok(1_500));
        assert_eq!(p("40"), Ok(40_000_000));
        assert_eq!(p("1us"), Ok(1_000));
        assert_eq!(p("86400s"), Ok(86_400_000_000_000));
    }

    #[test]
    fn everything_else_is_refused_with_the_range() {
        let p = duration_ns(1_000, 86_400_000_000_000);
        assert_eq!(p("999ns").unwrap_err(), "999ns is not in 1us..=86400s");
        assert!(p("86400000000001ns").is_err());
        assert!(p("0s").is_err());
        for bad in [
            "fast",
            "3 parsecs",
            "-1",
            "-1ms",
            "nan",
            "NaNs",
            "inf",
            "infs",
            "1e30",
            "1e3ms",
            "18446744073709551615",
            "",
            ".",
            "1.2.3s",
        ] {
            let e = p(bad).unwrap_err();
            assert!(e.contains("1us..=86400s"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn ranges_read_as_written() {
        assert_eq!(ns_text(1), "1ns");
        assert_eq!(ns_text(1_500), "1500ns");
        assert_eq!(ns_text(100_000_000), "100ms");
        assert_eq!(ns_text(3_600_000_000_000), "3600s");
    }
}
