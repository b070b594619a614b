// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Reference programs for bench/cpucost-overhead.sh: one do-nothing tp_btf
 * program on each tracepoint the CPU cost accounting (ebpf/cpucost.bpf.c)
 * uses, with the same prototype. Attached in the same run as the
 * accounting, their ns per run (bpf_stats) is what being called at that
 * hook costs on this machine, and the machine CPU with them attached is
 * the floor of any program there: attaching to raw_syscalls alone sends
 * every syscall of every task through the kernel's slow tracing path.
 *
 * Built with -DREF_CLOCK (names "clk_..."), each program makes one
 * bpf_ktime_get_ns() call, which every accounting program makes on the
 * path that charges (the syscall hooks only for socket calls).
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

SEC("tp_btf/softirq_entry")
int PROG(NAME(sirq_entry), unsigned int vec)
{
	BODY();
	return 0;
}

SEC("tp_btf/softirq_exit")
int PROG(NAME(sirq_exit), unsigned int vec)
{
	BODY();
	return 0;
}

SEC("tp_btf/sys_enter")
int PROG(NAME(sys_enter), struct pt_regs *regs, long id)
{
	BODY();
	return 0;
}

SEC("tp_btf/sys_exit")
int PROG(NAME(sys_exit), struct pt_regs *regs, long ret)
{
	BODY();
	return 0;
}

SEC("tp_btf/sched_switch")
int PROG(NAME(sched_switch), bool preempt, struct task_struct *prev,
	 struct task_struct *next, unsigned int prev_state)
{
	BODY();
	return 0;
}
