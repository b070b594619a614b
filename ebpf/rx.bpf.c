// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * RX probe: five tp_btf programs on the receive path's tracepoints, one
 * record per hit, so an skb can be followed from the stack's entry to the
 * application's read:
 *   STACK_ENTRY  net:netif_receive_skb(skb)            flow/seq from headers
 *   TCP_INPUT    tcp:tcp_probe(sk, skb)                seq from TCP_SKB_CB
 *   DATA_READY   sock:sk_data_ready(sk)                no skb: end_seq = rcv_nxt
 *   COPY         skb:skb_copy_datagram_iovec(skb, len) TCP: as TCP_INPUT; else
 *                                                      flow from headers; reader
 *   READ_DONE    sock:sock_recv_length(sk, ret, flags) no skb: end_seq = copied_seq
 * tp_btf (not raw_tp): arguments are typed BTF pointers, read with direct
 * loads instead of helper calls. Helper calls are what a hook pays for
 * here (20-170 ns each on the machines measured, see skb_flow.h), so a
 * record makes one, the clock, plus the socket cookie's the first time a
 * socket is seen.
 *
 * Every program filters by the traced netns first and returns before any
 * output; only IPv4/IPv6 traffic is recorded. Records go into the same kind
 * of per-CPU slot ring as the TX probe's (see tx.bpf.c).
 */
#include "kernel.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_tracing.h>
#include "tracer.h"
#include "skb_flow.h"
#include "sample.h"
#include "rx_fields.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Configuration, set by the agent between open and load. */
const volatile __u32 target_netns = 0;	/* netns inode to trace; 0 = all */
const volatile __u64 sample_threshold = NT_SAMPLE_ALL; /* sample.h; ALL: no sampling */

#define SLOT_RECORD struct rx_record
#define SLOT_COUNTERS RX_CTR_MAX
#include "slot_ring.h"
/* Last: its flow_filter (1.3 KB of .rodata) after the small constants
 * above, so that they and flow_filter.n_clauses, which every run loads,
 * share one cache line. */
#include "filter.h"

static __always_inline bool other_netns(__u32 netns)
{
	return target_netns && netns != target_netns;
}

static __always_inline __u32 sk_netns(const struct sock *sk)
{
	return sk->__sk_common.skc_net.net->ns.inum;
}

static __always_inline bool sk_is_inet(const struct sock *sk)
{
	unsigned short f = sk->__sk_common.skc_family;

	return f == AF_INET || f == AF_INET6;
}

/* Writers of the record's fields, in groups; every program calls one of
 * each group (or writes the group's fields itself), so every field of the
 * slot is written exactly once and none keeps a previous record's value.
 * Only loads and stores: the helper calls a record needs are the clock and,
 * for a socket seen for the first time, its cookie. */

/* Header, stage, netns, cpu and the stage's time. */
static __always_inline void fill_head(struct rx_record *r, __u8 stage,
				      __u32 netns, __u32 cpu)
{
	r->hdr.kind = RECORD_RX;
	r->hdr.len = sizeof(*r);
	r->mono_ns = bpf_ktime_get_ns();
	r->netns = netns;
	r->cpu = cpu;
	r->stage = stage;
}

/* Stages without an skb. */
static __always_inline void no_stamps(struct rx_record *r)
{
	r->rx_stamp_ns = 0;
	r->tstamp_type = 0;
	r->hw_ns = 0;
}

static __always_inline void no_task(struct rx_record *r)
{
	r->pid = 0;
	r->tid = 0;
	*(__u64 *)r->comm = 0;
	*(__u64 *)(r->comm + 8) = 0;
}

/* Flow from the socket, packet direction: remote -> local. */
static __always_inline void fill_sock_flow(struct rx_record *r,
					   const struct sock *sk)
{
	const struct sock_common *c = &sk->__sk_common;

	r->sport = bpf_ntohs(c->skc_dport);
	r->dport = c->skc_num;
	r->protocol = (__u8)sk->sk_protocol;
	if (c->skc_family == AF_INET6) {
		r->family = 6;
		__builtin_memcpy(r->saddr, c->skc_v6_daddr.in6_u.u6_addr8, 16);
		__builtin_memcpy(r->daddr, c->skc_v6_rcv_saddr.in6_u.u6_addr8, 16);
	} else {
		r->family = 4;
		__builtin_memset(r->saddr, 0, sizeof(r->saddr));
		__builtin_memset(r->daddr, 0, sizeof(r->daddr));
		((__u32 *)r->saddr)[0] = c->skc_daddr;
		((__u32 *)r->daddr)[0] = c->skc_rcv_saddr;
	}
}

/* Flow and TCP range parsed from the skb's headers (skb_flow.h). */
static __always_inline void fill_parsed_flow(struct rx_record *r,
					     const struct skb_flow *f)
{
	r->family = f->family;
	r->protocol = f->l4proto == IPPROTO_TCP || f->l4proto == IPPROTO_UDP ?
		      f->l4proto : 0;
	r->sport = f->sport;
	r->dport = f->dport;
	__builtin_memcpy(r->saddr, f->saddr, 16);
	__builtin_memcpy(r->daddr, f->daddr, 16);
	r->seq = f->seq;
	r->end_seq = f->end_seq;
}

/* The socket's cookie: the one it has, else the helper assigns one (once
 * per socket; the helper call is what costs). */
static __always_inline __u64 sk_cookie(struct sock *sk)
{
	__u64 c = sk->__sk_common.skc_cookie.counter;

	return c ? c : bpf_get_socket_cookie(sk);
}

/* TCP_SKB_CB(skb)'s range: seq at 0, end_seq at 4 of the control block,
 * which holds tcp_skb_cb while TCP owns the skb. */
static __always_inline void fill_cb_range(struct rx_record *r,
					  const struct sk_buff *skb)
{
	r->seq = *(__u32 *)skb->cb;
	r->end_seq = *(__u32 *)(skb->cb + 4);
}

/*
 * Sampling (--sample-every N; the rule and why in sample.h). TCP records
 * are kept iff their sequence range holds a byte of a sampled granule of
 * the flow (sender -> receiver, i.e. the packet's source -> destination,
 * the socket's remote -> local), the decision the sender's tx probe made
 * from the same numbers; stages without an skb decide by the last byte
 * they account for. Everything that is not TCP is kept: nothing on the
 * sender side is sampled to stay comparable with (BPF TX timestamping is
 * TCP-only), and a UDP datagram has no number that every stage sees.
 * One call per program, right after the netns filter.
 */

/* The socket's flow hash, data direction remote -> local. */
static __always_inline __u64 rx_sample_sk_flow(const struct sock *sk)
{
	const struct sock_common *c = &sk->__sk_common;
	__u32 s[4], d[4];

	if (c->skc_family != AF_INET6)
		return nt_sample_flow4(c->skc_daddr, c->skc_rcv_saddr,
				       bpf_ntohs(c->skc_dport), c->skc_num);
	__builtin_memcpy(s, c->skc_v6_daddr.in6_u.u6_addr8, 16);
	__builtin_memcpy(d, c->skc_v6_rcv_saddr.in6_u.u6_addr8, 16);
	return nt_sample_flow(s, d, bpf_ntohs(c->skc_dport), c->skc_num);
}

/* TCP_INPUT and COPY: the skb's TCP_SKB_CB range (TCP sockets only). */
static __always_inline bool rx_sampled_out_cb(const struct sock *sk,
					      const struct sk_buff *skb)
{
	if (sample_threshold >= NT_SAMPLE_ALL || sk->sk_protocol != IPPROTO_TCP)
		return false;
	return !nt_sample_range(rx_sample_sk_flow(sk), *(__u32 *)skb->cb,
				*(__u32 *)(skb->cb + 4), sample_threshold);
}

/* DATA_READY and READ_DONE: `after` is rcv_nxt or copied_seq, the
 * sequence number after the last byte the stage accounts for. */
static __always_inline bool rx_sampled_out_sk(const struct sock *sk,
					      bool read_done)
{
	const struct tcp_sock *tp;
	__u32 after;

	if (sample_threshold >= NT_SAMPLE_ALL || sk->sk_protocol != IPPROTO_TCP)
		return false;
	tp = bpf_core_cast(sk, struct tcp_sock);
	after = read_done ? tp->copied_seq : tp->rcv_nxt;
	return !nt_sample_byte(rx_sample_sk_flow(sk), after - 1,
			       sample_threshold);
}

/* STACK_ENTRY: no socket yet; the flow and range the headers gave.
 * Fragments (no TCP header) are kept. */
static __always_inline bool rx_sampled_out_parsed(const struct skb_flow *f)
{
	__u64 flow;

	if (sample_threshold >= NT_SAMPLE_ALL || !f->has_seq)
		return false;
	if (f->family == 4)
		flow = nt_sample_flow4(*(const __u32 *)f->saddr,
				       *(const __u32 *)f->daddr, f->sport, f->dport);
	else
		flow = nt_sample_flow((const __u32 *)f->saddr,
				      (const __u32 *)f->daddr, f->sport, f->dport);
	return !nt_sample_range(flow, f->seq, f->end_seq, sample_threshold);
}

/* Also what keeps a nettrace live interface's own frames (EtherType
 * NT_LIVE_ETHERTYPE, tracer.h) out of the skb hooks: checked before any
 * parsing, right after the netns. */
static __always_inline bool is_ip(__u16 proto)
{
	return proto == ETH_P_IP || proto == ETH_P_IPV6;
}

/* Stack entry: the skb as the driver and GRO hand it to the stack; no
 * socket yet, so the flow and TCP range come from the headers, parsed once
 * for sampling, the filter and the record. */
SEC("tp_btf/netif_receive_skb")
int BPF_PROG(rx_stack_entry, struct sk_buff *skb)
{
	struct net_device *dev = skb->dev;
	struct skb_flow f;
	struct rx_record *r;
	__u32 netns, cpu;
	__u16 proto;
	__u64 seq;

	if (!dev)
		return 0;
	netns = dev->nd_net.net->ns.inum;
	if (other_netns(netns))
		return 0;
	proto = bpf_ntohs(skb->protocol);
	if (!is_ip(proto))
		return 0;
	skb_flow_parse(skb, proto, &f);
	if (!f.family) {
		/* An IP ethertype whose header does not read back as IP. */
		count(RX_CTR_READ_ERR);
		return 0;
	}
	if (rx_sampled_out_parsed(&f) || !skb_flow_parsed_matches(&f, false))
		return 0;

	r = slot_take(RX_CTR_LOST, &seq, &cpu);
	if (!r)
		return 0;
	fill_head(r, RX_STACK_ENTRY, netns, cpu);
	fill_stamps(r, skb);
	fill_parsed_flow(r, &f);
	no_task(r);
	r->cookie = 0;
	r->ifindex = dev->ifindex;
	r->len = skb->len;
	slot_commit(&r->hdr, seq);
	return 0;
}

/* TCP input on the established path (tcp_rcv_established), segments of
 * every size, pure ACKs included (seq == end_seq). */
SEC("tp_btf/tcp_probe")
int BPF_PROG(rx_tcp_input, struct sock *sk, struct sk_buff *skb)
{
	struct rx_record *r;
	__u32 netns, cpu;
	__u64 seq;

	netns = sk_netns(sk);
	if (other_netns(netns) || rx_sampled_out_cb(sk, skb) ||
	    !sk_flow_matches_proto(sk, false, IPPROTO_TCP))
		return 0;
	r = slot_take(RX_CTR_LOST, &seq, &cpu);
	if (!r)
		return 0;
	fill_head(r, RX_TCP_INPUT, netns, cpu);
	fill_stamps(r, skb);
	fill_sock_flow(r, sk);
	fill_cb_range(r, skb);
	no_task(r);
	r->cookie = sk_cookie(sk);
	r->ifindex = skb->skb_iif;
	r->len = skb->len;
	slot_commit(&r->hdr, seq);
	return 0;
}

/* The reader is woken: no skb here. For TCP, end_seq is rcv_nxt, the
 * sequence number after the last byte now queued for the reader. */
SEC("tp_btf/sk_data_ready")
int BPF_PROG(rx_data_ready, struct sock *sk)
{
	struct rx_record *r;
	__u32 netns, cpu;
	__u64 seq;

	netns = sk_netns(sk);
	if (other_netns(netns) || !sk_is_inet(sk) ||
	    rx_sampled_out_sk(sk, false) ||
	    !sk_flow_matches_proto(sk, false, sk->sk_protocol))
		return 0;
	r = slot_take(RX_CTR_LOST, &seq, &cpu);
	if (!r)
		return 0;
	fill_head(r, RX_DATA_READY, netns, cpu);
	no_stamps(r);
	fill_sock_flow(r, sk);
	no_task(r);
	r->seq = 0;
	r->end_seq = sk->sk_protocol == IPPROTO_TCP ?
		     bpf_core_cast(sk, struct tcp_sock)->rcv_nxt : 0;
	r->cookie = sk_cookie(sk);
	r->ifindex = 0;
	r->len = 0;
	slot_commit(&r->hdr, seq);
	return 0;
}

/* The application copies `len` bytes of this skb (the reader's task is
 * current). A TCP skb's flow and range come from its socket and control
 * block; any other skb's from its headers (a UDP socket may be
 * unconnected, and UDP queues skbs without skb->sk or skb->dev). The
 * netns is the owning socket's, else the reading task's (a UDP skb has no
 * other trace of it here); skbs that are not IP (netlink, unix) are
 * skipped. */
SEC("tp_btf/skb_copy_datagram_iovec")
int BPF_PROG(rx_copy, struct sk_buff *skb, int len)
{
	struct sock *sk = skb->sk;
	struct task_struct *task = NULL;
	struct skb_flow f = {};	/* not undef: clang spills undef registers */
	struct rx_record *r;
	__u32 netns, cpu;
	bool tcp = false;
	__u16 proto;
	__u64 seq;

	if (sk) {
		if (!sk_is_inet(sk))
			return 0;
		netns = sk_netns(sk);
		tcp = sk->sk_protocol == IPPROTO_TCP;
	} else {
		struct nsproxy *ns;

		/* The reader, once: a helper call costs more than the loads. */
		task = bpf_get_current_task_btf();
		ns = task->nsproxy;

		/* NULL while the task exits. */
		if (!ns)
			return 0;
		netns = ns->net_ns->ns.inum;
	}
	if (other_netns(netns))
		return 0;
	proto = bpf_ntohs(skb->protocol);
	if (!is_ip(proto))
		return 0;
	if (tcp) {
		if (rx_sampled_out_cb(sk, skb) ||
		    !sk_flow_matches_proto(sk, false, IPPROTO_TCP))
			return 0;
	} else {
		skb_flow_parse(skb, proto, &f);
		if (!f.family) {
			count(RX_CTR_READ_ERR);
			return 0;
		}
		if (!skb_flow_parsed_matches(&f, false))
			return 0;
	}
	r = slot_take(RX_CTR_LOST, &seq, &cpu);
	if (!r)
		return 0;
	fill_head(r, RX_COPY, netns, cpu);
	fill_stamps(r, skb);
	fill_task(r, task ? task : bpf_get_current_task_btf());
	if (tcp) {
		fill_sock_flow(r, sk);
		fill_cb_range(r, skb);
	} else {
		fill_parsed_flow(r, &f);
		/* A UDP datagram has no range. */
		r->seq = 0;
		r->end_seq = 0;
	}
	/* skb->sk is an RCU pointer the cookie helper refuses: read the
	 * cookie the socket already has (TCP_INPUT or DATA_READY assigned it;
	 * 0 if no earlier stage ran). */
	r->cookie = sk ? sk->__sk_common.skc_cookie.counter : 0;
	r->ifindex = skb->skb_iif;
	r->len = len > 0 ? len : 0;
	slot_commit(&r->hdr, seq);
	return 0;
}

/* recvmsg returns `ret` bytes (or an error): no skb. For TCP, end_seq is
 * copied_seq, the sequence number after the last byte the reader has. */
SEC("tp_btf/sock_recv_length")
int BPF_PROG(rx_read_done, struct sock *sk, int ret, int flags)
{
	struct rx_record *r;
	__u32 netns, cpu;
	__u64 seq;

	netns = sk_netns(sk);
	if (other_netns(netns) || !sk_is_inet(sk) || ret <= 0 ||
	    rx_sampled_out_sk(sk, true) ||
	    !sk_flow_matches_proto(sk, false, sk->sk_protocol))
		return 0;
	r = slot_take(RX_CTR_LOST, &seq, &cpu);
	if (!r)
		return 0;
	fill_head(r, RX_READ_DONE, netns, cpu);
	no_stamps(r);
	fill_sock_flow(r, sk);
	fill_task(r, bpf_get_current_task_btf());
	r->seq = 0;
	r->end_seq = sk->sk_protocol == IPPROTO_TCP ?
		     bpf_core_cast(sk, struct tcp_sock)->copied_seq : 0;
	r->cookie = sk_cookie(sk);
	r->ifindex = 0;
	r->len = ret;
	slot_commit(&r->hdr, seq);
	return 0;
}

/* Never written: exported so the skeleton generates the Rust mirrors of
 * struct rx_record and the enums of tracer.h the agent uses. */
struct rx_record rx_record_layout SEC(".bss") __attribute__((used));
enum record_kind rx_record_kind_values SEC(".bss") __attribute__((used));
enum rx_stage rx_stage_values SEC(".bss") __attribute__((used));
enum rx_counter rx_counter_values SEC(".bss") __attribute__((used));
