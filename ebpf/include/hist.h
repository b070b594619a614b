/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Log2 latency histograms kept in the kernel (the agent's --metrics mode),
 * with the buckets Prometheus users know from ebpf_exporter's `exp2`
 * decoder and netstacklat: bucket k counts the values v with
 * 2^(k-1) < v <= 2^k (right-inclusive, `le` = 2^k ns), bucket 0 counts
 * v <= 1, and the last bucket, NT_HIST_INF, counts everything above
 * 2^(NT_HIST_INF-1) ns and is exported as `+Inf`. So 2^k lands in bucket
 * k and 2^k + 1 in bucket k + 1: the off-by-one ebpf_exporter had (its
 * issue 488) is what tracer-agent/src/metrics/hist.rs tests this header
 * against, compiled on the host.
 *
 * Plain C: no helpers, no kernel types (it compiles on the host too).
 */
#ifndef TRACER_HIST_H
#define TRACER_HIST_H

/* Finite buckets 0..36 (le 2^36 ns, 68.7 s), then +Inf. */
#define NT_HIST_INF 37
#define NT_HIST_BUCKETS (NT_HIST_INF + 1)

/* One histogram, in whole cache lines when it starts on a 64-byte
 * boundary (the rows of the `hists` array do). First a line that every
 * observation writes: the sum of the values (ns) and a word the RX hooks
 * keep their copy of the TAI offset in (metrics.bpf.c). Then the counts,
 * eight buckets to a line (five lines). An observation writes two lines,
 * one of them the same every time. The layout before it kept a count, a
 * sum and the offset word in 32 bytes per bucket: one line per
 * observation, but which of 19 depended on the value, and after a change
 * of the offset a second one. Beside it the copy hook, whose values spread
 * over a dozen buckets, measured 0.95-0.97x (within the noise), for a
 * third of the memory (docs/benchmarks.md). */
struct nt_hist {
	__u64 sum_ns;
	__u64 tai_state;
	__u64 _head_pad[6];
	__u64 count[NT_HIST_BUCKETS];
	__u64 _tail_pad[2];
};

/* The bucket of `v` ns: ceil(log2(v)), 0 for v <= 1, NT_HIST_INF above
 * the last finite bound. For v >= 2 that is the number of significant
 * bits of v - 1: every bit below the highest one is set (the shifts), then
 * counted (a SWAR popcount). No branch depends on the value: a compare
 * chain would mispredict at a hook whose latencies vary (one in two at
 * each of its six steps), and BPF has no count-leading-zeros instruction. */
static __always_inline __u32 nt_hist_bucket(__u64 v)
{
	__u64 x;
	__u32 b;

	if (v <= 1)
		return 0;
	x = v - 1;
	x |= x >> 1;
	x |= x >> 2;
	x |= x >> 4;
	x |= x >> 8;
	x |= x >> 16;
	x |= x >> 32;
	x -= (x >> 1) & 0x5555555555555555ULL;
	x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
	x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
	b = (__u32)((x * 0x0101010101010101ULL) >> 56);
	return b > NT_HIST_INF ? NT_HIST_INF : b;
}

#endif /* TRACER_HIST_H */
