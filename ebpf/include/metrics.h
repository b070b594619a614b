/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * What the metrics program (ebpf/metrics.bpf.c) keeps in its maps, shared
 * with the agent's reader (tracer-agent/src/metrics/), which takes every
 * number here from the skeleton's copy of these enums.
 */
#ifndef TRACER_METRICS_H
#define TRACER_METRICS_H

/* The histograms, one per hook: RX latency since the skb's RX stamp at
 * three receive-path hooks, and the time between TX timestamping stages
 * of one skb. */
enum nt_metric_hook {
	NT_HOOK_RX_STACK_ENTRY = 0,	/* net:netif_receive_skb */
	NT_HOOK_RX_TCP_INPUT = 1,	/* tcp:tcp_probe */
	NT_HOOK_RX_COPY = 2,		/* skb:skb_copy_datagram_iovec */
	NT_HOOK_TX_SENDMSG_SCHED = 3,	/* SENDMSG -> SCHED */
	NT_HOOK_TX_SCHED_SND_SW = 4,	/* SCHED -> SND_SW */
	NT_HOOK_TX_SND_SW_ACK = 5,	/* SND_SW -> ACK */
	NT_HOOK_MAX = 6,
};

/* Counted events (struct nt_count_key.kind); `detail` says more. */
enum nt_count_kind {
	NT_COUNT_DROP = 0,		/* detail: skb drop reason */
	NT_COUNT_RETRANSMIT = 1,	/* detail: 0 */
	NT_COUNT_RESET_SENT = 2,	/* detail: 0 */
	NT_COUNT_RESET_RECEIVED = 3,	/* detail: 0 */
	NT_COUNT_RCVQUEUE_FULL = 4,	/* detail: 0 */
	NT_COUNT_MEM_LIMIT = 5,		/* detail: SK_MEM_SEND 0, SK_MEM_RECV 1 */
	NT_COUNT_KIND_MAX = 6,
};

/* What the program could not measure or keep, by reason. */
enum nt_metric_error {
	NT_MERR_NO_RX_STAMP = 0,	/* skb without an RX stamp: not observed */
	NT_MERR_FUTURE_STAMP = 1,	/* RX stamp after now (clock stepped) */
	NT_MERR_SERIES_FULL = 2,	/* --metrics-by: no room for a new label set */
	NT_MERR_COUNTS_FULL = 3,	/* no room for a new counter key */
	NT_MERR_TX_TAG = 4,		/* TX timestamping tag refused */
	NT_MERR_TX_INFLIGHT = 5,	/* no room to remember a sendmsg */
	NT_MERR_MAX = 6,
};

/* Drop reasons counted in a per-CPU array (one slot, one inlined lookup,
 * no hash); a reason at or above it (a subsystem's, with high bits set)
 * or a drop labelled by netns goes to the `counts` hash. The kernel has
 * about 120 reasons of its own. */
#define NT_DROP_REASONS 256

struct nt_drops {
	__u64 n[NT_DROP_REASONS];
};

/* Key of a histogram series when grouped (--metrics-by netns,iface);
 * a field that is not grouped by is 0. */
struct nt_hist_key {
	__u32 hook;
	__u32 netns;
	__u32 ifindex;
	__u32 _pad;
};

struct nt_count_key {
	__u32 kind;
	__u32 detail;
	__u32 netns;
	__u32 _pad;
};

#endif /* TRACER_METRICS_H */
