// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * CPU cost of moving packets, per CPU and category (Netto-style): time in
 * NET_RX and NET_TX softirqs, and time in socket send and receive calls.
 * No records: five tp_btf programs keep per-CPU totals the agent reads
 * (tracer-agent/src/cpucost/); the bookkeeping is ebpf/include/cpucost.h.
 *
 *   irq:softirq_entry/exit(vec)    a softirq of any vector pauses the
 *                                  running call; NET_RX/NET_TX are charged
 *                                  to their category, every vector to its
 *                                  own total (a check against /proc/stat)
 *   raw_syscalls:sys_enter/exit    a socket call opens / closes
 *   sched:sched_switch(prev, next) closes prev's open call, keeping it in
 *                                  prev's task storage; reopens next's
 *
 * The per-CPU state is the running task's (cpucost.h); the hooks that know
 * the running task check that it is, which catches switches sched_switch
 * never reported (seen on the PVM guest kernel this was built on).
 *
 * Why raw syscalls for the socket calls. sock:sock_send_length and
 * sock:sock_recv_length fire once the protocol's sendmsg/recvmsg has
 * returned: an end without a start (no tracepoint marks the entry of
 * sock_sendmsg), so they cannot delimit a call. The syscalls:sys_enter_*
 * events are ftrace's per-syscall views of the same raw_syscalls hooks:
 * they test a bitmap per syscall instead of running a program for each
 * one, but each hit pays a perf buffer and a classic-tracepoint program,
 * and libbpf needs tracefs (not mounted at boot here) to find their ids.
 * So: the two raw hooks, filtering on the syscall number first (an
 * argument at entry, regs->orig_ax at exit, one load), which is all that
 * every other syscall pays beyond the hook itself. Attaching any
 * raw_syscalls program sends every task's syscalls through the kernel's
 * slow syscall-tracing path; bench/cpucost-overhead.sh measures the whole.
 *
 * What a call's time is: from syscall entry to exit, minus the softirqs
 * that ran inside it (over veth and loopback the receiver's NET_RX runs in
 * the sender's sendto, at local_bh_enable) and minus the time its task
 * was switched away (a blocking recv is charged only while it runs).
 * Hardirqs are not taken out (no hook covers every hardirq): they are
 * charged to what they interrupt, a call or a softirq.
 *
 * Blind spots: socket I/O through read/write/readv/writev, sendfile,
 * splice and io_uring (not these syscall numbers; the sock_*_length
 * tracepoints see them but give no start); 32-bit (ia32) tasks, whose
 * socketcall and numbers differ (skipped by their code segment); socket
 * calls made by the kernel itself (NFS, in-kernel TLS handshakes); the
 * part of a call before the attach (its exit is counted as
 * CC_CTR_CALL_UNSEEN); a softirq that began before the attach; after a
 * switch sched_switch did not report, the time until the task's next
 * socket syscall or switch (softirqs do not check the task, to stay
 * cheap) may go to the previous task's open call. The totals hold closed
 * segments only: a reading misses the open segment of each CPU (a softirq
 * run is bounded to about 2 ms by the kernel).
 */
#include "kernel.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "cpucost.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Configuration, set by the agent between open and load. */
const volatile __u32 exclude_tgid = 0;	/* a process whose calls are not counted; 0: none */

/* x86_64 syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl, ABI). */
#define NR_SENDTO 44
#define NR_RECVFROM 45
#define NR_SENDMSG 46
#define NR_RECVMSG 47
#define NR_RECVMMSG 299
#define NR_SENDMMSG 307
/* The code segment of a 32-bit (ia32) task's saved registers (__USER32_CS):
 * its syscall numbers are another table. */
#define USER32_CS 0x23

/* This CPU's state and totals. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpucost_cpu);
} cpus SEC(".maps");

/* The call a task was switched away in; freed with the task, so a task
 * that exits inside a call leaves nothing behind. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct cpucost_task);
} stashed SEC(".maps");

static __always_inline struct cpucost_cpu *cpu_state(void)
{
	__u32 zero = 0;

	/* Never NULL for key 0 of a per-CPU array; the verifier wants the check. */
	return bpf_map_lookup_elem(&cpus, &zero);
}

/* The socket call syscall `nr` of a 64-bit task is, or CC_CALL_NONE. */
static __always_inline __u32 socket_call(long nr)
{
	switch (nr) {
	case NR_SENDTO:
	case NR_SENDMSG:
	case NR_SENDMMSG:
		return CC_CALL_SEND;
	case NR_RECVFROM:
	case NR_RECVMSG:
	case NR_RECVMMSG:
		return CC_CALL_RECV;
	default:
		return CC_CALL_NONE;
	}
}

/* The socket call this syscall is, CC_CALL_NONE for any other syscall,
 * for a 32-bit task, or for the excluded process. The number first: it is
 * all that the other syscalls pay. */
static __always_inline __u32 traced_call(const struct pt_regs *regs, long nr)
{
	__u32 call = socket_call(nr);

	if (!call || regs->cs == USER32_CS)
		return CC_CALL_NONE;
	if (exclude_tgid && bpf_get_current_pid_tgid() >> 32 == exclude_tgid)
		return CC_CALL_NONE;
	return call;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(cc_softirq_entry_prog, unsigned int vec)
{
	struct cpucost_cpu *c = cpu_state();

	if (!c)
		return 0;
	cc_softirq_entry(c, vec, bpf_ktime_get_ns());
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(cc_softirq_exit_prog, unsigned int vec)
{
	struct cpucost_cpu *c = cpu_state();

	if (!c)
		return 0;
	cc_softirq_exit(c, vec, bpf_ktime_get_ns());
	return 0;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(cc_sys_enter, struct pt_regs *regs, long id)
{
	struct cpucost_cpu *c;
	__u64 task;
	__u32 call;

	call = traced_call(regs, id);
	if (!call)
		return 0;
	c = cpu_state();
	if (!c)
		return 0;
	/* The task before the clock: the clock read is the last thing before
	 * the state is written (the shorter that stretch, the rarer a softirq
	 * inside it). */
	task = (__u64)bpf_get_current_task_btf();
	cc_call_enter(c, call, bpf_ktime_get_ns(), task);
	return 0;
}

/* The same filter as at the entry, on the number the registers keep. */
SEC("tp_btf/sys_exit")
int BPF_PROG(cc_sys_exit, struct pt_regs *regs, long ret)
{
	struct task_struct *task;
	struct cpucost_task *t;
	struct cpucost_cpu *c;

	if (!traced_call(regs, regs->orig_ax))
		return 0;
	c = cpu_state();
	if (!c)
		return 0;
	task = bpf_get_current_task_btf();
	if (cc_call_exit(c, bpf_ktime_get_ns(), (__u64)task))
		return 0;
	/* Back by an unreported switch: a call kept at its last switch away
	 * was never handed back, and it has just ended. */
	t = bpf_task_storage_get(&stashed, task, 0, 0);
	if (t)
		t->call = CC_CALL_NONE;
	return 0;
}

/* Runs with interrupts off: nothing nests inside it. prev's storage is
 * made only when it leaves inside a call; next's is looked up without
 * creating (a task that never stashed a call has none, a cheap miss). */
SEC("tp_btf/sched_switch")
int BPF_PROG(cc_sched_switch, bool preempt, struct task_struct *prev,
	     struct task_struct *next, unsigned int prev_state)
{
	struct cpucost_task *t;
	struct cpucost_cpu *c;
	__u32 call;
	__u64 now;

	c = cpu_state();
	if (!c)
		return 0;
	now = bpf_ktime_get_ns();
	call = cc_switch_out(c, now, (__u64)prev);
	if (call && prev) {
		t = bpf_task_storage_get(&stashed, prev, 0,
					 BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (t)
			t->call = call;
		else
			c->counters[CC_CTR_STASH_LOST]++;
	}
	call = CC_CALL_NONE;
	if (next) {
		t = bpf_task_storage_get(&stashed, next, 0, 0);
		if (t) {
			call = t->call;
			t->call = CC_CALL_NONE;
		}
	}
	cc_switch_in(c, call, now, (__u64)next);
	return 0;
}

/* Never written: exported so the skeleton generates the Rust mirrors of
 * the state and of the enums of cpucost.h the agent uses. */
struct cpucost_cpu cpucost_cpu_layout SEC(".bss") __attribute__((used));
enum cc_category cc_category_values SEC(".bss") __attribute__((used));
enum cc_counter cc_counter_values SEC(".bss") __attribute__((used));
enum cc_softirq cc_softirq_values SEC(".bss") __attribute__((used));
