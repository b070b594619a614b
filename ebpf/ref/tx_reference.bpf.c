// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Reference programs for bench/agent-overhead.sh: the floor that the TX
 * probe's cost per callback is measured against, side by side in one run.
 *
 * ref_untagged:  enables TX timestamping at ESTABLISHED but tags nothing, so
 *                only the SENDMSG callback runs, and returns: the floor
 *                under --sample-every N, where most calls are not tagged.
 * ref_tag_only:  what BPF TX timestamping needs and nothing else (enable at
 *                ESTABLISHED, tag at SENDMSG; every other callback returns).
 *                Its ns per callback is the cost of being called at all.
 * ref_tag_clock: the same plus one bpf_ktime_get_ns() per callback, the one
 *                thing every traced event must have.
 *
 * No netns filter and no output: the bench attaches them to a cgroup that
 * holds only its own iperf3 client.
 */
#include "kernel.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;
extern int bpf_sock_ops_enable_tx_tstamp(struct bpf_sock_ops_kern *skops,
					 u64 flags) __ksym;

/* Keeps the clock read from being optimised away. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} last SEC(".maps");

static __always_inline int tag(struct bpf_sock_ops *skops, __u32 op)
{
	int flags = SK_BPF_CB_TX_TIMESTAMPING;

	if (op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB ||
	    op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		bpf_setsockopt(skops, SOL_SOCKET, SK_BPF_CB_FLAGS, &flags,
			       sizeof(flags));
	else if (op == BPF_SOCK_OPS_TSTAMP_SENDMSG_CB)
		bpf_sock_ops_enable_tx_tstamp(bpf_cast_to_kern_ctx(skops), 0);
	return 1;
}

SEC("sockops")
int ref_untagged(struct bpf_sock_ops *skops)
{
	__u32 op = skops->op;

	return op == BPF_SOCK_OPS_TSTAMP_SENDMSG_CB ? 1 : tag(skops, op);
}

SEC("sockops")
int ref_tag_only(struct bpf_sock_ops *skops)
{
	return tag(skops, skops->op);
}

SEC("sockops")
int ref_tag_clock(struct bpf_sock_ops *skops)
{
	__u32 op = skops->op, zero = 0;
	__u64 *v;

	if (op >= BPF_SOCK_OPS_TSTAMP_SCHED_CB &&
	    op <= BPF_SOCK_OPS_TSTAMP_SENDMSG_CB) {
		v = bpf_map_lookup_elem(&last, &zero);
		if (v)
			*v = bpf_ktime_get_ns();
	}
	return tag(skops, op);
}
