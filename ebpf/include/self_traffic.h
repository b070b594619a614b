/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * nettrace's own traffic, kept out of every trace unless the agent runs
 * with --trace-self: the agents' datagrams to the sink and its acks, and
 * the clock exchange with the sink's responder. All of it is UDP between
 * an ephemeral port and one of a few "self endpoints" the agent knows
 * (the sink's address, the responder's), written here between open and
 * load (tracer-agent/src/self_traffic.rs).
 *
 * An end of a flow is ours when its port is an endpoint's and either its
 * address is the endpoint's, or unspecified (a socket bound to the
 * wildcard address, such as a sink started with --listen 0.0.0.0:7420,
 * receives for every address), or the endpoint is `any_addr`: an address
 * of the traced host, where a sink receives agents' datagrams on whatever
 * address they were sent to (loopback included). A flow with either end
 * ours is excluded, so the reads on the sink's side and the acks and
 * answers on the agent's side go alike.
 *
 * Why endpoints and not sockets or processes: the stack's entry
 * (netif_receive_skb) and drops see a packet before any socket owns it,
 * and the sink and responder are other processes than the agent; every
 * hook has the flow, from the socket or from the headers (skb_flow.h).
 *
 * Called from filter.h's sk_flow_matches and skb_flow_parsed_matches, so
 * every probe that has a flow excludes it before any slot is taken.
 * Cost: with no endpoint (--trace-self) the verifier prunes every call,
 * as filter.h does with no filter; with some, a flow that is not UDP
 * costs one comparison, a UDP flow two port comparisons per endpoint.
 *
 * filter.h includes it (FILTER_CONFIG_QUAL defined) and defines the
 * endpoint table after flow_filter: the count, which every event reads,
 * stays in the cache line of the small .rodata constants; the table is
 * read for UDP flows only. Plain C: it also compiles on the host, where
 * tracer-agent/src/self_traffic.rs tests it.
 */
#ifndef TRACER_SELF_TRAFFIC_H
#define TRACER_SELF_TRAFFIC_H

#define SELF_MAX_ENDPOINTS 4

struct self_endpoint {
	__u32 addr[4];	/* IPv4-mapped IPv6, memory order; unused with any_addr */
	__u16 port;	/* host order; never 0 */
	__u8 any_addr;	/* an address of the traced host: the port at any address */
	__u8 _pad;
};

/* Endpoints in use; 0: nettrace's own traffic is traced (--trace-self). */
FILTER_CONFIG_QUAL __u32 self_n_endpoints = 0;
/* Their ports (self_endpoints[i].port), beside the count in the first
 * cache line of .rodata, so that a socket's ports are checked with no
 * other line read (self_port_either). */
FILTER_CONFIG_QUAL __u16 self_ports[SELF_MAX_ENDPOINTS] = {};
/* Defined by filter.h after flow_filter. */
extern FILTER_CONFIG_QUAL struct self_endpoint self_endpoints[SELF_MAX_ENDPOINTS];

static __always_inline bool self_on(void)
{
	return self_n_endpoints != 0;
}

/* 16 bytes of zeros, or ::ffff:0.0.0.0 (an IPv4 socket's unset address
 * as filter.h maps it). */
static __always_inline bool self_addr_unspecified(const __u32 *a)
{
	return a[0] == 0 && a[1] == 0 && a[3] == 0 &&
	       (a[2] == 0 || a[2] == bpf_htonl(0xffff));
}

static __always_inline bool self_end_matches(const volatile struct self_endpoint *e,
					     const __u32 *a, __u16 port)
{
	if (port != e->port)
		return false;
	if (e->any_addr)
		return true;
	return (a[0] == e->addr[0] && a[1] == e->addr[1] &&
		a[2] == e->addr[2] && a[3] == e->addr[3]) ||
	       self_addr_unspecified(a);
}

/* Could a flow with these two ports be nettrace's own? False is certain:
 * no end of it is at an endpoint's port. A socket of ours always has one
 * (the sink and the responder are bound to theirs, the agent's sockets
 * connected to them), so a socket's two ports decide most flows before
 * its protocol or addresses, on other cache lines, are read. */
static __always_inline bool self_port_either(__u16 a, __u16 b)
{
	__u32 i;

	for (i = 0; i < SELF_MAX_ENDPOINTS; i++) {
		if (i >= self_n_endpoints)
			break;
		if (self_ports[i] == a || self_ports[i] == b)
			return true;
	}
	return false;
}

/* Is this flow nettrace's own? Addresses as filter.h compares them
 * (16 bytes, IPv4-mapped), ports in host order, `proto` the IP protocol. */
static __always_inline bool self_flow(const __u32 *saddr, __u16 sport,
				      const __u32 *daddr, __u16 dport, __u8 proto)
{
	__u32 i;

	if (!self_on() || proto != IPPROTO_UDP)
		return false;
	for (i = 0; i < SELF_MAX_ENDPOINTS; i++) {
		const volatile struct self_endpoint *e = &self_endpoints[i];

		if (i >= self_n_endpoints)
			break;
		if (self_end_matches(e, saddr, sport) ||
		    self_end_matches(e, daddr, dport))
			return true;
	}
	return false;
}

#endif /* TRACER_SELF_TRAFFIC_H */
