//! A log-linear histogram of signed nanosecond values: percentiles within
//! 1/64 (1.6 %) of the true value, exact count, minimum and maximum, in a
//! few kilobytes whatever the number of samples, so the matcher's memory
//! does not grow with the trace.

use serde::Serialize;

/// Sub-buckets per power of two (2^SUB_BITS): the relative resolution.
const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;

/// Bucket index of a magnitude: values below `SUB` have their own
/// bucket; above, `SUB` buckets per power of two.
fn index(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // >= SUB_BITS
    let shift = exp - SUB_BITS;
    let mant = (v >> shift) - SUB; // 0..SUB
    (SUB + u64::from(shift) * SUB + mant) as usize
}

/// Smallest magnitude of a bucket and its width.
fn bucket_range(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < SUB {
        return (i, 1);
    }
    let shift = (i - SUB) / SUB;
    let mant = (i - SUB) % SUB;
    ((SUB + mant) << shift, 1u64 << shift)
}

/// Histogram of signed values (ns).
#[derive(Debug, Clone, Default)]
pub struct Hist {
    pos: Vec<u64>,
    neg: Vec<u64>,
    count: u64,
    min: i64,
    max: i64,
}

/// The summary of a histogram people read: count and a few quantiles.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Dist {
    /// Samples.
    pub count: u64,
    /// Smallest value, ns (exact).
    pub min_ns: i64,
    /// Median, ns.
    pub p50_ns: i64,
    /// 99th percentile, ns.
    pub p99_ns: i64,
    /// Largest value, ns (exact).
    pub max_ns: i64,
}

fn bump(v: &mut Vec<u64>, i: usize) {
    if v.len() <= i {
        v.resize(i + 1, 0);
    }
    v[i] += 1;
}

impl Hist {
    /// An empty histogram.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add one value.
    pub fn add(&mut self, v: i64) {
        if self.count == 0 {
            self.min = v;
            self.max = v;
        } else {
            self.min = self.min.min(v);
            self.max = self.max.max(v);
        }
        self.count += 1;
        if v >= 0 {
            bump(&mut self.pos, index(v as u64));
        } else {
            bump(&mut self.neg, index(v.unsigned_abs()));
        }
    }

    /// Samples added.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Smallest value (exact); `None` when empty.
    pub fn min(&self) -> Option<i64> {
        (self.count > 0).then_some(self.min)
    }

    /// Largest value (exact); `None` when empty.
    pub fn max(&self) -> Option<i64> {
        (self.count > 0).then_some(self.max)
    }

    /// Samples below zero.
    pub fn negatives(&self) -> u64 {
        self.neg.iter().sum()
    }

    /// Buckets in ascending value order: (lowest value, highest value, count).
    fn buckets(&self) -> impl Iterator<Item = (i64, i64, u64)> + '_ {
        let neg = self
            .neg
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| {
                let (lo, w) = bucket_range(i);
                (-((lo + w - 1) as i64), -(lo as i64), *c)
            });
        let pos = self
            .pos
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| {
                let (lo, w) = bucket_range(i);
                (lo as i64, (lo + w - 1) as i64, *c)
            });
        neg.chain(pos)
    }

    /// The value at quantile `q` (0..=1), nearest rank, as the middle of
    /// its bucket clamped to the exact extremes; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<i64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        // The extremes are known exactly.
        if rank == 1 {
            return Some(self.min);
        }
        if rank >= self.count {
            return Some(self.max);
        }
        let mut seen = 0;
        for (lo, hi, c) in self.buckets() {
            seen += c;
            if seen >= rank {
                let mid = lo + (hi - lo) / 2;
                return Some(mid.clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }

    /// Count, min, p50, p99, max; `None` when empty.
    pub fn dist(&self) -> Option<Dist> {
        Some(Dist {
            count: self.count,
            min_ns: self.min()?,
            p50_ns: self.quantile(0.5)?,
            p99_ns: self.quantile(0.99)?,
            max_ns: self.max()?,
        })
    }

    /// The cumulative distribution as (value at the top of a bucket,
    /// fraction of samples at or below it), ascending; for plots.
    pub fn cdf(&self) -> Vec<(i64, f64)> {
        let mut out = Vec::new();
        let mut seen = 0u64;
        for (_, hi, c) in self.buckets() {
            seen += c;
            out.push((hi.min(self.max), seen as f64 / self.count as f64));
        }
        out
    }

    /// Add every sample of `other`.
    pub fn merge(&mut self, other: &Hist) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 {
            self.min = other.min;
            self.max = other.max;
        } else {
            self.min = self.min.min(other.min);
            self.max = self.max.max(other.max);
        }
        self.count += other.count;
        for (dst, src) in [(&mut self.pos, &other.pos), (&mut self.neg, &other.neg)] {
            if dst.len() < src.len() {
                dst.resize(src.len(), 0);
            }
            for (d, s) in dst.iter_mut().zip(src) {
                *d += s;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_tile_the_line() {
        let mut next = 0u64;
        for i in 0..2000 {
            let (lo, w) = bucket_range(i);
            assert_eq!(lo, next, "bucket {i}");
            assert_eq!(index(lo), i);
            assert_eq!(index(lo + w - 1), i);
            next = lo + w;
        }
        assert!(index(u64::MAX) < 64 * 64 + 64);
    }

    #[test]
    fn quantiles_of_a_known_set() {
        let mut h = Hist::new();
        assert_eq!(h.dist(), None);
        for v in 1..=1000 {
            h.add(v * 1000);
        }
        let d = h.dist().unwrap();
        assert_eq!((d.count, d.min_ns, d.max_ns), (1000, 1000, 1_000_000));
        assert!((d.p50_ns - 500_000).abs() <= 500_000 / 64, "{d:?}");
        assert!((d.p99_ns - 990_000).abs() <= 990_000 / 64, "{d:?}");
        let cdf = h.cdf();
        assert_eq!(cdf.last().unwrap().1, 1.0);
        assert!(cdf.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
    }

    #[test]
    fn negative_values_sort_below_positive_ones() {
        let mut h = Hist::new();
        for v in [-5000, -20, 0, 7, 3000] {
            h.add(v);
        }
        assert_eq!(h.negatives(), 2);
        assert_eq!(h.quantile(0.0), Some(-5000));
        assert_eq!(h.quantile(0.4), Some(-20));
        assert_eq!(h.quantile(0.6), Some(0));
        assert_eq!(h.quantile(1.0), Some(3000));
        let mut m = Hist::new();
        m.merge(&h);
        m.merge(&h);
        assert_eq!((m.count(), m.min(), m.negatives()), (10, Some(-5000), 4));
    }

    proptest! {
        #[test]
        fn quantile_within_resolution(mut vals in proptest::collection::vec(-10_000_000i64..10_000_000, 1..300), q in 0.0f64..1.0) {
            let mut h = Hist::new();
            for v in &vals { h.add(*v); }
            vals.sort();
            let rank = ((q * vals.len() as f64).ceil() as usize).max(1);
            let exact = vals[rank - 1];
            let got = h.quantile(q).unwrap();
            let tol = (exact.unsigned_abs() / 64).max(1) as i64;
            prop_assert!((got - exact).abs() <= tol, "q {} exact {} got {}", q, exact, got);
        }
    }
}
