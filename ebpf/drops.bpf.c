// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Drops probe: one record per skb the kernel frees as a drop
 * (skb:kfree_skb with a reason other than SKB_CONSUMED), in the traced
 * network namespace: the reason number, the freeing location, the skb's
 * flow parsed from its IP and TCP/UDP headers, length, netns, ifindex, cpu.
 *
 * tp_btf, not a classic tracepoint: the arguments arrive as typed kernel
 * pointers, so the netns filter is direct BTF loads, and the flow is
 * parsed from the headers with loads through bpf_core_cast (skb_flow.h),
 * not bpf_probe_read_kernel calls: a record makes one helper call, the
 * clock, and a free of another namespace none.
 *
 * The frames of a nettrace live interface (EtherType 0x88B5, tracer.h)
 * are ignored first: the stack drops each of them, and recording those
 * drops would feed the live view its own frames.
 *
 * Which namespace a drop belongs to: the skb's device's (a received or
 * sent packet), else its socket's (skb->sk), else the tracepoint's rx_sk.
 * An skb with none of the three cannot be attributed: it is recorded only
 * when every namespace is traced (netns 0 in the record), and counted.
 *
 * Records go to the same kind of per-CPU slot ring as the TX probe's
 * (see tx.bpf.c and tracer-agent/src/probes/slots.rs).
 */
#include "kernel.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>
#include "tracer.h"
#include "skb_flow.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Configuration, set by the agent between open and load. */
const volatile __u32 target_netns = 0;	/* netns inode to trace; 0 = all */

#define SLOT_RECORD struct drop_record
#define SLOT_COUNTERS DROP_CTR_MAX
#include "slot_ring.h"
/* Last: see rx.bpf.c (its small constants and flow_filter.n_clauses in
 * one cache line of .rodata). */
#include "filter.h"

static __always_inline __u32 sk_netns(struct sock *sk)
{
	if (!sk)
		return 0;
	return sk->__sk_common.skc_net.net->ns.inum;
}

SEC("tp_btf/kfree_skb")
int BPF_PROG(drop_kfree_skb, struct sk_buff *skb, void *location,
	     enum skb_drop_reason reason, struct sock *rx_sk)
{
	struct net_device *dev;
	struct drop_record *r;
	struct skb_flow flow;
	__u32 cpu, netns = 0, ifindex = 0;
	__u64 seq;

	/* Normal frees are not drops; the kernel routes SKB_CONSUMED to
	 * consume_skb, but a caller passing it here is still not a drop. */
	if (reason == SKB_CONSUMED || reason == SKB_NOT_DROPPED_YET || !skb)
		return 0;
	/* A frame of a nettrace live interface (tracer.h): never an event,
	 * not even counted as seen. One load and one compare, before any
	 * other work. */
	if (skb->protocol == bpf_htons(NT_LIVE_ETHERTYPE))
		return 0;
	count(DROP_CTR_SEEN);
	dev = skb->dev;
	if (dev) {
		netns = dev->nd_net.net->ns.inum;
		ifindex = dev->ifindex;
	}
	if (!netns)
		netns = sk_netns(skb->sk);
	if (!netns)
		netns = sk_netns(rx_sk);
	if (!netns) {
		count(DROP_CTR_NO_NETNS);
		if (target_netns)
			return 0;
	} else if (target_netns && netns != target_netns) {
		return 0;
	}
	/* The flow before the slot: the --filter runs before any output. */
	skb_flow_parse(skb, bpf_ntohs(skb->protocol), &flow);
	if (!skb_flow_parsed_matches(&flow, false))
		return 0;

	r = slot_take(DROP_CTR_LOST, &seq, &cpu);
	if (!r)
		return 0;
	r->hdr.kind = RECORD_DROP;
	r->hdr.len = sizeof(*r);
	r->mono_ns = bpf_ktime_get_ns();
	r->location = (__u64)location;
	r->reason = reason;
	r->netns = netns;
	r->ifindex = ifindex;
	r->cpu = cpu;
	r->len = skb->len;
	r->protocol = bpf_ntohs(skb->protocol);
	r->_pad = 0;
	r->family = flow.family;
	r->l4proto = flow.l4proto;
	r->sport = flow.sport;
	r->dport = flow.dport;
	__builtin_memcpy(r->saddr, flow.saddr, sizeof(r->saddr));
	__builtin_memcpy(r->daddr, flow.daddr, sizeof(r->daddr));

	slot_commit(&r->hdr, seq);
	return 0;
}

/* Never written: exported so the skeleton generates the Rust mirrors of
 * struct drop_record and of the enums the agent reads (see tx.bpf.c). */
struct drop_record drop_record_layout SEC(".bss") __attribute__((used));
enum record_kind drop_record_kind_values SEC(".bss") __attribute__((used));
enum drop_counter drop_counter_values SEC(".bss") __attribute__((used));
enum live_ethertype live_ethertype_values SEC(".bss") __attribute__((used));
