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
 *
 * Built with -DREF_NETNS (names "ns_..."), each also reads the network
 * namespace its event belongs to, as the agent's program on that hook
 * does first (the device's for an skb on its way in or dropped, the
 * socket's at socket stages): the floor of a hook that filters by
 * namespace, which the agent must, and which at a hook that runs rarely
 * pays for the cache lines of the device and namespace (kfree_skb).
 *
 * Built with -DREF_STAMP (names "st_..."), the programs on the three hooks
 * the metrics mode keeps RX latency at (netif_receive_skb, tcp_probe,
 * skb_copy_datagram_iovec) read the namespace as above, the skb's RX stamp
 * and its clock type, and call the TAI clock instead: what an RX latency
 * measurement must read, with no histogram update (the floor of
 * ebpf/metrics.bpf.c's hooks); the others are the namespace references.
 *
 * Built with -DREF_HIST (names "hs_..."), each does what the stamp
 * reference does on its hook (the namespace reference's work elsewhere),
 * then adds one to a per-CPU counter of its own, one u64 in a per-CPU
 * array slot per hook: the least private state a hook that keeps a
 * histogram or a counter must write per event (the floor of
 * ebpf/metrics.bpf.c with its histogram update, which writes a bucket
 * and a sum). Where a hook runs between large amounts of other work
 * (skb_copy_datagram_iovec copies the data to the reader), that line is
 * not in the cache the next time, and the miss is what it costs.
 *
 * Built with -DREF_RING (names "rg_..."), each reads the namespace and the
 * clock as the namespace reference does, then takes a slot of a per-CPU
 * ring with one atomic add, writes a record header, the clock and the
 * namespace into it and publishes it with its commit word last, as
 * slot_ring.h does: the floor of a hook that ships one event to user space
 * (what the rx and drops probes must do per event), and a low one: the
 * record is the header and two fields where the probes fill 80-128 bytes,
 * no consumer reads the ring (its lines are never taken away by another
 * CPU) and no doorbell rings.
 *
 * Built with -DREF_FLOW (names "fl_..."), each does what the ring
 * reference does, but writes a whole rx_record (the probes' record, 128
 * bytes) naming its event's flow: at the skb hooks (netif_receive_skb,
 * kfree_skb) parsed from the packet's headers by skb_flow.h, as the rx and
 * drops probes parse them; at the socket hooks read from the socket's
 * addresses and ports (skb->sk at skb_copy_datagram_iovec, nothing if it
 * has none). Its ring is consumed by nobody, as the ring reference's: the
 * floor of a hook that ships an event saying which flow it belongs to,
 * without the agent's stamps, reader, cookie, filter and sampling.
 *
 * Built with -DREF_RECORD (names "rc_..."), each does what the flow
 * reference does and also fills the rest of the record where the rx
 * probe fills it: the skb's stamps (its RX stamp, clock type and the
 * hardware stamp in its shared info) and the device at the skb hooks, the
 * reader (pid, tid and name, loaded from the current task as rx.bpf.c
 * loads them) at skb_copy_datagram_iovec and sock_recv_length, the
 * socket's protocol and cookie wherever there is a socket, and the TCP
 * end_seq the probe takes from the socket where there is no skb (rcv_nxt
 * at sk_data_ready, copied_seq at sock_recv_length): the floor of a hook
 * that ships the record the probe ships, with none of its filter,
 * sampling or branches. Its records go where the probes' go: the five rx
 * hooks' into one ring, kfree_skb's into a ring of its own (the drops
 * probe's layout).
 */
#include "kernel.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#if defined(REF_RECORD)
#define REF_FLOW
#endif
#if defined(REF_RING) || defined(REF_FLOW)
#include <bpf/bpf_endian.h>
#include "tracer.h"
#if defined(REF_RING)
#define NAME(n) rg_##n
struct rg_record {
	struct record_hdr hdr;
	__u64 mono_ns;
	__u32 netns;
	__u8 _rest[44];
};
#define RING_RECORD struct rg_record
#else
#if defined(REF_RECORD)
#define NAME(n) rc_##n
#else
#define NAME(n) fl_##n
#endif
/* The bench builds against the distribution's libbpf headers, which may
 * predate bpf_core_cast (libbpf 1.3): the same kfunc cast it expands to. */
#ifndef bpf_core_cast
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym __weak;
#define bpf_core_cast(ptr, type) \
	((type *)bpf_rdonly_cast((ptr), bpf_core_type_id_kernel(type)))
#endif
#include "skb_flow.h"
#define RING_RECORD struct rx_record
#endif

/* 32768 slots per CPU (the probes' default ring length), for up to 16
 * CPUs (bpftool cannot size a map at load time); a run on a CPU beyond
 * that writes nothing. */
#define RING_SLOTS 32768
#define RING_CPUS 16

/* One head per CPU in lines of its own, as slot_ring.h lays them out. */
struct ring_head {
	__u64 head;
} __attribute__((aligned(64)));

/* A ring: its slots and its per-CPU heads, mmapable as the probes' are. */
#define RING_MAPS(slots, heads)						\
	struct {							\
		__uint(type, BPF_MAP_TYPE_ARRAY);			\
		__uint(max_entries, RING_SLOTS * RING_CPUS);		\
		__uint(map_flags, BPF_F_MMAPABLE);			\
		__type(key, __u32);					\
		__type(value, RING_RECORD);				\
	} slots SEC(".maps");						\
	struct {							\
		__uint(type, BPF_MAP_TYPE_ARRAY);			\
		__uint(max_entries, RING_CPUS);				\
		__uint(map_flags, BPF_F_MMAPABLE);			\
		__type(key, __u32);					\
		__type(value, struct ring_head);			\
	} heads SEC(".maps")

RING_MAPS(ring_slots, ring_heads);

#ifdef REF_RECORD
/* The record reference's kfree_skb writes into a ring of its own, as the
 * drops probe does (the rx probe's five hooks share theirs): at a hook that
 * runs rarely, a ring the other hooks keep warm would make a lower floor
 * than the probe's layout can reach. */
RING_MAPS(drops_slots, drops_heads);
#define ring_take_drops(inum, seq) ring_take_in(&drops_heads, &drops_slots, inum, seq)
#else
#define ring_take_drops(inum, seq) ring_take(inum, seq)
#endif
#define ring_take(inum, seq) ring_take_in(&ring_heads, &ring_slots, inum, seq)

/* A slot of this CPU's ring (`heads`, `slots`: one of the rings above)
 * with its header, clock and namespace written; NULL beyond RING_CPUS. */
static __always_inline RING_RECORD *ring_take_in(void *heads, void *slots,
						 __u32 inum, __u64 *seq)
{
	__u64 t = bpf_ktime_get_ns();
	__u32 cpu = bpf_get_smp_processor_id(), idx;
	struct ring_head *h;
	RING_RECORD *r;

	h = bpf_map_lookup_elem(heads, &cpu);
	if (!h)
		return NULL;
	*seq = __sync_fetch_and_add(&h->head, 1);
	idx = cpu * RING_SLOTS + ((__u32)*seq & (RING_SLOTS - 1));
	r = bpf_map_lookup_elem(slots, &idx);
	if (!r)
		return NULL;
	r->hdr.kind = RECORD_RX;
	r->hdr.len = sizeof(*r);
	r->mono_ns = t;
	r->netns = inum;
	return r;
}

/* Publish: the commit word last. */
static __always_inline void ring_commit(RING_RECORD *r, __u64 seq)
{
	asm volatile("" ::: "memory");
	r->hdr.commit = (__u32)seq + 1;
}

#if defined(REF_RING)
static __always_inline void rg_emit(__u32 inum)
{
	struct rg_record *r;
	__u64 seq;

	r = ring_take(inum, &seq);
	if (r)
		ring_commit(r, seq);
}
#define BODY_NS(ns) rg_emit(ns)
#else
#ifdef REF_RECORD
#include "rx_fields.h"
#endif

/* The flow parsed from the packet's headers (with -DREF_RECORD, also the
 * skb's stamps when `stamps`), into the drops ring when `drop`. */
static __always_inline void fl_emit_skb(__u32 inum, struct sk_buff *skb,
					bool stamps, bool drop)
{
	struct skb_flow f = {};
	struct rx_record *r;
	__u64 seq;

	skb_flow_parse(skb, bpf_ntohs(skb->protocol), &f);
	r = drop ? ring_take_drops(inum, &seq) : ring_take(inum, &seq);
	if (!r)
		return;
	r->family = f.family;
	r->protocol = f.l4proto;
	r->sport = f.sport;
	r->dport = f.dport;
	__builtin_memcpy(r->saddr, f.saddr, 16);
	__builtin_memcpy(r->daddr, f.daddr, 16);
	r->seq = f.seq;
	r->end_seq = f.end_seq;
#ifdef REF_RECORD
	if (stamps) {
		fill_stamps(r, skb);
		r->ifindex = skb->dev ? skb->dev->ifindex : 0;
	}
	r->len = skb->len;
#endif
	ring_commit(r, seq);
}

/* Where a socket stage without an skb takes its end_seq (the rx probe's
 * DATA_READY and READ_DONE): none, rcv_nxt or copied_seq. */
enum fl_end { FL_END_NONE, FL_END_RCV_NXT, FL_END_COPIED };

/* The flow the socket names (none without one). With -DREF_RECORD also
 * what the probe's record holds at that stage: the socket's protocol and
 * cookie, the skb's stamps and range, the reader, and at a stage without
 * an skb its TCP end_seq (`end`). */
static __always_inline void fl_emit_sk(__u32 inum, const struct sock *sk,
				       const struct sk_buff *skb, bool reader,
				       enum fl_end end)
{
	struct rx_record *r;
	__u64 seq;

	r = ring_take(inum, &seq);
	if (!r)
		return;
#ifdef REF_RECORD
	if (skb) {
		fill_stamps(r, skb);
		r->ifindex = skb->skb_iif;
		r->seq = *(__u32 *)skb->cb;
		r->end_seq = *(__u32 *)(skb->cb + 4);
	}
	if (reader)
		fill_task(r, bpf_get_current_task_btf());
	if (sk) {
		const struct tcp_sock *tp = bpf_core_cast(sk, struct tcp_sock);
		bool tcp = sk->sk_protocol == IPPROTO_TCP;

		r->protocol = (__u8)sk->sk_protocol;
		r->cookie = sk->__sk_common.skc_cookie.counter;
		if (end == FL_END_RCV_NXT)
			r->end_seq = tcp ? tp->rcv_nxt : 0;
		else if (end == FL_END_COPIED)
			r->end_seq = tcp ? tp->copied_seq : 0;
	}
#endif
	if (sk) {
		const struct sock_common *c = &sk->__sk_common;

		r->sport = bpf_ntohs(c->skc_dport);
		r->dport = c->skc_num;
		r->family = c->skc_family == AF_INET6 ? 6 : 4;
		__builtin_memcpy(r->saddr, c->skc_v6_daddr.in6_u.u6_addr8, 16);
		__builtin_memcpy(r->daddr, c->skc_v6_rcv_saddr.in6_u.u6_addr8, 16);
	} else {
		r->family = 0;
	}
	ring_commit(r, seq);
}
#define BODY_SKB(ns, skb) fl_emit_skb(ns, skb, false, true)
#define BODY_SK(ns, sk) fl_emit_sk(ns, sk, NULL, false, FL_END_RCV_NXT)
#define BODY_SKB_STAMP(ns, skb) fl_emit_skb(ns, skb, true, false)
#define BODY_SK_STAMP(ns, sk, skb) fl_emit_sk(ns, sk, skb, false, FL_END_NONE)
#define BODY_SK_COPY(ns, sk, skb) fl_emit_sk(ns, sk, skb, true, FL_END_NONE)
#define BODY_SK_READ(ns, sk) fl_emit_sk(ns, sk, NULL, true, FL_END_COPIED)
#endif
#elif defined(REF_STAMP) || defined(REF_HIST)
#if defined(REF_HIST)
#define NAME(n) hs_##n

/* One counter per hook, per CPU, a cache line each: every expansion of
 * HS_COUNT() (one per program) takes the next slot. */
#define HS_SLOTS 64
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, HS_SLOTS);
	__type(key, __u32);
	__type(value, __u64[8]);	/* one cache line each */
} hs_counts SEC(".maps");

static __always_inline void hs_count(__u32 slot)
{
	__u64 *c = bpf_map_lookup_elem(&hs_counts, &slot);

	if (c)
		c[0] += 1;
}
#define HS_COUNT() hs_count(__COUNTER__ % HS_SLOTS)
#define BODY_NS(ns)                                     \
	do {                                            \
		__u64 t = bpf_ktime_get_ns();           \
		__u32 inum = (ns);                      \
		asm volatile("" : : "r"(t), "r"(inum)); \
		HS_COUNT();                             \
	} while (0)
#else
#define NAME(n) st_##n
#define HS_COUNT() do { } while (0)
#endif
#define BODY_STAMP(ns, skb)                                             \
	do {                                                            \
		__u64 t = bpf_ktime_get_tai_ns();                       \
		__u32 inum = (ns);                                      \
		__s64 stamp = (skb)->tstamp;                            \
		__u8 type = BPF_CORE_READ_BITFIELD((skb), tstamp_type); \
		asm volatile("" : : "r"(t), "r"(inum), "r"(stamp),      \
			     "r"(type));                                \
		HS_COUNT();                                             \
	} while (0)
#elif defined(REF_NETNS)
#define NAME(n) ns_##n
#elif defined(REF_CLOCK)
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
#if defined(REF_NETNS) || defined(REF_STAMP) || defined(REF_HIST) || defined(REF_RING) || \
    defined(REF_FLOW)
#ifndef BODY_NS
#define BODY_NS(ns)                                     \
	do {                                            \
		__u64 t = bpf_ktime_get_ns();           \
		__u32 inum = (ns);                      \
		asm volatile("" : : "r"(t), "r"(inum)); \
	} while (0)
#endif
static __always_inline __u32 dev_ns(const struct sk_buff *skb)
{
	struct net_device *dev = skb->dev;

	return dev ? dev->nd_net.net->ns.inum : 0;
}

static __always_inline __u32 sk_ns(const struct sock *sk)
{
	return sk ? sk->__sk_common.skc_net.net->ns.inum : 0;
}
#else
#define BODY_NS(ns) BODY()
#endif

#ifndef BODY_STAMP
#define BODY_STAMP(ns, skb) BODY_NS(ns)
#endif

/* The flow reference replaces each hook's body; the others keep the
 * stamp body at the three latency hooks and the namespace body elsewhere. */
#ifdef BODY_SKB
#define BODY_SKB_NS(ns, skb) BODY_SKB(ns, skb)
#define BODY_SK_NS(ns, sk) BODY_SK(ns, sk)
#else
#define BODY_SKB_STAMP(ns, skb) BODY_STAMP(ns, skb)
#define BODY_SKB_NS(ns, skb) BODY_NS(ns)
#define BODY_SK_STAMP(ns, sk, skb) BODY_STAMP(ns, skb)
#define BODY_SK_NS(ns, sk) BODY_NS(ns)
#endif
/* The reader's two hooks: what the others do there, unless the record
 * reference says more. */
#ifndef BODY_SK_COPY
#define BODY_SK_COPY(ns, sk, skb) BODY_SK_STAMP(ns, sk, skb)
#define BODY_SK_READ(ns, sk) BODY_SK_NS(ns, sk)
#endif

/* An indirection, so that NAME() is expanded before BPF_PROG pastes it. */
#define PROG(n, ...) BPF_PROG(n, __VA_ARGS__)

SEC("tp_btf/netif_receive_skb")
int PROG(NAME(stack_entry), struct sk_buff *skb)
{
	BODY_SKB_STAMP(dev_ns(skb), skb);
	return 0;
}

SEC("tp_btf/tcp_probe")
int PROG(NAME(tcp_input), struct sock *sk, struct sk_buff *skb)
{
	BODY_SK_STAMP(sk_ns(sk), sk, skb);
	return 0;
}

SEC("tp_btf/sk_data_ready")
int PROG(NAME(data_ready), struct sock *sk)
{
	BODY_SK_NS(sk_ns(sk), sk);
	return 0;
}

SEC("tp_btf/skb_copy_datagram_iovec")
int PROG(NAME(copy), struct sk_buff *skb, int len)
{
	BODY_SK_COPY(sk_ns(skb->sk), skb->sk, skb);
	return 0;
}

SEC("tp_btf/sock_recv_length")
int PROG(NAME(read_done), struct sock *sk, int ret, int flags)
{
	BODY_SK_READ(sk_ns(sk), sk);
	return 0;
}

SEC("tp_btf/kfree_skb")
int PROG(NAME(kfree_skb), struct sk_buff *skb, void *location,
	 enum skb_drop_reason reason, struct sock *rx_sk)
{
	BODY_SKB_NS(dev_ns(skb), skb);
	return 0;
}
