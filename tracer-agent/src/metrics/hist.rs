//! The in-kernel histograms' buckets (`ebpf/include/hist.h`) as Prometheus
//! sees them: bucket k holds the values v with 2^(k-1) < v <= 2^k ns
//! (`le` = 2^k ns, right-inclusive, ebpf_exporter's `exp2`), the last one
//! is `+Inf`. The tests compile hist.h on the host and hold its bucket
//! function to this definition at every power of two and its neighbours,
//! where ebpf_exporter once put 2^k one bucket too high (its issue 488).

/// Buckets per histogram, `+Inf` included (NT_HIST_BUCKETS in hist.h).
pub const BUCKETS: usize = 38;
/// Index of the `+Inf` bucket (NT_HIST_INF).
pub const INF: usize = BUCKETS - 1;
/// Where the counts start in a row (`struct nt_hist`): after a line of the
/// sum and the program's own words.
pub const COUNTS_AT: usize = 64;
/// Bytes of one row: that line, a u64 count per bucket, then padding to
/// whole lines.
pub const HIST_BYTES: usize = (COUNTS_AT + BUCKETS * 8).div_ceil(64) * 64;

/// One histogram as the kernel keeps it, summed over CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hist {
    /// Values per bucket (not cumulative).
    pub counts: [u64; BUCKETS],
    /// Sum of the values, ns.
    pub sum_ns: u64,
}

impl Default for Hist {
    fn default() -> Self {
        Hist {
            counts: [0; BUCKETS],
            sum_ns: 0,
        }
    }
}

impl Hist {
    /// Add one CPU's histogram (`struct nt_hist`, native-endian u64): the
    /// sum at 0, the counts from [`COUNTS_AT`]. A short row adds the
    /// counts it has, and its sum only if it reaches the counts.
    pub fn add_row(&mut self, bytes: &[u8]) {
        let word = |b: &[u8]| u64::from_ne_bytes(b[..8].try_into().expect("8 bytes"));
        let Some(counts) = bytes.get(COUNTS_AT..) else {
            return;
        };
        self.sum_ns = self.sum_ns.wrapping_add(word(bytes));
        for (n, b) in self.counts.iter_mut().zip(counts.chunks_exact(8)) {
            *n = n.wrapping_add(word(b));
        }
    }

    /// Values observed.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// `(upper bound in seconds, count)` per bucket, as prometheus-client
    /// takes them (`f64::MAX` is written `+Inf`).
    pub fn buckets_seconds(&self) -> Vec<(f64, u64)> {
        self.counts
            .iter()
            .enumerate()
            .map(|(k, &c)| (upper_bound_seconds(k), c))
            .collect()
    }
}

/// The bucket's `le`, seconds: 2^k ns, `f64::MAX` (written `+Inf`) for
/// the last.
pub fn upper_bound_seconds(k: usize) -> f64 {
    if k >= INF {
        f64::MAX
    } else {
        (1u64 << k) as f64 * 1e-9
    }
}

/// The bucket of `v` ns by definition: the smallest k with v <= 2^k,
/// capped at `+Inf`.
pub fn bucket_of(v: u64) -> usize {
    (0..INF).find(|&k| v <= 1u64 << k).unwrap_or(INF)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// hist.h's nt_hist_bucket, run on the host for each value on stdin.
    const C_EVAL: &str = r#"
#include "hist.h"
int main(void)
{
    unsigned long long v;
    printf("%d %d\n", NT_HIST_BUCKETS, NT_HIST_INF);
    while (scanf("%llu", &v) == 1)
        printf("%u\n", nt_hist_bucket(v));
    return 0;
}
"#;

    fn probe_values() -> Vec<u64> {
        let mut v = vec![0, 1, 2, 3, u64::MAX, u64::MAX - 1];
        for k in 0..64u32 {
            let p = 1u64 << k;
            // The edges, and values between them (the bit count of the
            // branch-free bucket sees every bit pattern below the top).
            v.extend([p - 1, p, p + 1, p + p / 2, p | ((p - 1) / 3)]);
        }
        v
    }

    #[test]
    fn the_bpf_bucket_function_is_right_inclusive_log2() {
        let values = probe_values();
        let input: String = values.iter().map(|v| format!("{v}\n")).collect();
        let out = crate::host_c::run_header_program(C_EVAL, &input);
        let mut lines = out.lines();
        assert_eq!(
            lines.next(),
            Some(format!("{BUCKETS} {INF}").as_str()),
            "hist.h's sizes"
        );
        for (v, line) in values.iter().zip(lines) {
            let got: usize = line.parse().unwrap();
            assert_eq!(got, bucket_of(*v), "bucket of {v}");
        }
        // The definition itself, at the edges ebpf_exporter got wrong.
        for k in 1..INF {
            let p = 1u64 << k;
            assert_eq!(bucket_of(p), k, "2^{k} is in bucket {k}");
            assert_eq!(bucket_of(p + 1), k + 1, "2^{k}+1 is in bucket {}", k + 1);
        }
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 0);
        assert_eq!(bucket_of(1 << (INF - 1)), INF - 1);
        assert_eq!(bucket_of((1 << (INF - 1)) + 1), INF);
        assert_eq!(bucket_of(u64::MAX), INF);
    }

    #[test]
    fn buckets_are_exposed_as_powers_of_two_nanoseconds_then_inf() {
        let mut h = Hist::default();
        // The sum (1000), the program's own words, which are not values,
        // then count k in bucket k, then the padding.
        let mut cpu = Vec::new();
        for w in [1000, u64::MAX, 7, 7, 7, 7, 7, 7] {
            cpu.extend_from_slice(&w.to_ne_bytes());
        }
        for k in 0..BUCKETS as u64 {
            cpu.extend_from_slice(&k.to_ne_bytes());
        }
        cpu.resize(HIST_BYTES, 0xff);
        h.add_row(&cpu);
        h.add_row(&cpu);
        assert_eq!(h.counts[5], 10);
        assert_eq!(h.counts[INF], 2 * INF as u64);
        assert_eq!(h.sum_ns, 2000);
        // A cut-off row adds the counts it has; one without counts nothing.
        let mut part = Hist::default();
        part.add_row(&cpu[..COUNTS_AT + 2 * 8 + 4]);
        assert_eq!((part.count(), part.sum_ns), (1, 1000));
        part.add_row(&cpu[..COUNTS_AT - 1]);
        assert_eq!((part.count(), part.sum_ns), (1, 1000));
        assert_eq!(h.count(), 2 * (0..BUCKETS as u64).sum::<u64>());
        let b = h.buckets_seconds();
        assert_eq!(b.len(), BUCKETS);
        assert_eq!(b[0].0, 1e-9);
        assert_eq!(b[10].0, 1024e-9);
        assert_eq!(b[INF].0, f64::MAX);
        assert!(b.windows(2).all(|w| w[0].0 < w[1].0));
    }
}
