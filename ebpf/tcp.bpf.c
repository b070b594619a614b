// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * TCP anomalies probe: one record per retransmitted skb
 * (tcp:tcp_retransmit_skb, with its sequence range), reset sent
 * (tcp:tcp_send_reset) and received (tcp:tcp_receive_reset), and socket
 * receive-queue / memory-limit event (sock:sock_rcvqueue_full,
 * sock:sock_exceed_buf_limit) in the traced network namespace.
 *
 * tp_btf programs: typed arguments, direct BTF loads. The flow is the
 * socket's (local, remote). A reset sent without a socket (the answer to a
 * segment for a closed port) takes its namespace from the offending skb's
 * device and its flow from that skb's headers, turned around (the skb's
 * destination is our local end).
 *
 * These are rare events (a retransmission is already a loss), so the cost
 * that matters is the early return for other namespaces.
 */
#include "kernel.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>
#include "tracer.h"
#include "skb_flow.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

const volatile __u32 target_netns = 0;	/* netns inode to trace; 0 = all */

#define SLOT_RECORD struct tcp_record
#define SLOT_COUNTERS TCP_CTR_MAX
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

static __always_inline bool other_netns(__u32 netns)
{
	return target_netns && netns != target_netns;
}

/* A slot to fill, or NULL (counted). `*seq` is what to publish. */
static __always_inline struct tcp_record *take_slot(__u64 *seq)
{
	struct tcp_record *r;
	__u32 cpu;

	r = slot_take(TCP_CTR_LOST, seq, &cpu);
	if (!r)
		return NULL;
	r->hdr.kind = RECORD_TCP;
	r->hdr.len = sizeof(*r);
	r->mono_ns = bpf_ktime_get_ns();
	r->cpu = cpu;
	r->cookie = 0;
	r->seq = 0;
	r->end_seq = 0;
	r->detail = 0;
	r->state = 0;
	r->_pad = 0;
	r->_pad2 = 0;
	return r;
}

static __always_inline void publish(struct tcp_record *r, __u64 seq)
{
	slot_commit(&r->hdr, seq);
}

/* The socket's flow, cookie and state into `r`: direct loads; the cookie
 * helper runs only for a socket that has none yet. */
static __always_inline void sock_flow(struct sock *sk, struct tcp_record *r)
{
	struct sock_common *c = &sk->__sk_common;
	unsigned short family = c->skc_family;
	__u64 cookie = c->skc_cookie.counter;

	r->cookie = cookie ? cookie : bpf_get_socket_cookie(sk);
	r->state = c->skc_state;
	r->sport = c->skc_num;
	r->dport = bpf_ntohs(c->skc_dport);
	if (family == AF_INET6) {
		r->family = 6;
		__builtin_memcpy(r->saddr, c->skc_v6_rcv_saddr.in6_u.u6_addr8, 16);
		__builtin_memcpy(r->daddr, c->skc_v6_daddr.in6_u.u6_addr8, 16);
		return;
	}
	__builtin_memset(r->saddr, 0, sizeof(r->saddr));
	__builtin_memset(r->daddr, 0, sizeof(r->daddr));
	if (family == AF_INET) {
		r->family = 4;
		*(__u32 *)r->saddr = c->skc_rcv_saddr;
		*(__u32 *)r->daddr = c->skc_daddr;
	} else {
		r->family = 0;
	}
}

/* An anomaly of socket `sk` (not NULL); the netns filter runs first. */
static __always_inline struct tcp_record *sock_event(struct sock *sk, __u8 anomaly,
						     __u64 *seq)
{
	struct tcp_record *r;
	__u32 netns;

	if (!sk)
		return NULL;
	netns = sk_netns(sk);
	if (other_netns(netns))
		return NULL;
	if (!sk_flow_matches(sk, true))
		return NULL;
	r = take_slot(seq);
	if (!r)
		return NULL;
	r->anomaly = anomaly;
	r->netns = netns;
	sock_flow(sk, r);
	return r;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(tcp_retransmit, struct sock *sk, struct sk_buff *skb, int err)
{
	struct tcp_record *r;
	__u64 seq;

	r = sock_event(sk, TCP_RETRANSMIT, &seq);
	if (!r)
		return 0;
	/* The control block holds tcp_skb_cb (seq, end_seq first) while TCP
	 * owns the skb, as it does in its retransmit queue. */
	if (skb) {
		r->seq = *(__u32 *)skb->cb;
		r->end_seq = *(__u32 *)(skb->cb + 4);
	}
	r->detail = (__u32)err;
	publish(r, seq);
	return 0;
}

SEC("tp_btf/tcp_send_reset")
int BPF_PROG(tcp_send_reset, struct sock *sk, struct sk_buff *skb,
	     enum sk_rst_reason reason)
{
	struct tcp_record *r;
	struct skb_flow f;
	__u32 netns = 0;
	__u64 seq;

	if (sk) {
		r = sock_event(sk, TCP_RESET_SENT, &seq);
		if (!r)
			return 0;
		r->detail = reason;
		publish(r, seq);
		return 0;
	}
	/* No socket: the reset answers `skb`, received on its device. */
	if (!skb)
		return 0;
	if (skb->dev)
		netns = skb->dev->nd_net.net->ns.inum;
	if (!netns || other_netns(netns))
		return 0;
	skb_flow_parse(skb, bpf_ntohs(skb->protocol), &f);
	/* Turned around: the offending packet's destination is our end. */
	if (!skb_flow_parsed_matches(&f, true))
		return 0;
	r = take_slot(&seq);
	if (!r)
		return 0;
	r->anomaly = TCP_RESET_SENT;
	r->netns = netns;
	r->detail = reason;
	r->family = f.family;
	r->sport = f.dport;
	r->dport = f.sport;
	__builtin_memcpy(r->saddr, f.daddr, sizeof(r->saddr));
	__builtin_memcpy(r->daddr, f.saddr, sizeof(r->daddr));
	publish(r, seq);
	return 0;
}

SEC("tp_btf/tcp_receive_reset")
int BPF_PROG(tcp_receive_reset, struct sock *sk)
{
	struct tcp_record *r;
	__u64 seq;

	r = sock_event(sk, TCP_RESET_RECEIVED, &seq);
	if (r)
		publish(r, seq);
	return 0;
}

SEC("tp_btf/sock_rcvqueue_full")
int BPF_PROG(sock_rcvqueue_full, struct sock *sk, struct sk_buff *skb)
{
	struct tcp_record *r;
	__u64 seq;

	r = sock_event(sk, TCP_RCVQUEUE_FULL, &seq);
	if (!r)
		return 0;
	r->detail = skb ? skb->len : 0;
	publish(r, seq);
	return 0;
}

SEC("tp_btf/sock_exceed_buf_limit")
int BPF_PROG(sock_exceed_buf_limit, struct sock *sk, struct proto *prot,
	     long allocated, int kind)
{
	struct tcp_record *r;
	__u64 seq;

	r = sock_event(sk, TCP_EXCEED_BUF_LIMIT, &seq);
	if (!r)
		return 0;
	r->detail = (__u32)kind;
	publish(r, seq);
	return 0;
}

/* Never written: exported so the skeleton generates the Rust mirrors of
 * struct tcp_record and of the enums the agent reads (see tx.bpf.c). */
struct tcp_record tcp_record_layout SEC(".bss") __attribute__((used));
enum record_kind tcp_record_kind_values SEC(".bss") __attribute__((used));
enum tcp_anomaly tcp_anomaly_values SEC(".bss") __attribute__((used));
enum tcp_counter tcp_counter_values SEC(".bss") __attribute__((used));
