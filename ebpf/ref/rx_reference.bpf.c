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
 *
 * Built with -DREF_CLOCK (names "clk_..."), each program makes one
 * bpf_ktime_get_ns() call and nothing else: the floor of a hook that
 * stamps an event, which every record needs. The call is kept by an empty
 * asm that uses its result, so no store adds to it.
 */
#include "kernel.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#ifdef REF_CLOCK
#define NAME(n) clk_##n
#define BODY()                                  \
	do {                                    \
		__u64 t = bpf_ktime_get_ns();   \
		asm volatile("" : : "r"(t));    \
	} while (0)
#else
#define NAME(n) ref_##n
#define BODY() do { } while (0)
#endif
/* An indirection, so that NAME() is expanded before BPF_PROG pastes it. */
#define PROG(n, ...) BPF_PROG(n, __VA_ARGS__)

SEC("tp_btf/netif_receive_skb")
int PROG(NAME(stack_entry), struct sk_buff *skb)
{
	BODY();
	return 0;
}

SEC("tp_btf/tcp_probe")
int PROG(NAME(tcp_input), struct sock *sk, struct sk_buff *skb)
{
	BODY();
	return 0;
}

SEC("tp_btf/sk_data_ready")
int PROG(NAME(data_ready), struct sock *sk)
{
	BODY();
	return 0;
}

SEC("tp_btf/skb_copy_datagram_iovec")
int PROG(NAME(copy), struct sk_buff *skb, int len)
{
	BODY();
	return 0;
}

SEC("tp_btf/sock_recv_length")
int PROG(NAME(read_done), struct sock *sk, int ret, int flags)
{
	BODY();
	return 0;
}

SEC("tp_btf/kfree_skb")
int PROG(NAME(kfree_skb), struct sk_buff *skb, void *location,
	 enum skb_drop_reason reason, struct sock *rx_sk)
{
	BODY();
	return 0;
}
