/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Packet headers as they are on the wire (IPv4, IPv6 and its extension
 * headers, TCP, UDP), for skb_flow.h. Fixed layouts, no kernel types and
 * no bitfields (the nibbles are masked by hand), so the same header
 * compiles for BPF and for the host's C compiler, where a unit test
 * (tracer-agent/src/probes/skb_flow.rs) runs the flow parser on packets it
 * built. The struct names are the kernel's: in BPF, skb_flow.h views packet
 * memory through bpf_core_cast() to these types, which the verifier checks
 * against the kernel's own definitions of the same names.
 *
 * Include after the definitions of __u8/__u16/__u32/__be16/__be32
 * (kernel.h in BPF, <linux/types.h> on the host).
 */
#ifndef TRACER_PACKET_H
#define TRACER_PACKET_H

struct iphdr {
	__u8 ihl_version;	/* ihl in the low nibble, version in the high */
	__u8 tos;
	__be16 tot_len;
	__be16 id;
	__be16 frag_off;	/* flags in the top 3 bits, offset below */
	__u8 ttl;
	__u8 protocol;
	__u16 check;
	__be32 saddr;
	__be32 daddr;
};

struct ipv6hdr {
	__u8 priority_version;	/* version in the high nibble */
	__u8 flow_lbl[3];
	__be16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	__be32 saddr[4];	/* words, so that they are read as words */
	__be32 daddr[4];
};

/* Hop-by-hop, routing and destination options: (hdrlen + 1) * 8 bytes.
 * AH has the same first two bytes, with a length of (hdrlen + 2) * 4. */
struct ipv6_opt_hdr {
	__u8 nexthdr;
	__u8 hdrlen;
};

struct frag_hdr {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off;	/* offset in the top 13 bits */
	__be32 identification;
};

struct tcphdr {
	__be16 source;
	__be16 dest;
	__be32 seq;
	__be32 ack_seq;
	__u8 res1_doff;		/* doff (header length in words) in the high nibble */
	__u8 flags;		/* FIN 0x01, SYN 0x02, ... */
	__be16 window;
	__u16 check;
	__u16 urg_ptr;
};

struct udphdr {
	__be16 source;
	__be16 dest;
	__be16 len;
	__u16 check;
};

/* Packet bytes as 64-bit words, for loads that read several fields at
 * once (skb_flow.h). The name is the kernel's (UAPI): of the types in its
 * BTF, this one is a bare flexible array of __u64 at offset 0, so the
 * verifier accepts a load of any word of it through bpf_core_cast(), where
 * a word load through struct iphdr or tcphdr is refused for spanning their
 * fields. */
struct bpf_raw_tracepoint_args {
	__u64 args[0];
};

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD

#define IPPROTO_HOPOPTS 0
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define IPPROTO_ROUTING 43
#define IPPROTO_FRAGMENT 44
#define IPPROTO_AH 51
#define IPPROTO_DSTOPTS 60

#endif /* TRACER_PACKET_H */
