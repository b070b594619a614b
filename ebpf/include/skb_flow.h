/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * A packet's flow read from its own IP and TCP/UDP headers, once per
 * event, for every use of it: the rx probe's stack entry (record,
 * --sample-every and --filter all from the one parse), drops, and resets
 * sent to no socket.
 *
 * The reads are loads through bpf_core_cast() (bpf_rdonly_cast: the
 * verifier turns the call into a register move and the loads through it
 * into fault-safe PROBE_MEM loads), not bpf_probe_read_kernel() calls: on
 * the machines this was measured on a helper call costs 20-170 ns (every
 * return goes through the SRSO "safe RET" thunk), a load next to nothing.
 * A load that faults reads 0, which the version checks below turn into
 * "not IP".
 *
 * IPv6: up to SKB_FLOW_MAX_EXT extension headers (hop-by-hop, routing,
 * destination options, fragment, AH) are walked to reach TCP/UDP; a
 * packet with more, or a fragment other than the first, has no ports.
 *
 * The parser proper, skb_flow_parse_nh(), takes the network header's
 * address and is plain C: the host's compiler builds it with
 * SKB_FLOW_CAST defined as a plain cast, and
 * tracer-agent/src/probes/skb_flow.rs tests it on packets built there.
 * In BPF include after kernel.h and the libbpf headers; on the host after
 * <linux/types.h>, with __always_inline, bpf_ntohs, bpf_ntohl and
 * SKB_FLOW_CAST defined.
 */
#ifndef TRACER_SKB_FLOW_H
#define TRACER_SKB_FLOW_H

#include "packet.h"

#ifndef SKB_FLOW_CAST
#define SKB_FLOW_CAST(p, type) bpf_core_cast(p, type)
#endif

/* The packet bytes at `p` as 64-bit words (packet.h). */
#define SKB_FLOW_WORDS(p) \
	(SKB_FLOW_CAST(p, struct bpf_raw_tracepoint_args)->args)

/* Most IPv6 extension headers walked before giving up on the ports. */
#define SKB_FLOW_MAX_EXT 4

/* A packet's flow as its headers say (source, destination). */
struct skb_flow {
	__u8 family;	/* 4, 6, or 0 when not IP (or unreadable) */
	__u8 l4proto;	/* upper-layer protocol, after IPv6 extension headers */
	__u8 has_seq;	/* TCP header read: seq and end_seq are set */
	__u8 _pad;
	__u16 sport;	/* host order, TCP/UDP only */
	__u16 dport;
	__u32 seq;	/* TCP: sequence number of the first byte */
	__u32 end_seq;	/* TCP: seq + payload + SYN + FIN, as TCP_SKB_CB */
	__u8 saddr[16];	/* IPv4 in the first 4 bytes, then zeros */
	__u8 daddr[16];
};

/* The `n` bytes from byte `i` of the 8 bytes of packet that `w` holds (a
 * native load), as a native load of just those bytes would read them. */
static __always_inline __u64 skb_flow_bytes_at(__u64 w, int i, int n)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	w >>= 8 * i;
#else
	w >>= 64 - 8 * (i + n);
#endif
	return n == 8 ? w : w & ((1ULL << (8 * n)) - 1);
}

static __always_inline __u8 skb_flow_u8_at(__u64 w, int i)
{
	return (__u8)skb_flow_bytes_at(w, i, 1);
}

/* A 16-bit field of the wire (big-endian), in host order. */
static __always_inline __u16 skb_flow_be16_at(__u64 w, int i)
{
	return bpf_ntohs((__u16)skb_flow_bytes_at(w, i, 2));
}

/* Four bytes as they are in memory (an IPv4 address). */
static __always_inline __u32 skb_flow_raw32_at(__u64 w, int i)
{
	return (__u32)skb_flow_bytes_at(w, i, 4);
}

/* TCP or UDP ports, and for TCP the sequence range of `l4len` bytes of
 * segment (header included). Wide loads: every load through a cast
 * pointer is a guarded load in BPF (about ten instructions of range check
 * each), so the 16 bytes TCP needs are read as two words, not five fields. */
static __always_inline void skb_flow_l4(const unsigned char *l4, __u32 l4len,
					struct skb_flow *f)
{
	const __u64 *w = SKB_FLOW_WORDS(l4);

	if (f->l4proto == IPPROTO_TCP) {
		__u64 w0 = w[0], w1 = w[1];
		__u32 doff = (skb_flow_u8_at(w1, 4) >> 4) * 4;
		__u8 flags = skb_flow_u8_at(w1, 5);

		f->sport = skb_flow_be16_at(w0, 0);
		f->dport = skb_flow_be16_at(w0, 2);
		f->seq = bpf_ntohl(skb_flow_raw32_at(w0, 4));
		/* As TCP_SKB_CB: SYN and FIN take one sequence number each. */
		f->end_seq = f->seq + (l4len > doff ? l4len - doff : 0) +
			     (flags & 1) + ((flags >> 1) & 1);
		f->has_seq = 1;
	} else if (f->l4proto == IPPROTO_UDP) {
		__u64 w0 = w[0];	/* struct udphdr is 8 bytes: one word */

		f->sport = skb_flow_be16_at(w0, 0);
		f->dport = skb_flow_be16_at(w0, 2);
	}
}

/* Fill `f` from the packet whose network header is at `nh`, `protocol`
 * (host order) its ethertype: zeros unless it is IPv4 or IPv6 with the
 * right version. IP tot_len / payload_len size the TCP range, so a
 * GRO-merged skb is one range. */
static __always_inline void skb_flow_parse_nh(const unsigned char *nh,
					      __u16 protocol,
					      struct skb_flow *f)
{
	__u32 l4len, off;

	__builtin_memset(f, 0, sizeof(*f));
	if (protocol == ETH_P_IP) {
		/* Three loads for the 20 bytes (see skb_flow_l4). */
		const __u64 *w = SKB_FLOW_WORDS(nh);
		__u64 w0 = w[0], w1 = w[1];
		__u8 vi = skb_flow_u8_at(w0, 0);
		__u32 tot;

		off = (vi & 0xf) * 4;
		if ((vi >> 4) != 4 || off < sizeof(struct iphdr))
			return;
		f->family = 4;
		f->l4proto = skb_flow_u8_at(w1, 1);
		*(__u32 *)f->saddr = skb_flow_raw32_at(w1, 4);
		*(__u32 *)f->daddr = skb_flow_raw32_at(w[2], 0);
		/* A later fragment has no L4 header. */
		if (skb_flow_be16_at(w0, 6) & 0x1fff)
			return;
		tot = skb_flow_be16_at(w0, 2);
		l4len = tot > off ? tot - off : 0;
	} else if (protocol == ETH_P_IPV6) {
		/* Five loads for the 40 bytes (see skb_flow_l4). */
		const __u64 *w = SKB_FLOW_WORDS(nh);
		__u64 w0 = w[0];
		__u8 next;
		int i;

		if ((skb_flow_u8_at(w0, 0) >> 4) != 6)
			return;
		f->family = 6;
		((__u64 *)f->saddr)[0] = w[1];
		((__u64 *)f->saddr)[1] = w[2];
		((__u64 *)f->daddr)[0] = w[3];
		((__u64 *)f->daddr)[1] = w[4];
		next = skb_flow_u8_at(w0, 6);
		l4len = skb_flow_be16_at(w0, 4);
		off = sizeof(struct ipv6hdr);
		for (i = 0; i < SKB_FLOW_MAX_EXT; i++) {
			const struct ipv6_opt_hdr *h =
				SKB_FLOW_CAST(nh + off, struct ipv6_opt_hdr);
			__u32 len;

			if (next == IPPROTO_HOPOPTS || next == IPPROTO_ROUTING ||
			    next == IPPROTO_DSTOPTS) {
				len = (h->hdrlen + 1) * 8;
			} else if (next == IPPROTO_AH) {
				len = (h->hdrlen + 2) * 4;
			} else if (next == IPPROTO_FRAGMENT) {
				const struct frag_hdr *fh =
					SKB_FLOW_CAST(nh + off, struct frag_hdr);

				len = sizeof(*fh);
				if (bpf_ntohs(fh->frag_off) & ~7) {
					f->l4proto = fh->nexthdr;
					return;
				}
			} else {
				break;
			}
			next = h->nexthdr;
			off += len;
			l4len = l4len > len ? l4len - len : 0;
		}
		f->l4proto = next;
	} else {
		return;
	}
	skb_flow_l4(nh + off, l4len, f);
}

/* The TCP sequence range of a segment whose IP header is at `nh` and TCP
 * header at `th`: what skb_flow_parse_nh() finds for it, from three loads
 * instead of the whole walk, for a sender that knows the segment is TCP
 * and where its headers are, and has its addresses and ports (the tx
 * probe, from the socket). The IP length less the IP headers up to `th`
 * (IPv6 extension headers included) and the TCP header, plus SYN and FIN.
 * The IP version is the header's own (an AF_INET6 socket sends IPv4 to a
 * mapped address). Returns 0, and sets nothing, unless the lengths add up. */
static __always_inline int skb_flow_tcp_range(const unsigned char *nh,
					      const unsigned char *th,
					      __u32 *seq, __u32 *end_seq)
{
	__u64 n0 = SKB_FLOW_WORDS(nh)[0];
	const __u64 *w = SKB_FLOW_WORDS(th);
	__u64 w0 = w[0], w1 = w[1];
	__u32 iplen, hdrs = th - nh, doff = (skb_flow_u8_at(w1, 4) >> 4) * 4;
	__u8 version = skb_flow_u8_at(n0, 0) >> 4, flags = skb_flow_u8_at(w1, 5);

	if (version == 4)
		iplen = skb_flow_be16_at(n0, 2);
	else if (version == 6)
		iplen = skb_flow_be16_at(n0, 4) + 40;
	else
		return 0;
	if (doff < 20 || iplen < hdrs + doff)
		return 0;
	*seq = bpf_ntohl(skb_flow_raw32_at(w0, 4));
	*end_seq = *seq + (iplen - hdrs - doff) + (flags & 1) + ((flags >> 1) & 1);
	return 1;
}

#ifdef __bpf__
/* The flow of the packet in `skb` (network header set), `protocol` its
 * skb->protocol in host order. */
static __always_inline void skb_flow_parse(struct sk_buff *skb, __u16 protocol,
					   struct skb_flow *f)
{
	unsigned char *head = skb->head;
	__u16 nh = skb->network_header;

	if (!head || nh == (__u16)~0U) {
		__builtin_memset(f, 0, sizeof(*f));
		return;
	}
	skb_flow_parse_nh(head + nh, protocol, f);
}
#endif

#endif /* TRACER_SKB_FLOW_H */
