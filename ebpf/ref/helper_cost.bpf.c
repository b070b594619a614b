// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * What one BPF helper call costs on this machine, for bench/bpf-helper-cost.sh:
 * each program, attached to raw_syscalls:sys_enter (a tracepoint the
 * machine hits constantly), makes HELPER_CALLS calls of one helper in a
 * row; its ns per run (bpf_stats) minus the empty program's, divided by
 * HELPER_CALLS, is one call, warm: the floor a probe pays per call, before
 * any cache miss of the data it reads.
 *
 * The helpers are the ones the probes call per record: the clock, and the
 * current task (the reader at COPY / READ_DONE, the sender at SENDMSG);
 * bpf_get_current_pid_tgid for comparison with the task's loads.
 */
#include "kernel.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define HELPER_CALLS 16

/* An empty asm that uses each result keeps the call. */
#define CALLS(expr)                                     \
	do {                                            \
		int i;                                  \
		for (i = 0; i < HELPER_CALLS; i++) {    \
			__u64 v = (__u64)(expr);        \
			asm volatile("" : : "r"(v));    \
		}                                       \
	} while (0)

SEC("tp_btf/sys_enter")
int BPF_PROG(hc_empty, void *regs, long id)
{
	CALLS(i);
	return 0;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(hc_ktime, void *regs, long id)
{
	CALLS(bpf_ktime_get_ns());
	return 0;
}

/* CLOCK_TAI: what the metrics program compares RX stamps with. */
SEC("tp_btf/sys_enter")
int BPF_PROG(hc_tai, void *regs, long id)
{
	CALLS(bpf_ktime_get_tai_ns());
	return 0;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(hc_task, void *regs, long id)
{
	CALLS(bpf_get_current_task_btf());
	return 0;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(hc_pid_tgid, void *regs, long id)
{
	CALLS(bpf_get_current_pid_tgid());
	return 0;
}
