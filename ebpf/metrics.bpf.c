// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Metrics program (the agent's --metrics mode): histograms and counters
 * kept in BPF maps, nothing per event crosses into user space. The agent
 * reads the maps when Prometheus scrapes it (tracer-agent/src/metrics/).
 *
 *   RX latency, as netstacklat measures it: now - skb->tstamp (the RX
 *   software stamp, taken when the skb entered the stack's queue) at
 *     net:netif_receive_skb, tcp:tcp_probe, skb:skb_copy_datagram_iovec
 *   TX stage latency from BPF TX timestamping, per skb: the times of its
 *   SENDMSG, SCHED and SND_SW callbacks are remembered in an LRU hash
 *   keyed by socket and tskey (the kernel selftest net_timestamping keeps
 *   them the same way) until its ACK, and each step observed once (a
 *   retransmission's second SCHED is not a first transmission's).
 *   Counters: drops by reason (skb:kfree_skb), TCP retransmissions, resets
 *   sent and received, receive queue full and socket memory limit events.
 *
 * Histograms: log2 buckets, right-inclusive (hist.h). Without grouping,
 * one row per CPU and hook in an array (`hists`): one lookup, inlined by
 * the verifier, at this CPU's key (a program runs with migration off).
 * With --metrics-by netns and/or iface, a per-CPU hash keyed by hook and
 * the chosen labels, bounded; a label set that does not fit goes to the
 * hook's ungrouped slot and is counted (NT_MERR_SERIES_FULL).
 *
 * This CPU's values updated with plain adds: a tracing program does not run
 * nested on one CPU (the kernel skips a nested run), and every program
 * updates only its own hooks. The sockops program can be re-entered from
 * softirq (an ACK while the task sends), so its adds are atomic.
 *
 * Every program filters by netns first and by --filter next (filter.h,
 * which also keeps nettrace's own traffic out), before any map access.
 */
#include "kernel.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_tracing.h>
#include "tracer.h"
#include "hist.h"
#include "metrics.h"
#include "sample.h"
#include "skb_flow.h"
#include "tx_sample.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Configuration, set by the agent between open and load. */
const volatile __u32 target_netns = 0;	/* netns inode to trace; 0 = all */
const volatile __u64 sample_threshold = NT_SAMPLE_ALL; /* TX only, sample.h */
const volatile __u8 by_netns = 0;	/* label histograms and counters by netns */
const volatile __u8 by_iface = 0;	/* label RX histograms by ifindex */
/* Last: its flow_filter after the small constants (see rx.bpf.c). */
#include "filter.h"

/* CLOCK_TAI - CLOCK_REALTIME in whole seconds (the kernel keeps it
 * within 0..100000), written by the agent at start and whenever it
 * changes: an skb's REALTIME stamp is compared with the TAI clock, which
 * NTP slews exactly as it slews REALTIME, so the difference stays exact
 * between leap seconds (netstacklat does the same).
 *
 * Read from here once per NT_TAI_RECHECK_SHIFT epoch (2^27 ns, 134 ms) per
 * histogram and CPU, and kept in the histogram's tai_state (hist.h), whose
 * cache line the event writes anyway: a load of this map's line on every
 * event cost each RX hook 15-50 ns here, as the .bss global did before it
 * (bench/rx-overhead.sh, alternating builds). So a change reaches every
 * hook within the agent's refresh (1 s) and one epoch. */
#define NT_TAI_RECHECK_SHIFT 27
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} tai_offset SEC(".maps");

/* Without grouping: one histogram per CPU and hook, at key
 * cpu * NT_HOOK_MAX + hook (sized by the agent for the possible CPUs). A
 * plain array rather than a per-CPU one because its values are laid out
 * from a page boundary when it is mmapable, so that every bucket (32
 * bytes) lies within one cache line; a per-CPU array's values are only
 * 8-byte aligned. Each row is whole cache lines, so no two CPUs share one. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, NT_HOOK_MAX);	/* x possible CPUs, by the agent */
	__type(key, __u32);
	__type(value, struct nt_hist);
} hists SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1);	/* sized by the agent (--metrics-max-series) */
	__type(key, struct nt_hist_key);
	__type(value, struct nt_hist);
} hists_by SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct nt_count_key);
	__type(value, __u64);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nt_drops);
} drops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NT_MERR_MAX);
	__type(key, __u32);
	__type(value, __u64);
} errors SEC(".maps");

struct tx_key {
	__u64 sk;	/* the socket's address: unique while it lives */
	__u32 tskey;
	__u32 _pad;
};

struct tx_times {
	__u64 sendmsg_ns;
	__u64 sched_ns;
	__u64 snd_sw_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct tx_key);
	__type(value, struct tx_times);
} tx_inflight SEC(".maps");

/* Never written: a zero histogram, the first value of a new label
 * set's slot in hists_by (too large for the stack); its BTF also gives the
 * agent the histogram's layout. */
struct nt_hist hist_zero SEC(".bss") __attribute__((used));

extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;
extern int bpf_sock_ops_enable_tx_tstamp(struct bpf_sock_ops_kern *skops,
					 u64 flags) __ksym;

static __always_inline void error(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&errors, &idx);

	if (c)
		*c += 1;
}

static __always_inline bool other_netns(__u32 netns)
{
	return target_netns && netns != target_netns;
}

static __always_inline __u32 sk_netns(const struct sock *sk)
{
	return sk->__sk_common.skc_net.net->ns.inum;
}

/* The same for a pointer that may be NULL: checked and read through one
 * register (the verifier refuses a reload of skb->sk after its check). */
static __always_inline __u32 sk_netns_or0(const struct sock *sk)
{
	return sk ? sk_netns(sk) : 0;
}

static __always_inline bool is_ip(__u16 proto)
{
	return proto == ETH_P_IP || proto == ETH_P_IPV6;
}

/* The histogram a value of `hook` goes to. Callers load `ifindex` only
 * `by_iface` (a frozen constant: the verifier drops the other branch), so
 * an unlabelled hook never touches the interface's cache line. */
static __always_inline struct nt_hist *hist_of(__u32 hook, __u32 netns,
					       __u32 ifindex)
{
	struct nt_hist *h;

	if (by_netns || by_iface) {
		struct nt_hist_key key = {
			.hook = hook,
			.netns = by_netns ? netns : 0,
			.ifindex = by_iface ? ifindex : 0,
		};

		h = bpf_map_lookup_elem(&hists_by, &key);
		if (h)
			return h;
		/* A new label set: this CPU's slot starts from `zero`, the
		 * others' from zero too. The update fails when the map is full
		 * (or another CPU made the key meanwhile, which the lookup
		 * after it finds). */
		bpf_map_update_elem(&hists_by, &key, &hist_zero, BPF_NOEXIST);
		h = bpf_map_lookup_elem(&hists_by, &key);
		if (h)
			return h;
		error(NT_MERR_SERIES_FULL);
	}
	hook += bpf_get_smp_processor_id() * NT_HOOK_MAX;
	return bpf_map_lookup_elem(&hists, &hook);
}

/* Add `v` to `h`: its bucket's count and the sum. The check keeps the
 * verifier's bound (the +Inf bucket takes every larger value). */
static __always_inline void hist_add(struct nt_hist *h, __u64 v)
{
	__u32 b = nt_hist_bucket(v);

	if (b < NT_HIST_BUCKETS) {
		h->count[b] += 1;
		h->sum_ns += v;
	}
}

static __always_inline void observe_atomic(__u32 hook, __u32 netns, __u64 v)
{
	struct nt_hist *h = hist_of(hook, netns, 0);
	__u32 b = nt_hist_bucket(v);

	if (!h || b >= NT_HIST_BUCKETS)
		return;
	__sync_fetch_and_add(&h->count[b], 1);
	__sync_fetch_and_add(&h->sum_ns, v);
}

/* The TAI offset in seconds as histogram `h` keeps it for this CPU: reread
 * from the tai_offset map when the epoch of `now` (TAI) is not the one it
 * was read in. tai_state: the epoch's low 32 bits, then the seconds. */
static __always_inline __u32 tai_offset_s(struct nt_hist *h, __u64 now)
{
	__u32 epoch = (__u32)(now >> NT_TAI_RECHECK_SHIFT);
	__u64 st = h->tai_state;

	if ((__u32)(st >> 32) != epoch) {
		__u32 zero = 0, *src = bpf_map_lookup_elem(&tai_offset, &zero);

		st = (__u64)epoch << 32 | (src ? *src : 0);
		h->tai_state = st;
	}
	return (__u32)st;
}

/* The time since the skb's RX stamp, on the stamp's own clock
 * (skb->tstamp_type: 0 REALTIME, 1 MONOTONIC, 2 TAI), into `hook`'s
 * histogram. A REALTIME stamp is compared with the TAI clock less the
 * offset, which the histogram's first line keeps (the line the event
 * writes its sum into anyway). */
static __always_inline void observe_rx(__u32 hook, __u32 netns, __u32 ifindex,
				       const struct sk_buff *skb)
{
	__s64 stamp = skb->tstamp;
	struct nt_hist *h;
	__u64 now, v;
	__u8 type;

	if (!stamp) {
		error(NT_MERR_NO_RX_STAMP);
		return;
	}
	h = hist_of(hook, netns, ifindex);
	if (!h)
		return;
	type = BPF_CORE_READ_BITFIELD(skb, tstamp_type);
	now = type == 1 ? bpf_ktime_get_ns() : bpf_ktime_get_tai_ns();
	v = now - stamp;
	if (type == 0)
		v -= (__u64)tai_offset_s(h, now) * 1000000000ULL;
	if ((__s64)v < 0) {
		error(NT_MERR_FUTURE_STAMP);
		return;
	}
	hist_add(h, v);
}

static __always_inline void count_event(__u32 kind, __u32 detail, __u32 netns)
{
	struct nt_count_key key = {
		.kind = kind,
		.detail = detail,
		.netns = by_netns ? netns : 0,
	};
	__u64 one = 1, *c;

	c = bpf_map_lookup_elem(&counts, &key);
	if (c) {
		*c += 1;
		return;
	}
	if (bpf_map_update_elem(&counts, &key, &one, BPF_NOEXIST)) {
		/* Another program's run made it meanwhile, or the map is full. */
		c = bpf_map_lookup_elem(&counts, &key);
		if (c)
			*c += 1;
		else
			error(NT_MERR_COUNTS_FULL);
	}
}

/* An skb's flow passes --filter (parsed only when a filter or nettrace's
 * own endpoints need it). */
static __always_inline bool skb_passes(struct sk_buff *skb, __u16 proto,
				       bool reverse)
{
	struct skb_flow f;

	if (!filter_on() && !self_on())
		return true;
	skb_flow_parse(skb, proto, &f);
	return skb_flow_parsed_matches(&f, reverse);
}

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(metrics_stack_entry, struct sk_buff *skb)
{
	struct net_device *dev = skb->dev;
	__u32 netns;
	__u16 proto;

	if (!dev)
		return 0;
	netns = dev->nd_net.net->ns.inum;
	if (other_netns(netns))
		return 0;
	proto = bpf_ntohs(skb->protocol);
	if (!is_ip(proto) || !skb_passes(skb, proto, false))
		return 0;
	observe_rx(NT_HOOK_RX_STACK_ENTRY, netns, by_iface ? dev->ifindex : 0, skb);
	return 0;
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(metrics_tcp_input, struct sock *sk, struct sk_buff *skb)
{
	__u32 netns = sk_netns(sk);

	if (other_netns(netns) ||
	    !sk_flow_matches_proto(sk, false, IPPROTO_TCP))
		return 0;
	observe_rx(NT_HOOK_RX_TCP_INPUT, netns, by_iface ? skb->skb_iif : 0, skb);
	return 0;
}

/* The netns as the rx probe finds it (rx.bpf.c): the owning socket's,
 * else the reading task's. */
SEC("tp_btf/skb_copy_datagram_iovec")
int BPF_PROG(metrics_copy, struct sk_buff *skb, int len)
{
	struct sock *sk = skb->sk;
	__u32 netns;
	__u16 proto;

	if (sk) {
		unsigned short f = sk->__sk_common.skc_family;

		if (f != AF_INET && f != AF_INET6)
			return 0;
		netns = sk_netns(sk);
	} else {
		struct nsproxy *ns = bpf_get_current_task_btf()->nsproxy;

		if (!ns)
			return 0;
		netns = ns->net_ns->ns.inum;
	}
	if (other_netns(netns))
		return 0;
	if (sk && sk_flow_surely_matches(sk)) {
		/* No filter and not ours: nothing more to read. */
	} else if (sk && sk->sk_protocol == IPPROTO_TCP) {
		/* A TCP socket's flow is the socket's. */
		if (!sk_flow_matches_proto(sk, false, IPPROTO_TCP))
			return 0;
	} else {
		proto = bpf_ntohs(skb->protocol);
		if (!is_ip(proto) || !skb_passes(skb, proto, false))
			return 0;
	}
	observe_rx(NT_HOOK_RX_COPY, netns, by_iface ? skb->skb_iif : 0, skb);
	return 0;
}

/* Drops, attributed to a namespace as the drops probe does (drops.bpf.c). */
SEC("tp_btf/kfree_skb")
int BPF_PROG(metrics_kfree_skb, struct sk_buff *skb, void *location,
	     enum skb_drop_reason reason, struct sock *rx_sk)
{
	__u32 netns = 0;

	if (reason == SKB_CONSUMED || reason == SKB_NOT_DROPPED_YET || !skb)
		return 0;
	if (skb->protocol == bpf_htons(NT_LIVE_ETHERTYPE))
		return 0;
	if (skb->dev)
		netns = skb->dev->nd_net.net->ns.inum;
	if (!netns)
		netns = sk_netns_or0(skb->sk);
	if (!netns)
		netns = sk_netns_or0(rx_sk);
	if (target_netns && netns != target_netns)
		return 0;
	if (!skb_passes(skb, bpf_ntohs(skb->protocol), false))
		return 0;
	if (!by_netns && (__u32)reason < NT_DROP_REASONS) {
		__u32 zero = 0;
		struct nt_drops *d = bpf_map_lookup_elem(&drops, &zero);

		if (d)
			d->n[(__u32)reason] += 1;
		return 0;
	}
	count_event(NT_COUNT_DROP, reason, netns);
	return 0;
}

/* A TCP event of socket `sk`, filtered as the tcp probe filters. */
static __always_inline void sock_count(struct sock *sk, __u32 kind, __u32 detail)
{
	__u32 netns;

	if (!sk)
		return;
	netns = sk_netns(sk);
	if (other_netns(netns) || !sk_flow_matches(sk, true))
		return;
	count_event(kind, detail, netns);
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(metrics_retransmit, struct sock *sk, struct sk_buff *skb, int err)
{
	sock_count(sk, NT_COUNT_RETRANSMIT, 0);
	return 0;
}

SEC("tp_btf/tcp_send_reset")
int BPF_PROG(metrics_send_reset, struct sock *sk, struct sk_buff *skb,
	     enum sk_rst_reason reason)
{
	__u32 netns = 0;

	if (sk) {
		sock_count(sk, NT_COUNT_RESET_SENT, 0);
		return 0;
	}
	/* No socket: the reset answers `skb`, received on its device. */
	if (!skb || !skb->dev)
		return 0;
	netns = skb->dev->nd_net.net->ns.inum;
	if (other_netns(netns) || !skb_passes(skb, bpf_ntohs(skb->protocol), true))
		return 0;
	count_event(NT_COUNT_RESET_SENT, 0, netns);
	return 0;
}

SEC("tp_btf/tcp_receive_reset")
int BPF_PROG(metrics_receive_reset, struct sock *sk)
{
	sock_count(sk, NT_COUNT_RESET_RECEIVED, 0);
	return 0;
}

SEC("tp_btf/sock_rcvqueue_full")
int BPF_PROG(metrics_rcvqueue_full, struct sock *sk, struct sk_buff *skb)
{
	sock_count(sk, NT_COUNT_RCVQUEUE_FULL, 0);
	return 0;
}

SEC("tp_btf/sock_exceed_buf_limit")
int BPF_PROG(metrics_mem_limit, struct sock *sk, struct proto *prot,
	     long allocated, int kind)
{
	sock_count(sk, NT_COUNT_MEM_LIMIT, kind == 1);
	return 0;
}

/* TX stages of one skb. `netns` already filtered. */
static __always_inline void tx_stage(struct bpf_sock_ops_kern *k, __u32 op,
				     __u32 netns)
{
	struct skb_shared_info *shinfo;
	struct sk_buff *skb = k->skb;
	struct tx_times *t;
	struct tx_key key = {};
	__u64 now;

	if (!skb)
		return;
	shinfo = bpf_core_cast(skb->head + skb->end, struct skb_shared_info);
	key.sk = (__u64)k->sk;
	key.tskey = shinfo->tskey;
	now = bpf_ktime_get_ns();
	if (op == BPF_SOCK_OPS_TSTAMP_SENDMSG_CB) {
		struct tx_times v = { .sendmsg_ns = now };

		if (bpf_map_update_elem(&tx_inflight, &key, &v, 0))
			error(NT_MERR_TX_INFLIGHT);
		return;
	}
	t = bpf_map_lookup_elem(&tx_inflight, &key);
	if (!t)
		return;
	switch (op) {
	case BPF_SOCK_OPS_TSTAMP_SCHED_CB:
		if (!t->sched_ns && now >= t->sendmsg_ns) {
			t->sched_ns = now;
			observe_atomic(NT_HOOK_TX_SENDMSG_SCHED, netns,
				       now - t->sendmsg_ns);
		}
		break;
	case BPF_SOCK_OPS_TSTAMP_SND_SW_CB:
		if (t->sched_ns && !t->snd_sw_ns && now >= t->sched_ns) {
			t->snd_sw_ns = now;
			observe_atomic(NT_HOOK_TX_SCHED_SND_SW, netns,
				       now - t->sched_ns);
		}
		break;
	case BPF_SOCK_OPS_TSTAMP_ACK_CB:
		if (t->snd_sw_ns && now >= t->snd_sw_ns)
			observe_atomic(NT_HOOK_TX_SND_SW_ACK, netns,
				       now - t->snd_sw_ns);
		bpf_map_delete_elem(&tx_inflight, &key);
		break;
	}
}

SEC("sockops")
int metrics_tx(struct bpf_sock_ops *skops)
{
	struct bpf_sock_ops_kern *k;
	__u32 op = skops->op, netns;
	int flags = SK_BPF_CB_TX_TIMESTAMPING;

	switch (op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_TSTAMP_SENDMSG_CB:
	case BPF_SOCK_OPS_TSTAMP_SCHED_CB:
	case BPF_SOCK_OPS_TSTAMP_SND_SW_CB:
	case BPF_SOCK_OPS_TSTAMP_ACK_CB:
		break;
	default:
		return 1;
	}
	k = bpf_cast_to_kern_ctx(skops);
	if (!k->sk)
		return 1;
	netns = sk_netns(k->sk);
	if (other_netns(netns) ||
	    !sk_flow_matches_proto(k->sk, true, IPPROTO_TCP))
		return 1;
	switch (op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		if (bpf_setsockopt(skops, SOL_SOCKET, SK_BPF_CB_FLAGS, &flags,
				   sizeof(flags)))
			error(NT_MERR_TX_TAG);
		return 1;
	case BPF_SOCK_OPS_TSTAMP_SENDMSG_CB:
		/* The same sendmsgs as the tx probe's with --sample-every. */
		if (tx_sampled_out(skops, k, sample_threshold))
			return 1;
		if (bpf_sock_ops_enable_tx_tstamp(k, 0)) {
			error(NT_MERR_TX_TAG);
			return 1;
		}
		break;
	}
	tx_stage(k, op, netns);
	return 1;
}

/* Never written: exported so the skeleton generates the Rust mirrors of
 * the enums and keys the agent reads the maps with. */
enum nt_metric_hook metrics_hook_values SEC(".bss") __attribute__((used));
enum nt_count_kind metrics_count_values SEC(".bss") __attribute__((used));
enum nt_metric_error metrics_error_values SEC(".bss") __attribute__((used));
struct nt_hist_key metrics_hist_key_layout SEC(".bss") __attribute__((used));
struct nt_count_key metrics_count_key_layout SEC(".bss") __attribute__((used));
struct nt_drops metrics_drops_layout SEC(".bss") __attribute__((used));
