//! Four-stamp arithmetic of one exchange: offset, path delay, the servo
//! sample it makes, and the minimum-delay filter. Pure functions.

use crate::source::traits::OffsetSample;

/// The four stamps of one exchange, each on its side's axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Exchange {
    /// Sequence number.
    pub seq: u64,
    /// Client TX, client CLOCK_MONOTONIC, ns.
    pub t1_ns: u64,
    /// Responder RX, responder global axis, ns.
    pub t2_ns: u64,
    /// Responder TX, responder global axis, ns.
    pub t3_ns: u64,
    /// Client RX, client CLOCK_MONOTONIC, ns.
    pub t4_ns: u64,
}

impl Exchange {
    /// Responder minus client, ns: `((t2 - t1) + (t3 - t4)) / 2`.
    pub fn offset_ns(&self) -> i64 {
        let a = self.t2_ns.wrapping_sub(self.t1_ns) as i64 as i128;
        let b = self.t3_ns.wrapping_sub(self.t4_ns) as i64 as i128;
        ((a + b) / 2) as i64
    }

    /// Round-trip path delay, ns: `(t4 - t1) - (t3 - t2)` (0 if negative).
    pub fn delay_ns(&self) -> u64 {
        let rtt = self.t4_ns.wrapping_sub(self.t1_ns) as i64;
        let hold = self.t3_ns.wrapping_sub(self.t2_ns) as i64;
        rtt.saturating_sub(hold).max(0) as u64
    }

    /// As a servo sample: at mono (t1+t4)/2 the reference read (t2+t3)/2.
    pub fn to_sample(&self) -> OffsetSample {
        let mono = self.t1_ns / 2 + self.t4_ns / 2 + (self.t1_ns % 2 + self.t4_ns % 2) / 2;
        let delay = self.delay_ns();
        OffsetSample {
            mono_ns: mono,
            ref_ns: mono.wrapping_add(self.offset_ns() as u64),
            uncertainty_ns: delay / 2,
            delay_ns: delay,
        }
    }
}

/// The exchange with the smallest delay (the minimum-delay filter).
pub fn min_delay(exchanges: &[Exchange]) -> Option<Exchange> {
    exchanges.iter().copied().min_by_key(Exchange::delay_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_and_delay_from_four_stamps() {
        // Responder 1000 ns ahead, 300 ns each way, held 50 ns.
        let x = Exchange {
            seq: 1,
            t1_ns: 10_000,
            t2_ns: 11_300,
            t3_ns: 11_350,
            t4_ns: 10_650,
        };
        assert_eq!(x.offset_ns(), 1000);
        assert_eq!(x.delay_ns(), 600);
        let s = x.to_sample();
        assert_eq!(s.mono_ns, 10_325);
        assert_eq!(s.ref_ns, 11_325);
        assert_eq!(s.uncertainty_ns, 300);
        // Asymmetry shows up as half its size in the offset.
        let y = Exchange {
            t2_ns: 11_500,
            t3_ns: 11_550,
            t4_ns: 10_850,
            ..x
        };
        assert_eq!(y.offset_ns(), 1100);
    }

    #[test]
    fn min_delay_picks_the_fastest() {
        let x = |seq, t4_ns| Exchange {
            seq,
            t1_ns: 0,
            t2_ns: 100,
            t3_ns: 110,
            t4_ns,
        };
        let v = [x(1, 400), x(2, 220), x(3, 900)];
        assert_eq!(min_delay(&v).unwrap().seq, 2);
        assert!(min_delay(&[]).is_none());
    }
}
