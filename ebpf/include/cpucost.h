/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * CPU cost accounting of the network stack (ebpf/cpucost.bpf.c): the
 * per-CPU state and the interval bookkeeping, as pure functions of the
 * state and a time, so the host compiles and tests the very arithmetic
 * the BPF programs run (tracer-agent/src/cpucost/, host_c.rs).
 *
 * One CPU runs one thing at a time: a task, which may be inside a socket
 * call, and, interrupting it, at most one softirq (softirqs do not nest,
 * and neither a syscall nor a task switch happens inside one). So a CPU's
 * time splits into disjoint segments, each charged to at most one bucket:
 *   - a softirq, from its entry to its exit: to its vector, and to NET_RX
 *     or NET_TX when it is one of those;
 *   - the running task's open socket call, from the call's start (or its
 *     last resumption) to its end, a softirq's entry (pause: the call is
 *     charged only its own time) or a switch away from the task (close);
 *     it resumes at the softirq's exit, or when the task runs again.
 * `mark`, the end of the last segment charged, keeps segments disjoint
 * even when one program runs inside another's few instructions (a
 * hardirq ending in a softirq between a syscall hook's clock read and its
 * store): no segment starts before it, and a segment that would end
 * before it is not charged (counted as CC_CTR_NESTED). The sum of the
 * buckets of a CPU never exceeds the time elapsed on it.
 *
 * The state of the running task's call lives here; a task switched away
 * inside a call keeps it in task storage (the BPF side), handed back by
 * cc_switch_in when it runs again, on whatever CPU.
 *
 * The state names the task it belongs to (`owner`), and every hook that
 * knows the running task checks it: a switch that sched:sched_switch
 * never reports would otherwise hand one task's open call to the next.
 * Such switches happen: on the PVM guest kernel this was built on, a task
 * displaced by the sandbox agent's threads sometimes runs again with no
 * sched_switch event (ftrace sees none either), about three times a
 * second under a UDP flood. A mismatch drops the state (the other task's
 * call is not charged further; CC_CTR_UNTRACED_SWITCH) and adopts the
 * running task, whose own kept call is then stale and must be cleared.
 */
#ifndef CPUCOST_H
#define CPUCOST_H

/* Keeps the compiler from indexing with a register copy made before the
 * bounds check, which the verifier does not know bounded (bpf_helpers.h's
 * barrier_var; plain C on the host). */
#define cc_barrier_var(var) asm volatile("" : "+r"(var))

/* Buckets of cpucost_cpu.ns; the agent's cpucost::Category values. */
enum cc_category {
	CC_NET_RX = 0,
	CC_NET_TX = 1,
	CC_SOCK_SEND = 2,
	CC_SOCK_RECV = 3,
	CC_CAT_MAX = 4,
};

/* The socket call a task is inside of (cpucost_cpu.call, task storage). */
enum cc_call {
	CC_CALL_NONE = 0,
	CC_CALL_SEND = 1,
	CC_CALL_RECV = 2,
};

/* Softirq vectors (enum in include/linux/interrupt.h, ABI of the
 * irq:softirq_* tracepoints' `vec` field): the two charged to a category,
 * and how many there are. A vector past CC_NR_VECTORS (a later kernel's)
 * is charged to no vector, but still pauses the socket call. */
enum cc_softirq {
	CC_NET_TX_SOFTIRQ = 2,
	CC_NET_RX_SOFTIRQ = 3,
	CC_NR_VECTORS = 10,
};

/* Indexes of cpucost_cpu.counters: what the bookkeeping could not charge. */
enum cc_counter {
	/* A call's exit with no call open: it began before the programs were
	 * attached (or was opened by a task that was not stashed). */
	CC_CTR_CALL_UNSEEN = 0,
	/* A call began while one was open here: the open one's exit was never
	 * seen (attach order makes this rare); its rest is dropped. */
	CC_CTR_CALL_REOPENED = 1,
	/* A softirq's exit not matching the open entry (one that began before
	 * the attach), or an entry while one was open. */
	CC_CTR_SOFTIRQ_UNMATCHED = 2,
	/* A program ran within another's few instructions: the outer one's
	 * segment ended before `mark` and was not charged. */
	CC_CTR_NESTED = 3,
	/* A task switched away inside a call, but task storage for it could
	 * not be had: the rest of that call is not charged. */
	CC_CTR_STASH_LOST = 4,
	/* A task switch while a softirq was open (never expected). */
	CC_CTR_SWITCH_IN_SOFTIRQ = 5,
	/* The running task was not the state's owner: a switch the
	 * tracepoint did not report. The owner's open call was dropped. */
	CC_CTR_UNTRACED_SWITCH = 6,
	CC_CTR_MAX = 7,
};

/* One CPU's state and totals (the only value of a per-CPU array). The
 * totals only grow; a segment is added when it ends. */
struct cpucost_cpu {
	__u64 call_start;	/* start of the open call's running segment */
	__u64 softirq_start;	/* start of the open softirq */
	__u64 mark;		/* end of the last segment charged here */
	__u64 owner;		/* the task the state is of (an opaque id); 0: none yet */
	__u32 call;		/* enum cc_call of the task running here */
	__u32 softirq;		/* open softirq's vector + 1; 0: none */
	__u64 ns[CC_CAT_MAX];		/* charged, by enum cc_category */
	__u64 softirq_ns[CC_NR_VECTORS];	/* every softirq, by vector */
	__u64 softirq_runs[CC_NR_VECTORS];	/* softirqs charged, by vector */
	__u64 counters[CC_CTR_MAX];	/* enum cc_counter */
};

/* A task switched away inside a socket call (task storage value). */
struct cpucost_task {
	__u32 call;		/* enum cc_call; CC_CALL_NONE once handed back */
};

/* Where a segment opened `now` starts: never before the last charged end. */
static __always_inline __u64 cc_open(const struct cpucost_cpu *c, __u64 now)
{
	return now > c->mark ? now : c->mark;
}

/* The length of segment [start, now], moved past by `mark`; 0 when it
 * ends before it starts (nesting, CC_CTR_NESTED). */
static __always_inline __u64 cc_close(struct cpucost_cpu *c, __u64 start,
				      __u64 now)
{
	if (now < start) {
		c->counters[CC_CTR_NESTED]++;
		return 0;
	}
	c->mark = now;
	return now - start;
}

/* The open call's running segment ends now (pause or close). */
static __always_inline void cc_charge_call(struct cpucost_cpu *c, __u64 now)
{
	__u64 d = cc_close(c, c->call_start, now);

	if (c->call == CC_CALL_SEND)
		c->ns[CC_SOCK_SEND] += d;
	else
		c->ns[CC_SOCK_RECV] += d;
}

/* Whether the state is the running task `cur`'s; if not (an unreported
 * switch), drops the other task's call, counts it, and adopts `cur`. A
 * state with no owner yet (the first event on this CPU) is adopted. */
static __always_inline bool cc_owned(struct cpucost_cpu *c, __u64 cur)
{
	if (c->owner == cur)
		return true;
	if (c->owner)
		c->counters[CC_CTR_UNTRACED_SWITCH]++;
	c->owner = cur;
	c->call = CC_CALL_NONE;
	return false;
}

/* irq:softirq_entry: pauses the running call. */
static __always_inline void cc_softirq_entry(struct cpucost_cpu *c, __u32 vec,
					     __u64 now)
{
	if (c->softirq)
		c->counters[CC_CTR_SOFTIRQ_UNMATCHED]++;
	else if (c->call)
		cc_charge_call(c, now);
	c->softirq = vec + 1;
	c->softirq_start = cc_open(c, now);
}

/* irq:softirq_exit: charges the softirq, resumes the running call. */
static __always_inline void cc_softirq_exit(struct cpucost_cpu *c, __u32 vec,
					    __u64 now)
{
	__u64 d;

	if (c->softirq != vec + 1) {
		/* Began before the attach: unknown start, charge nothing. */
		c->counters[CC_CTR_SOFTIRQ_UNMATCHED]++;
	} else {
		d = cc_close(c, c->softirq_start, now);
		if (vec < CC_NR_VECTORS) {
			/* The index the verifier saw bounded, not a copy. */
			cc_barrier_var(vec);
			c->softirq_ns[vec] += d;
			c->softirq_runs[vec]++;
		}
		if (vec == CC_NET_RX_SOFTIRQ)
			c->ns[CC_NET_RX] += d;
		else if (vec == CC_NET_TX_SOFTIRQ)
			c->ns[CC_NET_TX] += d;
	}
	c->softirq = 0;
	/* A call open here was paused the whole time (no syscall or switch
	 * happens inside a softirq). */
	if (c->call)
		c->call_start = cc_open(c, now);
}

/* The running task `cur` enters socket call `call`. */
static __always_inline void cc_call_enter(struct cpucost_cpu *c, __u32 call,
					  __u64 now, __u64 cur)
{
	if (cc_owned(c, cur) && c->call)
		c->counters[CC_CTR_CALL_REOPENED]++;
	c->call = call;
	c->call_start = cc_open(c, now);
}

/* The running task `cur` leaves the socket call it is in, if one was
 * seen. Returns false when the state was not `cur`'s: `cur` came back by
 * an unreported switch, so a call it kept when it was switched away was
 * never handed back and is stale now (the caller clears it). */
static __always_inline bool cc_call_exit(struct cpucost_cpu *c, __u64 now,
					 __u64 cur)
{
	bool owned = cc_owned(c, cur);

	if (!c->call) {
		c->counters[CC_CTR_CALL_UNSEEN]++;
		return owned;
	}
	if (!c->softirq)
		cc_charge_call(c, now);
	c->call = CC_CALL_NONE;
	return owned;
}

/* sched_switch, the task `prev` leaving: closes its call's segment and
 * returns the call to keep with the task (CC_CALL_NONE: nothing to keep;
 * never another task's call). */
static __always_inline __u32 cc_switch_out(struct cpucost_cpu *c, __u64 now,
					   __u64 prev)
{
	__u32 call;

	cc_owned(c, prev);
	call = c->call;
	if (c->softirq) {
		/* Never expected: a softirq cannot sleep. Its time stays
		 * uncharged, the call paused. */
		c->counters[CC_CTR_SWITCH_IN_SOFTIRQ]++;
		c->softirq = 0;
	} else if (call) {
		cc_charge_call(c, now);
	}
	c->call = CC_CALL_NONE;
	return call;
}

/* sched_switch, the task `next` arriving: reopens the call it was
 * switched away in (`call`, from its task storage; CC_CALL_NONE if none). */
static __always_inline void cc_switch_in(struct cpucost_cpu *c, __u32 call,
					 __u64 now, __u64 next)
{
	c->owner = next;
	c->call = call;
	if (call)
		c->call_start = cc_open(c, now);
}

#endif /* CPUCOST_H */
