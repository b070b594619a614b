// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Reference programs for bench/rx-overhead.sh: one do-nothing tp_btf
 * program per tracepoint the rx and drops probes use, with the same
 * prototype. Attached to the same tracepoint in the same run as the agent's
 * programs, their ns per run (bpf_stats) is what being called at that hook
 * costs on this machine: the trampoline-free tp_btf dispatch, bpf_stats'
 * own two clock reads, and the cache state the hook leaves. The agent's
 * cost per hook is read against it.
 *
 * Each is named after the agent's program it stands beside, "ref_" in
 * place of "rx_"/"drop_" (names stay within the kernel's 15 characters).
 */
#include "kernel.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(ref_stack_entry, struct sk_buff *skb)
{
	return 0;
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(ref_tcp_input, struct sock *sk, struct sk_buff *skb)
{
	return 0;
}

SEC("tp_btf/sk_data_ready")
int BPF_PROG(ref_data_ready, struct sock *sk)
{
	return 0;
}

SEC("tp_btf/skb_copy_datagram_iovec")
int BPF_PROG(ref_copy, struct sk_buff *skb, int len)
{
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(ref_read_done, struct sock *sk, int ret, int flags)
{
	return 0;
}

SEC("tp_btf/kfree_skb")
int BPF_PROG(ref_kfree_skb, struct sk_buff *skb, void *location,
	     enum skb_drop_reason reason, struct sock *rx_sk)
{
	return 0;
}
