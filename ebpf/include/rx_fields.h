/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The rx record's fields that come from the skb and the reading task,
 * loaded one way for the rx probe (rx.bpf.c) and for the bench's record
 * reference (ref/rx_reference.bpf.c -DREF_RECORD), so that the reference
 * costs what the probe's loads cost. Include after tracer.h and the BPF
 * headers (bpf_core_cast, BPF_CORE_READ_BITFIELD).
 */
#ifndef TRACER_RX_FIELDS_H
#define TRACER_RX_FIELDS_H

/* The skb's own stamps: software RX stamp (REALTIME unless tstamp_type
 * says otherwise) and the NIC's hardware stamp. */
static __always_inline void fill_stamps(struct rx_record *r,
					const struct sk_buff *skb)
{
	struct skb_shared_info *shinfo;

	r->rx_stamp_ns = skb->tstamp;
	r->tstamp_type = BPF_CORE_READ_BITFIELD(skb, tstamp_type);
	shinfo = bpf_core_cast(skb->head + skb->end, struct skb_shared_info);
	r->hw_ns = shinfo->hwtstamps.hwtstamp;
}

/* The reader: this task, at the application stages. Direct loads from the
 * task (bpf_get_current_comm alone cost about 170 ns here); a rename racing
 * with the copy may tear the name, as it may with the helper. */
static __always_inline void fill_task(struct rx_record *r,
				      const struct task_struct *task)
{
	r->pid = task->tgid;
	r->tid = task->pid;
	*(__u64 *)r->comm = *(const __u64 *)task->comm;
	*(__u64 *)(r->comm + 8) = *(const __u64 *)(task->comm + 8);
}

#endif /* TRACER_RX_FIELDS_H */
