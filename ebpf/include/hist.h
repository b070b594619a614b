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

/* One histogram: per-bucket counts and the sum of the values (ns). */
struct nt_hist {
	__u64 count[NT_HIST_BUCKETS];
	__u64 sum_ns;
};

/* floor(log2(v)) for v >= 1, in six compares: no loop for the verifier,
 * no count-leading-zeros instruction (BPF has none). */
static __always_inline __u32 nt_log2_floor(__u64 v)
{
	__u32 r = 0;

	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) r += 1;
	return r;
}

/* The bucket of `v` ns: ceil(log2(v)), 0 for v <= 1, NT_HIST_INF above
 * the last finite bound. */
static __always_inline __u32 nt_hist_bucket(__u64 v)
{
	__u32 b;

	if (v <= 1)
		return 0;
	b = nt_log2_floor(v - 1) + 1;
	return b > NT_HIST_INF ? NT_HIST_INF : b;
}

#endif /* TRACER_HIST_H */
