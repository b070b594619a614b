/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Sampling by TCP byte range, the same decision on both ends of a
 * connection (`--sample-every N`). This file is the specification; its Rust
 * twin, which the agent and the matcher use, is tracer-codec/src/sample.rs,
 * and tracer-codec/tests/sample_h.rs compiles this header with the host's
 * cc and compares both on many inputs.
 *
 * The rule: the sequence space of each direction of a flow is cut into
 * granules of 64 KiB (seq >> NT_SAMPLE_GRANULE_SHIFT). A granule is sampled
 * iff the top 32 bits of fmix64(flow_hash ^ granule) fall under
 * 2^32 / N. The flow hash is taken in the data's direction (sender ->
 * receiver: the TX socket's local -> remote, the RX packet's source ->
 * destination), from what both ends see identically:
 *   - TX (sockops, SENDMSG) tags the sendmsg iff the granule of the byte the
 *     stamp reports (tskey = seq + len - 1 of the skb) is sampled;
 *   - RX records an skb iff ANY granule of its range [seq, end_seq) is
 *     sampled (a GRO skb may merge sampled and unsampled bytes), so the RX
 *     skb(s) carrying a sampled TX skb's last byte are always recorded;
 *     an empty range (pure ACK) decides by the granule of seq; stages with
 *     no skb (DATA_READY, READ_DONE) by the granule of end_seq - 1.
 * Why 64 KiB: the largest skb GSO/GRO build without BIG TCP, so an skb
 * spans at most two granules and RX records at most ~2/N of the skbs; a
 * smaller granule makes RX keep nearly every merged skb (16 KiB: 5 granules,
 * 41% at N = 10), a larger one makes the sampled stretches rarer and longer.
 * Ranges longer than NT_SAMPLE_MAX_GRANULES granules (BIG TCP) are kept.
 *
 * Addresses are hashed as big-endian words (network order, the same value
 * on any host), an IPv4 address as its word followed by three zero words,
 * and an IPv4-mapped IPv6 address (::ffff:a.b.c.d, a dual-stack socket) as
 * the IPv4 address it maps, so a v4 packet and a v6 socket agree.
 *
 * Fixed vectors (checked by the Rust twin's tests):
 *   nt_sample_threshold(10) = 429496729
 *   nt_sample_flow(10.9.0.1:40000 -> 10.9.0.2:5201) = 0x05e825bde982e6a5
 *     (the same for ::ffff:10.9.0.1 -> ::ffff:10.9.0.2); of its granules
 *     0..63, at N = 10, these are sampled: 13 17 22 24 25 43 49 52.
 *
 * Include after the definitions of __u16/__u32/__u64 (kernel.h in BPF,
 * <linux/types.h> on the host). No helper calls: it compiles for any target.
 */
#ifndef TRACER_SAMPLE_H
#define TRACER_SAMPLE_H

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

#define NT_SAMPLE_GRANULE_SHIFT 16
/* Longest range checked granule by granule; longer ones are kept. */
#define NT_SAMPLE_MAX_GRANULES 16
/* The threshold that keeps everything (N = 1). */
#define NT_SAMPLE_ALL (1ULL << 32)

/* Threshold for one in `every`: the top 32 bits of a hash fall under it
 * with probability 1/every. */
static __always_inline __u64 nt_sample_threshold(__u32 every)
{
	return every <= 1 ? NT_SAMPLE_ALL : NT_SAMPLE_ALL / every;
}

/* A native load of network-order bytes, as the big-endian value. */
static __always_inline __u64 nt_sample_be32(__u32 native)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return __builtin_bswap32(native);
#else
	return native;
#endif
}

/* Combine one 64-bit word into the running hash (multiply-shift). */
static __always_inline __u64 nt_sample_mix(__u64 h, __u64 v)
{
	return (h ^ v) * 0x9e3779b97f4a7c15ULL;
}

/* murmur3's 64-bit finalizer: every input bit reaches the top 32 bits. */
static __always_inline __u64 nt_sample_fmix(__u64 h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

/* One address (4 native words of network-order bytes) into the hash. */
static __always_inline __u64 nt_sample_mix_addr(__u64 h, const __u32 a[4])
{
	__u64 w0 = nt_sample_be32(a[0]), w1 = nt_sample_be32(a[1]);
	__u64 w2 = nt_sample_be32(a[2]), w3 = nt_sample_be32(a[3]);

	if (w0 == 0 && w1 == 0 && w2 == 0xffff) {	/* ::ffff:a.b.c.d */
		w0 = w3;
		w2 = 0;
		w3 = 0;
	}
	h = nt_sample_mix(h, w0 << 32 | w1);
	return nt_sample_mix(h, w2 << 32 | w3);
}

/* The flow in the data's direction: source (sender) -> destination. Ports
 * in host order. */
static __always_inline __u64 nt_sample_flow(const __u32 saddr[4],
					    const __u32 daddr[4],
					    __u16 sport, __u16 dport)
{
	__u64 h = 0;

	h = nt_sample_mix_addr(h, saddr);
	h = nt_sample_mix_addr(h, daddr);
	return nt_sample_mix(h, (__u64)sport << 16 | dport);
}

/* nt_sample_flow of two IPv4 addresses (each as loaded from memory, network
 * order), i.e. of {saddr, 0, 0, 0} -> {daddr, 0, 0, 0}: the same value
 * without the v4-mapped test and the zero words (which such an address
 * never is), so that the compiler folds the two multiplications per
 * address into one. An unsampled skb of an IPv4 flow pays this hash at
 * every hook: 20-31 % of an unsampled socket hook's run time before. */
static __always_inline __u64 nt_sample_flow4(__u32 saddr, __u32 daddr,
					     __u16 sport, __u16 dport)
{
	__u64 h = 0;

	h = nt_sample_mix(h, nt_sample_be32(saddr) << 32);
	h = nt_sample_mix(h, 0);
	h = nt_sample_mix(h, nt_sample_be32(daddr) << 32);
	h = nt_sample_mix(h, 0);
	return nt_sample_mix(h, (__u64)sport << 16 | dport);
}

/* Is granule `granule` (seq >> NT_SAMPLE_GRANULE_SHIFT) of the flow sampled? */
static __always_inline int nt_sample_granule(__u64 flow, __u32 granule,
					     __u64 threshold)
{
	return (nt_sample_fmix(flow ^ granule) >> 32) < threshold;
}

/* Is the byte at sequence number `seq` sampled? */
static __always_inline int nt_sample_byte(__u64 flow, __u32 seq,
					  __u64 threshold)
{
	return nt_sample_granule(flow, seq >> NT_SAMPLE_GRANULE_SHIFT,
				 threshold);
}

/* Does [seq, end_seq) hold a sampled byte? Sequence arithmetic wraps; an
 * empty range decides by seq's granule, an overlong one (or end before
 * start) is kept. */
static __always_inline int nt_sample_range(__u64 flow, __u32 seq,
					   __u32 end_seq, __u64 threshold)
{
	__u32 first = seq >> NT_SAMPLE_GRANULE_SHIFT, n, i;

	if (end_seq == seq)
		return nt_sample_granule(flow, first, threshold);
	/* Granules touched: from seq's granule start to the last byte. */
	n = ((end_seq - 1 - (seq & ~((1U << NT_SAMPLE_GRANULE_SHIFT) - 1))) >>
	     NT_SAMPLE_GRANULE_SHIFT) + 1;
	if (n > NT_SAMPLE_MAX_GRANULES)
		return 1;
	for (i = 0; i < NT_SAMPLE_MAX_GRANULES; i++) {
		if (i >= n)
			break;
		if (nt_sample_granule(flow, (first + i) &
				      ((1U << (32 - NT_SAMPLE_GRANULE_SHIFT)) - 1),
				      threshold))
			return 1;
	}
	return 0;
}

#endif /* TRACER_SAMPLE_H */
