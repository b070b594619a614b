/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The per-CPU slot ring every probe writes its records into, written once.
 * A probe defines, before including this header:
 *   SLOT_RECORD    its record type (a struct starting with struct record_hdr)
 *   SLOT_COUNTERS  the length of its counter array (its enum's *_CTR_MAX)
 * and gets the maps `slots`, `heads` (head and counters), `doorbell`, the .rodata
 * constant `slots_per_cpu`, and count() / slot_take() / slot_commit().
 *
 * The agent drains on a timer, never woken per record (a wakeup costs more
 * than the record). So that a burst cannot fill a ring while it sleeps,
 * every quarter ring of records committed on a CPU rings `doorbell` (an
 * 8-byte ringbuf record with a forced wakeup): the agent, waiting on it
 * with its timer as the timeout, drains at once. At most one wakeup per
 * slots_per_cpu / 4 records.
 *
 * A record is taken with one atomic add on this CPU's head and published
 * by writing hdr.commit = seq + 1 last; the agent's reader
 * (tracer-agent/src/probes/slots.rs) copies a slot only once its commit word is the one it
 * expects, and counts the records a producer lapped.
 */
#ifndef SLOT_RING_H
#define SLOT_RING_H

#if !defined(SLOT_RECORD) || !defined(SLOT_COUNTERS)
#error "define SLOT_RECORD and SLOT_COUNTERS before including slot_ring.h"
#endif

const volatile __u32 slots_per_cpu = 32768;	/* power of two; set by the agent */

/* cpu * slots_per_cpu + (seq % slots_per_cpu); sized by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, SLOT_RECORD);
} slots SEC(".maps");

/* A CPU's producer state: the records ever started on it (the ring's
 * head), then the probe's counters, indexed by its counter enum. One value,
 * so that a record and the counters it bumps touch one cache line and one
 * map: at a hook that runs rarely (kfree_skb) every line and every map a
 * run touches is a cache miss. One entry per possible CPU (sized by the
 * agent) in an mmapable array, each in lines of its own: the agent reads
 * heads and counters from memory, with no system call per drain. */
struct slot_cpu {
	__u64 head;
	__u64 counters[SLOT_COUNTERS];
} __attribute__((aligned(64)));

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct slot_cpu);
} heads SEC(".maps");

/* Wakes the agent every quarter ring of records (slot_commit). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} doorbell SEC(".maps");

/* This CPU's entry of `heads`; NULL only on a CPU beyond the map's size,
 * which the agent sizes to every possible CPU. */
static __always_inline struct slot_cpu *this_cpu_heads(__u32 *cpu)
{
	*cpu = bpf_get_smp_processor_id();
	return bpf_map_lookup_elem(&heads, cpu);
}

static __always_inline void count(__u32 idx)
{
	__u32 cpu;
	struct slot_cpu *c = this_cpu_heads(&cpu);

	if (c && idx < SLOT_COUNTERS)
		c->counters[idx] += 1;
}

/* The next slot of this CPU's ring, or NULL after counting `lost_ctr`.
 * `*seq` is what slot_commit() publishes, `*cpu` the slot's CPU. */
static __always_inline SLOT_RECORD *slot_take(__u32 lost_ctr, __u64 *seq,
					      __u32 *cpu)
{
	SLOT_RECORD *r;
	struct slot_cpu *c;
	__u32 idx;

	c = this_cpu_heads(cpu);
	if (!c)
		return NULL;
	/* Atomic: a softirq may interrupt a process-context run on this CPU. */
	*seq = __sync_fetch_and_add(&c->head, 1);
	idx = *cpu * slots_per_cpu + ((__u32)*seq & (slots_per_cpu - 1));
	r = bpf_map_lookup_elem(&slots, &idx);
	if (!r) {
		if (lost_ctr < SLOT_COUNTERS)
			c->counters[lost_ctr] += 1;
		return NULL;
	}
	return r;
}

/* Publish a filled record: its commit word last. x86 keeps stores in
 * program order (TSO), so a compiler barrier is enough; elsewhere an
 * atomic exchange orders the stores. */
static __always_inline void slot_commit(struct record_hdr *hdr, __u64 seq)
{
	__u32 quarter = (slots_per_cpu >> 2) - 1;

#ifdef __TARGET_ARCH_x86
	asm volatile("" ::: "memory");
	hdr->commit = (__u32)seq + 1;
#else
	__sync_lock_test_and_set(&hdr->commit, (__u32)seq + 1);
#endif
	if (((__u32)seq & quarter) == quarter) {
		/* A full doorbell already woke the agent: nothing lost. */
		bpf_ringbuf_output(&doorbell, &seq, sizeof(seq), BPF_RB_FORCE_WAKEUP);
	}
}

#endif /* SLOT_RING_H */
