/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The `--filter` flow filter, evaluated in BPF before any ring output.
 * Every probe with a flow includes this header and calls
 * sk_flow_matches (a socket's flow) or skb_flow_parsed_matches (a flow
 * skb_flow.h parsed from the headers) right after its netns filter. The agent fills `flow_filter` (.rodata) from
 * tracer-agent/src/filter/term.rs between open and load.
 *
 * The filter is a conjunction of up to FILTER_MAX_CLAUSES clauses, each a
 * disjunction of up to FILTER_MAX_TERMS terms. An end of the flow (source
 * or destination) matches a term when its port is in [port_lo, port_hi]
 * and its 16-byte address masked with `mask` equals `addr`; the term
 * matches when one of the ends it looks at does and the flow's IP protocol
 * is `proto` (0: any), or, with `negate`, exactly when that is false. IPv4
 * addresses are compared as IPv4-mapped IPv6 (::ffff:a.b.c.d).
 *
 * Cost: .rodata is frozen before verification, so the verifier knows every
 * count: with no filter (n_clauses == 0) each call is pruned to nothing,
 * and with one only the configured terms are walked. The same two calls
 * exclude nettrace's own traffic (self_traffic.h, on by default): without
 * a filter a flow that is not UDP then returns after one comparison.
 *
 * Include after kernel.h and the libbpf headers. Everything but
 * sk_flow_matches (kernel types) also compiles on the host, where
 * tracer-agent/src/filter/ tests it against the parser's terms.
 */
#ifndef TRACER_FILTER_H
#define TRACER_FILTER_H

#include "skb_flow.h"

#define FILTER_MAX_CLAUSES 4
#define FILTER_MAX_TERMS 8

struct filter_term {
	__u8 src;	/* look at the source end */
	__u8 dst;	/* look at the destination end */
	__u8 proto;	/* IP protocol the flow must have (6, 17); 0 = any */
	__u8 negate;	/* match when the rest does not (`not`) */
	__u16 port_lo;	/* host order: the end's port in [port_lo, port_hi] */
	__u16 port_hi;
	__u32 addr[4];	/* masked address, memory order */
	__u32 mask[4];
};

struct filter_clause {
	__u32 n_terms;
	struct filter_term terms[FILTER_MAX_TERMS];
};

struct filter_config {
	__u32 n_clauses;	/* 0: no filter, every flow matches */
	struct filter_clause clauses[FILTER_MAX_CLAUSES];
};

/* Frozen .rodata in BPF; the host test of this header
 * (tracer-agent/src/host_c.rs) defines it writable. */
#ifndef FILTER_CONFIG_QUAL
#define FILTER_CONFIG_QUAL const volatile
#endif
/* nettrace's own traffic, excluded unless --trace-self: every caller of
 * sk_flow_matches and skb_flow_parsed_matches gets it. */
#include "self_traffic.h"
FILTER_CONFIG_QUAL struct filter_config flow_filter = {};
/* Read for UDP flows only: after flow_filter (see self_traffic.h). */
FILTER_CONFIG_QUAL struct self_endpoint self_endpoints[SELF_MAX_ENDPOINTS] = {};

/* A flow as the filter compares it: both addresses as 16 bytes. */
struct filter_flow {
	__u32 saddr[4];
	__u32 daddr[4];
	__u16 sport;
	__u16 dport;
	__u8 proto;	/* IP protocol (socket's sk_protocol, packet's l4proto) */
};

static __always_inline bool filter_on(void)
{
	return flow_filter.n_clauses != 0;
}

static __always_inline bool filter_end_matches(const volatile struct filter_term *t,
					       const __u32 *a, __u16 port)
{
	if (port < t->port_lo || port > t->port_hi)
		return false;
	return (a[0] & t->mask[0]) == t->addr[0] &&
	       (a[1] & t->mask[1]) == t->addr[1] &&
	       (a[2] & t->mask[2]) == t->addr[2] &&
	       (a[3] & t->mask[3]) == t->addr[3];
}

static __always_inline bool term_matches(const volatile struct filter_term *t,
					 const struct filter_flow *f)
{
	bool m = (t->src && filter_end_matches(t, f->saddr, f->sport)) ||
		 (t->dst && filter_end_matches(t, f->daddr, f->dport));

	if (t->proto && t->proto != f->proto)
		m = false;
	return m != (bool)t->negate;
}

static __always_inline bool flow_matches(const struct filter_flow *f)
{
	__u32 c, i;

	if (!filter_on())
		return true;
	for (c = 0; c < FILTER_MAX_CLAUSES; c++) {
		const volatile struct filter_clause *cl = &flow_filter.clauses[c];
		bool any = false;

		if (c >= flow_filter.n_clauses)
			break;
		for (i = 0; i < FILTER_MAX_TERMS; i++) {
			const volatile struct filter_term *t = &cl->terms[i];

			if (i >= cl->n_terms)
				break;
			if (term_matches(t, f)) {
				any = true;
				break;
			}
		}
		if (!any)
			return false;
	}
	return true;
}

/* An IPv4 address (network order, as loaded from memory) as IPv4-mapped. */
static __always_inline void filter_map4(__u32 *dst, __u32 a)
{
	dst[0] = 0;
	dst[1] = 0;
	dst[2] = bpf_htonl(0xffff);
	dst[3] = a;
}

#ifdef __bpf__
/* The socket's flow matches with nothing more to read: no --filter, and
 * neither of its ports (in the socket's first cache line) is a nettrace
 * endpoint's (self_port_either). */
static __always_inline bool sk_flow_surely_matches(const struct sock *sk)
{
	const struct sock_common *c = &sk->__sk_common;

	return !filter_on() &&
	       (!self_on() || !self_port_either(c->skc_num, bpf_ntohs(c->skc_dport)));
}

/* The socket's flow. `local_is_src`: the local end is the source (sends,
 * TCP events); false: the remote end is (received packets). False for
 * nettrace's own traffic (self_traffic.h). */
static __always_inline bool sk_flow_matches(const struct sock *sk, bool local_is_src)
{
	const struct sock_common *c;
	struct filter_flow f;
	__u32 *local, *remote;
	__u16 lport, rport;

	if (sk && sk_flow_surely_matches(sk))
		return true;
	if (!filter_on() &&
	    (!self_on() || !sk || sk->sk_protocol != IPPROTO_UDP))
		return true;
	if (!sk)
		return false;
	c = &sk->__sk_common;
	local = local_is_src ? f.saddr : f.daddr;
	remote = local_is_src ? f.daddr : f.saddr;
	if (c->skc_family == AF_INET6) {
		__builtin_memcpy(local, c->skc_v6_rcv_saddr.in6_u.u6_addr8, 16);
		__builtin_memcpy(remote, c->skc_v6_daddr.in6_u.u6_addr8, 16);
	} else if (c->skc_family == AF_INET) {
		filter_map4(local, c->skc_rcv_saddr);
		filter_map4(remote, c->skc_daddr);
	} else {
		return !filter_on();
	}
	lport = c->skc_num;
	rport = bpf_ntohs(c->skc_dport);
	f.proto = (__u8)sk->sk_protocol;
	f.sport = local_is_src ? lport : rport;
	f.dport = local_is_src ? rport : lport;
	return !self_flow(f.saddr, f.sport, f.daddr, f.dport, f.proto) &&
	       flow_matches(&f);
}

/* sk_flow_matches for a socket whose IP protocol the caller knows (a TCP
 * hook, or a record that loads sk_protocol anyway): nettrace's own traffic
 * is UDP, so without a --filter a socket of any other protocol matches at
 * once, without the port check sk_flow_surely_matches makes only to spare
 * that load (7 % of skb_copy_datagram_iovec's run time in a profile of the
 * rx probe). */
static __always_inline bool sk_flow_matches_proto(const struct sock *sk,
						  bool local_is_src, __u8 proto)
{
	if (!filter_on() && (!self_on() || proto != IPPROTO_UDP))
		return true;
	return sk_flow_matches(sk, local_is_src);
}
#endif /* __bpf__ */

/* A flow parsed from packet headers (skb_flow.h). `reverse`: the packet's
 * destination is the event's source (a reset sent in answer to it). False
 * for nettrace's own traffic (self_traffic.h). */
static __always_inline bool skb_flow_parsed_matches(const struct skb_flow *p, bool reverse)
{
	struct filter_flow f;
	__u32 *s = reverse ? f.daddr : f.saddr;
	__u32 *d = reverse ? f.saddr : f.daddr;

	/* Without a filter, a UDP flow is decided by its ports alone unless
	 * one of them is an endpoint's: the 16-byte addresses are built only
	 * then (a dropped UDP flood reaches kfree_skb here every packet). */
	if (!filter_on() &&
	    (!self_on() || p->l4proto != IPPROTO_UDP ||
	     !self_port_either(p->sport, p->dport)))
		return true;
	if (p->family == 4) {
		filter_map4(s, 0);
		filter_map4(d, 0);
		/* Byte copies: the header's addresses are not 4-aligned. */
		__builtin_memcpy(&s[3], p->saddr, 4);
		__builtin_memcpy(&d[3], p->daddr, 4);
	} else if (p->family == 6) {
		__builtin_memcpy(s, p->saddr, 16);
		__builtin_memcpy(d, p->daddr, 16);
	} else {
		return !filter_on();
	}
	f.sport = reverse ? p->dport : p->sport;
	f.dport = reverse ? p->sport : p->dport;
	f.proto = p->l4proto;
	return !self_flow(f.saddr, f.sport, f.daddr, f.dport, f.proto) &&
	       flow_matches(&f);
}

#endif /* TRACER_FILTER_H */
