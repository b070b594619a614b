// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * TX timestamping probe: a sockops program that turns on BPF TX
 * timestamping (Linux >= 6.15) for established TCP sockets of the traced
 * network namespace, tags sent skbs at sendmsg, and writes one ring
 * record per timestamping callback (SENDMSG, SCHED, SND_SW, SND_HW, ACK).
 *
 * Cost matters: every callback runs in the sender's TX path. Filters run
 * before any output. Records go to a per-CPU ring of slots in an mmapable
 * array: taking a slot is one atomic add on a per-CPU counter, with no lock
 * and no wakeup (the BPF ring buffer's locked reserve/commit cost about
 * 150 ns more per record here). The agent reads the slots through mmap on a
 * timer and detects overruns from the counters.
 */
#include "kernel.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "tracer.h"
#include "filter.h"
#include "sample.h"
#include "skb_flow.h"
#include "tx_sample.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Configuration, set by the agent between open and load. */
const volatile __u32 target_netns = 0;	/* netns inode to trace; 0 = all */
const volatile __u64 sample_threshold = NT_SAMPLE_ALL; /* sample.h; ALL: no sampling */

#define SLOT_RECORD struct tx_record
#define SLOT_COUNTERS CTR_MAX
#include "slot_ring.h"

extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;
extern int bpf_sock_ops_enable_tx_tstamp(struct bpf_sock_ops_kern *skops,
					 u64 flags) __ksym;

static __always_inline __u32 sock_netns(struct bpf_sock_ops_kern *k)
{
	struct sock *sk = k->sk;

	/* Direct loads through BTF pointers: fault-safe, no helper call. */
	if (!sk)
		return 0;
	return sk->__sk_common.skc_net.net->ns.inum;
}

/* Filter every callback, not only ESTABLISHED: TX timestamping is a flag of
 * the socket, so once any program (another agent tracing another namespace)
 * has enabled it, every attached program gets the socket's callbacks. */
static __always_inline bool other_netns(__u32 netns)
{
	return target_netns && netns != target_netns;
}

/* Established socket: enable TX timestamping callbacks if it is ours. */
static __always_inline int on_established(struct bpf_sock_ops *skops)
{
	struct bpf_sock_ops_kern *k = bpf_cast_to_kern_ctx(skops);
	int flags = SK_BPF_CB_TX_TIMESTAMPING;

	if (other_netns(sock_netns(k)))
		return 1;
	if (!sk_flow_matches_proto(k->sk, true, IPPROTO_TCP))
		return 1;
	if (bpf_setsockopt(skops, SOL_SOCKET, SK_BPF_CB_FLAGS, &flags,
			   sizeof(flags))) {
		count(CTR_SETSOCKOPT_ERR);
		return 1;
	}
	count(CTR_SOCKETS);
	return 1;
}

/* The bytes the skb holds at this callback, so that a reader pairs each
 * transmission with its reception by bytes rather than by the tag: TCP
 * moves bytes between skbs after sendmsg tagged one (growing an unsent skb
 * from the next, splitting for cwnd, MSS or TSO, collapsing during
 * recovery), so tskey alone does not say what went out. While TCP owns
 * the skb (SENDMSG, ACK) its control block has the range; once
 * tcp_transmit_skb handed a clone to IP (SCHED, SND_SW, SND_HW) the
 * control block is IP's, and the range comes from the TCP header, sized by
 * the IP length exactly as the receiver's rx probe sizes it (skb_flow.h):
 * both ends count the same bytes. Only the range: the socket gives the
 * addresses and ports, and TCP set the transport header, so three loads
 * (skb_flow_tcp_range) instead of the whole parse. Returns TX_F_RANGE,
 * or 0 when unknown. */
static __always_inline __u8 skb_range(struct sk_buff *skb, __u8 stage,
				      __u32 *seq, __u32 *end_seq)
{
	unsigned char *head;
	__u16 nh, th;

	if (stage == TX_SENDMSG || stage == TX_ACK) {
		*seq = ((__u32 *)skb->cb)[0];	/* TCP_SKB_CB(skb)->seq */
		*end_seq = ((__u32 *)skb->cb)[1];	/* ->end_seq */
		return TX_F_RANGE;
	}
	head = skb->head;
	nh = skb->network_header;
	th = skb->transport_header;
	if (!head || nh == (__u16)~0U || th == (__u16)~0U || th <= nh)
		return 0;
	return skb_flow_tcp_range(head + nh, head + th, seq, end_seq) ?
	       TX_F_RANGE : 0;
}

/* `netns` is the socket's, already read by the caller's filter. */
static __always_inline void emit(struct bpf_sock_ops *skops,
				 struct bpf_sock_ops_kern *k, __u32 netns,
				 __u8 stage)
{
	struct skb_shared_info *shinfo;
	struct sk_buff *skb = k->skb;
	struct tx_record *r;
	__u32 cpu;
	__u64 seq;

	r = slot_take(CTR_RB_LOST, &seq, &cpu);
	if (!r)
		return;
	r->hdr.kind = RECORD_TX;
	r->hdr.len = sizeof(*r);
	r->mono_ns = bpf_ktime_get_ns();
	r->hw_ns = stage == TX_SND_HW ? skops->skb_hwtstamp : 0;
	/* The cookie the socket has (a direct load); the helper, which
	 * assigns one, only for a socket that has none yet. */
	r->cookie = k->sk ? k->sk->__sk_common.skc_cookie.counter : 0;
	if (!r->cookie)
		r->cookie = bpf_get_socket_cookie(skops);
	r->tskey = 0;
	r->seq = 0;
	r->end_seq = 0;
	r->flags = 0;
	if (skb) {
		/* Direct loads through BTF pointers (rdonly_cast) instead of
		 * bpf_probe_read_kernel calls: same fault safety, no helper call. */
		shinfo = bpf_core_cast(skb->head + skb->end, struct skb_shared_info);
		r->tskey = shinfo->tskey;
		r->flags = skb_range(skb, stage, &r->seq, &r->end_seq);
		/* tcp_tx_timestamp() tags the write queue's tail, or, when this
		 * sendmsg pushed everything out already, the retransmit queue's
		 * tail: an skb whose first transmission nobody stamped. An skb
		 * starting before snd_nxt has been sent (write queue skbs start
		 * at or after it). Read from the tcp_sock: the context's snd_nxt
		 * reads 0 in the timestamping callbacks (not a full-sock ctx). */
		if (stage == TX_SENDMSG && r->flags && k->sk &&
		    (__s32)(r->seq - bpf_core_cast(k->sk, struct tcp_sock)->snd_nxt) < 0)
			r->flags |= TX_F_SENT;
	}
	r->netns = netns;
	r->cpu = cpu;
	r->stage = stage;
	r->sport = skops->local_port;
	r->dport = bpf_ntohl(skops->remote_port);
	r->_pad = 0;
	r->_pad2 = 0;
	if (skops->family == AF_INET6) {
		r->family = 6;
		((__u32 *)r->saddr)[0] = skops->local_ip6[0];
		((__u32 *)r->saddr)[1] = skops->local_ip6[1];
		((__u32 *)r->saddr)[2] = skops->local_ip6[2];
		((__u32 *)r->saddr)[3] = skops->local_ip6[3];
		((__u32 *)r->daddr)[0] = skops->remote_ip6[0];
		((__u32 *)r->daddr)[1] = skops->remote_ip6[1];
		((__u32 *)r->daddr)[2] = skops->remote_ip6[2];
		((__u32 *)r->daddr)[3] = skops->remote_ip6[3];
	} else {
		r->family = 4;
		__builtin_memset(r->saddr, 0, sizeof(r->saddr));
		__builtin_memset(r->daddr, 0, sizeof(r->daddr));
		((__u32 *)r->saddr)[0] = skops->local_ip4;
		((__u32 *)r->daddr)[0] = skops->remote_ip4;
	}
	if (stage == TX_SENDMSG) {
		/* The sender: direct loads from the task, as the rx probe does
		 * (bpf_get_current_comm alone cost about 170 ns here); a rename
		 * racing with the copy may tear the name, as with the helper. */
		const struct task_struct *task = bpf_get_current_task_btf();

		r->pid = task->tgid;
		r->tid = task->pid;
		*(__u64 *)r->comm = *(const __u64 *)task->comm;
		*(__u64 *)(r->comm + 8) = *(const __u64 *)(task->comm + 8);
	} else {
		r->pid = 0;
		r->tid = 0;
		__builtin_memset(r->comm, 0, sizeof(r->comm));
	}

	slot_commit(&r->hdr, seq);
}

SEC("sockops")
int tx_tstamp(struct bpf_sock_ops *skops)
{
	struct bpf_sock_ops_kern *k;
	__u32 op = skops->op, netns;
	__u8 stage;

	switch (op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		return on_established(skops);
	case BPF_SOCK_OPS_TSTAMP_SENDMSG_CB:
		k = bpf_cast_to_kern_ctx(skops);
		netns = sock_netns(k);
		if (other_netns(netns) ||
		    !sk_flow_matches_proto(k->sk, true, IPPROTO_TCP))
			return 1;
		if (sample_threshold < NT_SAMPLE_ALL)
			count(CTR_SENDMSG_SEEN);
		if (tx_sampled_out(skops, k, sample_threshold))
			return 1;
		if (bpf_sock_ops_enable_tx_tstamp(k, 0)) {
			count(CTR_TAG_ERR);
			return 1;
		}
		emit(skops, k, netns, TX_SENDMSG);
		return 1;
	case BPF_SOCK_OPS_TSTAMP_SCHED_CB:
		stage = TX_SCHED;
		break;
	case BPF_SOCK_OPS_TSTAMP_SND_SW_CB:
		stage = TX_SND_SW;
		break;
	case BPF_SOCK_OPS_TSTAMP_SND_HW_CB:
		stage = TX_SND_HW;
		break;
	case BPF_SOCK_OPS_TSTAMP_ACK_CB:
		stage = TX_ACK;
		break;
	default:
		return 1;
	}
	k = bpf_cast_to_kern_ctx(skops);
	netns = sock_netns(k);
	if (!sk_flow_matches_proto(k->sk, true, IPPROTO_TCP))
		return 1;
	if (!other_netns(netns))
		emit(skops, k, netns, stage);
	return 1;
}

/* Never written: exported so the skeleton generates the Rust mirrors of
 * struct tx_record (which the agent decodes records with) and of the enums
 * of tracer.h (record kind, stages, counter indices), so the agent takes
 * every number from here instead of a hand-kept copy. */
struct tx_record tx_record_layout SEC(".bss") __attribute__((used));
enum record_kind record_kind_values SEC(".bss") __attribute__((used));
enum tx_stage tx_stage_values SEC(".bss") __attribute__((used));
enum tx_flag tx_flag_values SEC(".bss") __attribute__((used));
enum counter counter_values SEC(".bss") __attribute__((used));
