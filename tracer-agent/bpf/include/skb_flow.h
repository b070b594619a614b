/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The flow of an skb read from its own IP and TCP/UDP headers (for probes
 * that see an skb without a socket: drops, resets sent to no socket).
 * Include after kernel.h and the libbpf headers.
 */
#ifndef TRACER_SKB_FLOW_H
#define TRACER_SKB_FLOW_H

/* The first bytes of an IPv4 and an IPv6 header, as far as we read them. */
struct flow_ip4_hdr {
	__u8 ver_ihl;
	__u8 tos;
	__be16 tot_len;
	__be16 id;
	__be16 frag_off;
	__u8 ttl;
	__u8 protocol;
	__u16 check;
	__u8 saddr[4];
	__u8 daddr[4];
};

struct flow_ip6_hdr {
	__u32 ver_tc_flow;
	__be16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	__u8 saddr[16];
	__u8 daddr[16];
};

/* A packet's flow as its headers say (source, destination). */
struct skb_flow {
	__u8 family;	/* 4, 6, or 0 when not IP */
	__u8 l4proto;
	__u16 sport;	/* host order, TCP/UDP only */
	__u16 dport;
	__u8 saddr[16];
	__u8 daddr[16];
};

/* Fill `f` from the skb's network header: zeros unless the skb holds an
 * IPv4 or IPv6 packet (`protocol`, host order) whose header reads back with
 * the right version. Ports only for TCP and UDP (first fragment; no IPv6
 * extension header walk: an extension header leaves the ports 0). */
static __always_inline void skb_flow_parse(struct sk_buff *skb, __u16 protocol,
					   struct skb_flow *f)
{
	unsigned char *head = skb->head;
	__u16 nh = skb->network_header, l4;
	__u16 ports[2];

	__builtin_memset(f, 0, sizeof(*f));
	if (!head || nh == (__u16)~0U)
		return;
	if (protocol == ETH_P_IP) {
		struct flow_ip4_hdr ip;

		if (bpf_probe_read_kernel(&ip, sizeof(ip), head + nh) ||
		    (ip.ver_ihl >> 4) != 4 || (ip.ver_ihl & 0xf) < 5)
			return;
		f->family = 4;
		f->l4proto = ip.protocol;
		__builtin_memcpy(f->saddr, ip.saddr, 4);
		__builtin_memcpy(f->daddr, ip.daddr, 4);
		if (bpf_ntohs(ip.frag_off) & 0x1fff)
			return;
		l4 = nh + (ip.ver_ihl & 0xf) * 4;
	} else if (protocol == ETH_P_IPV6) {
		struct flow_ip6_hdr ip;

		if (bpf_probe_read_kernel(&ip, sizeof(ip), head + nh) ||
		    (bpf_ntohl(ip.ver_tc_flow) >> 28) != 6)
			return;
		f->family = 6;
		f->l4proto = ip.nexthdr;
		__builtin_memcpy(f->saddr, ip.saddr, 16);
		__builtin_memcpy(f->daddr, ip.daddr, 16);
		l4 = nh + sizeof(ip);
	} else {
		return;
	}
	if (f->l4proto != IPPROTO_TCP && f->l4proto != IPPROTO_UDP)
		return;
	/* Both put the ports first. */
	if (bpf_probe_read_kernel(ports, sizeof(ports), head + l4))
		return;
	f->sport = bpf_ntohs(ports[0]);
	f->dport = bpf_ntohs(ports[1]);
}

#endif /* TRACER_SKB_FLOW_H */
