/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The TX side of --sample-every, shared by the tx probe (which records
 * the tagged sendmsgs) and the metrics program's TX stage histograms
 * (which tag the same ones when both run, so neither sees callbacks of
 * skbs the other did not choose).
 *
 * Include after kernel.h, the libbpf headers and sample.h.
 */
#ifndef TRACER_TX_SAMPLE_H
#define TRACER_TX_SAMPLE_H

/* Sampling (--sample-every N, rule in sample.h): the sendmsg is tagged
 * iff the byte its stamp will report (tskey = seq + len - 1 of the tail
 * skb, as bpf_sock_ops_enable_tx_tstamp sets it) lies in a sampled granule
 * of the flow, so the receiver's rx probe, deciding from the same flow and
 * sequence numbers, records the skbs that carry it. Untagged calls cost two
 * hashes, with no output. */
static __always_inline bool tx_sampled_out(struct bpf_sock_ops *skops,
					   struct bpf_sock_ops_kern *k,
					   __u64 threshold)
{
	struct sk_buff *skb = k->skb;
	__u32 s[4], d[4], seq, len, last;
	__u16 dport;
	__u64 flow;

	if (threshold >= NT_SAMPLE_ALL)
		return false;
	if (!skb)
		return true;
	dport = bpf_ntohl(skops->remote_port);
	seq = *(__u32 *)skb->cb;	/* TCP_SKB_CB(skb)->seq */
	len = skb->len;
	last = len ? seq + len - 1 : seq;
	if (skops->family != AF_INET6) {
		flow = nt_sample_flow4(skops->local_ip4, skops->remote_ip4,
				       skops->local_port, dport);
		return !nt_sample_byte(flow, last, threshold);
	}
	/* Real stack arrays (the asm takes their address), filled by word:
	 * else clang merges the context loads into one load through a moved
	 * context pointer, which the verifier refuses. */
	asm volatile("" : : "r"(s), "r"(d) : "memory");
	s[0] = skops->local_ip6[0];
	s[1] = skops->local_ip6[1];
	s[2] = skops->local_ip6[2];
	s[3] = skops->local_ip6[3];
	d[0] = skops->remote_ip6[0];
	d[1] = skops->remote_ip6[1];
	d[2] = skops->remote_ip6[2];
	d[3] = skops->remote_ip6[3];
	asm volatile("" : : "r"(s), "r"(d) : "memory");
	flow = nt_sample_flow(s, d, skops->local_port, dport);
	return !nt_sample_byte(flow, last, threshold);
}

#endif /* TRACER_TX_SAMPLE_H */
