// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * RX probe: five tp_btf programs on the receive path's tracepoints, one
 * record per hit, so an skb can be followed from the stack's entry to the
 * application's read:
 *   STACK_ENTRY  net:netif_receive_skb(skb)            flow/seq from headers
 *   TCP_INPUT    tcp:tcp_probe(sk, skb)                seq from TCP_SKB_CB
 *   DATA_READY   sock:sk_data_ready(sk)                no skb: end_seq = rcv_nxt
 *   COPY         skb:skb_copy_datagram_iovec(skb, len) flow from headers, reader
 *   READ_DONE    sock:sock_recv_length(sk, ret, flags) no skb: end_seq = copied_seq
 * tp_btf (not raw_tp): arguments are typed BTF pointers, read with direct
 * loads instead of helper calls.
 *
 * Every program filters by the traced netns first and returns before any
 * output; only IPv4/IPv6 traffic is recorded. Records go into the same kind
 * of per-CPU slot ring as the TX probe's (see tx.bpf.c).
 */
#include "kernel.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_tracing.h>
#include "tracer.h"
#include "filter.h"
#include "sample.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Configuration, set by the agent between open and load. */
const volatile __u32 target_netns = 0;	/* netns inode to trace; 0 = all */
const volatile __u64 sample_threshold = NT_SAMPLE_ALL; /* sample.h; ALL: no sampling */

#define SLOT_RECORD struct rx_record
#define SLOT_COUNTERS RX_CTR_MAX
#include "slot_ring.h"

static __always_inline bool other_netns(__u32 netns)
{
	return target_netns && netns != target_netns;
}

static __always_inline __u32 sk_netns(const struct sock *sk)
{
	return sk->__sk_common.skc_net.net->ns.inum;
}

static __always_inline bool sk_is_inet(const struct sock *sk)
{
	unsigned short f = sk->__sk_common.skc_family;

	return f == AF_INET || f == AF_INET6;
}

/* Take the next slot of this CPU's ring; NULL (counted) if none. */
static __always_inline struct rx_record *reserve(__u64 *seq_out)
{
	__u32 cpu;

	return slot_take(RX_CTR_LOST, seq_out, &cpu);
}

/* Everything but the flow, the sequence range and the length: zeroed or
 * common values the stage-specific code then overwrites. */
static __always_inline void fill_common(struct rx_record *r, __u8 stage,
					__u32 netns)
{
	r->hdr.kind = RECORD_RX;
	r->hdr.len = sizeof(*r);
	r->mono_ns = bpf_ktime_get_ns();
	r->rx_stamp_ns = 0;
	r->hw_ns = 0;
	r->cookie = 0;
	r->seq = 0;
	r->end_seq = 0;
	r->len = 0;
	r->netns = netns;
	r->ifindex = 0;
	r->cpu = bpf_get_smp_processor_id();
	r->pid = 0;
	r->tid = 0;
	r->stage = stage;
	r->protocol = 0;
	r->tstamp_type = 0;
	__builtin_memset(r->comm, 0, sizeof(r->comm));
}

/* The reader: this task, at the application stages. */
static __always_inline void fill_task(struct rx_record *r)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	r->pid = pid_tgid >> 32;
	r->tid = (__u32)pid_tgid;
	if (bpf_get_current_comm(r->comm, sizeof(r->comm)))
		__builtin_memset(r->comm, 0, sizeof(r->comm));
}

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

/* Flow from the socket, packet direction: remote -> local. */
static __always_inline void fill_sock_flow(struct rx_record *r,
					   const struct sock *sk)
{
	const struct sock_common *c = &sk->__sk_common;

	r->sport = bpf_ntohs(c->skc_dport);
	r->dport = c->skc_num;
	r->protocol = (__u8)sk->sk_protocol;
	if (c->skc_family == AF_INET6) {
		r->family = 6;
		__builtin_memcpy(r->saddr, c->skc_v6_daddr.in6_u.u6_addr8, 16);
		__builtin_memcpy(r->daddr, c->skc_v6_rcv_saddr.in6_u.u6_addr8, 16);
	} else {
		r->family = 4;
		__builtin_memset(r->saddr, 0, sizeof(r->saddr));
		__builtin_memset(r->daddr, 0, sizeof(r->daddr));
		((__u32 *)r->saddr)[0] = c->skc_daddr;
		((__u32 *)r->daddr)[0] = c->skc_rcv_saddr;
	}
}

/* Publish the record: the commit word last. */
static __always_inline void commit(struct rx_record *r, __u64 seq)
{
	slot_commit(&r->hdr, seq);
}

/* Flow, protocol and TCP range from the skb's own headers (network header
 * set: from stack entry on). IP tot_len covers a whole GRO-merged skb.
 * Returns nonzero if a header could not be read (the flow stays 0). */
static __always_inline int fill_skb_flow(struct rx_record *r,
					 const struct sk_buff *skb, __u16 proto)
{
	unsigned char *nh = skb->head + skb->network_header;
	__u32 l4off, l4len, tot;
	__u8 l4proto;

	r->sport = 0;
	r->dport = 0;
	__builtin_memset(r->saddr, 0, sizeof(r->saddr));
	__builtin_memset(r->daddr, 0, sizeof(r->daddr));
	if (proto == ETH_P_IP) {
		struct iphdr ip;

		r->family = 4;
		if (bpf_probe_read_kernel(&ip, sizeof(ip), nh))
			return -1;
		((__u32 *)r->saddr)[0] = ip.saddr;
		((__u32 *)r->daddr)[0] = ip.daddr;
		l4off = (ip.ihl_version & 0xf) * 4;
		tot = bpf_ntohs(ip.tot_len);
		l4len = tot > l4off ? tot - l4off : 0;
		l4proto = ip.protocol;
	} else {
		struct ipv6hdr ip6;

		r->family = 6;
		if (bpf_probe_read_kernel(&ip6, sizeof(ip6), nh))
			return -1;
		__builtin_memcpy(r->saddr, ip6.saddr.in6_u.u6_addr8, 16);
		__builtin_memcpy(r->daddr, ip6.daddr.in6_u.u6_addr8, 16);
		/* Extension headers are not followed: the L4 fields stay 0. */
		l4off = sizeof(ip6);
		l4len = bpf_ntohs(ip6.payload_len);
		l4proto = ip6.nexthdr;
	}
	if (l4proto == IPPROTO_TCP) {
		struct tcphdr th;
		__u32 doff, payload;

		if (bpf_probe_read_kernel(&th, sizeof(th), nh + l4off))
			return -1;
		doff = (th.res1_doff >> 4) * 4;
		payload = l4len > doff ? l4len - doff : 0;
		r->protocol = IPPROTO_TCP;
		r->sport = bpf_ntohs(th.source);
		r->dport = bpf_ntohs(th.dest);
		r->seq = bpf_ntohl(th.seq);
		/* As TCP_SKB_CB: SYN and FIN take one sequence number each. */
		r->end_seq = r->seq + payload + (th.flags & 1) +
			     ((th.flags >> 1) & 1);
	} else if (l4proto == IPPROTO_UDP) {
		struct udphdr uh;

		if (bpf_probe_read_kernel(&uh, sizeof(uh), nh + l4off))
			return -1;
		r->protocol = IPPROTO_UDP;
		r->sport = bpf_ntohs(uh.source);
		r->dport = bpf_ntohs(uh.dest);
	}
	return 0;
}

/*
 * Sampling (--sample-every N; the rule and why in sample.h). TCP records
 * are kept iff their sequence range holds a byte of a sampled granule of
 * the flow (sender -> receiver, i.e. the packet's source -> destination,
 * the socket's remote -> local), the decision the sender's tx probe made
 * from the same numbers; stages without an skb decide by the last byte
 * they account for. Everything that is not TCP is kept: nothing on the
 * sender side is sampled to stay comparable with (BPF TX timestamping is
 * TCP-only), and a UDP datagram has no number that every stage sees.
 * One call per program, right after the netns filter.
 */

/* The socket's flow hash, data direction remote -> local. */
static __always_inline __u64 rx_sample_sk_flow(const struct sock *sk)
{
	const struct sock_common *c = &sk->__sk_common;
	__u32 s[4] = {}, d[4] = {};

	if (c->skc_family == AF_INET6) {
		__builtin_memcpy(s, c->skc_v6_daddr.in6_u.u6_addr8, 16);
		__builtin_memcpy(d, c->skc_v6_rcv_saddr.in6_u.u6_addr8, 16);
	} else {
		s[0] = c->skc_daddr;
		d[0] = c->skc_rcv_saddr;
	}
	return nt_sample_flow(s, d, bpf_ntohs(c->skc_dport), c->skc_num);
}

/* TCP_INPUT and COPY: the skb's TCP_SKB_CB range (TCP sockets only). */
static __always_inline bool rx_sampled_out_cb(const struct sock *sk,
					      const struct sk_buff *skb)
{
	if (sample_threshold >= NT_SAMPLE_ALL || sk->sk_protocol != IPPROTO_TCP)
		return false;
	return !nt_sample_range(rx_sample_sk_flow(sk), *(__u32 *)skb->cb,
				*(__u32 *)(skb->cb + 4), sample_threshold);
}

/* DATA_READY and READ_DONE: `after` is rcv_nxt or copied_seq, the
 * sequence number after the last byte the stage accounts for. */
static __always_inline bool rx_sampled_out_sk(const struct sock *sk,
					      bool read_done)
{
	const struct tcp_sock *tp;
	__u32 after;

	if (sample_threshold >= NT_SAMPLE_ALL || sk->sk_protocol != IPPROTO_TCP)
		return false;
	tp = bpf_core_cast(sk, struct tcp_sock);
	after = read_done ? tp->copied_seq : tp->rcv_nxt;
	return !nt_sample_byte(rx_sample_sk_flow(sk), after - 1,
			       sample_threshold);
}

/* STACK_ENTRY: no socket yet; flow and range from the headers (read again
 * by fill_skb_flow for a kept skb: the reads are paid twice only for the
 * sampled ones). Unreadable headers, fragments and IPv6 extension headers
 * are kept. */
static __always_inline bool rx_sampled_out_hdr(const struct sk_buff *skb,
					       __u16 proto)
{
	unsigned char *nh = skb->head + skb->network_header;
	__u32 s[4] = {}, d[4] = {}, l4off, l4len, payload, end;
	struct tcphdr th;

	if (sample_threshold >= NT_SAMPLE_ALL)
		return false;
	if (proto == ETH_P_IP) {
		struct iphdr ip;

		if (bpf_probe_read_kernel(&ip, sizeof(ip), nh) ||
		    ip.protocol != IPPROTO_TCP ||
		    (bpf_ntohs(ip.frag_off) & 0x1fff))
			return false;
		s[0] = ip.saddr;
		d[0] = ip.daddr;
		l4off = (ip.ihl_version & 0xf) * 4;
		l4len = bpf_ntohs(ip.tot_len);
		l4len = l4len > l4off ? l4len - l4off : 0;
	} else {
		struct ipv6hdr ip6;

		if (bpf_probe_read_kernel(&ip6, sizeof(ip6), nh) ||
		    ip6.nexthdr != IPPROTO_TCP)
			return false;
		__builtin_memcpy(s, ip6.saddr.in6_u.u6_addr8, 16);
		__builtin_memcpy(d, ip6.daddr.in6_u.u6_addr8, 16);
		l4off = sizeof(ip6);
		l4len = bpf_ntohs(ip6.payload_len);
	}
	if (bpf_probe_read_kernel(&th, sizeof(th), nh + l4off))
		return false;
	payload = (th.res1_doff >> 4) * 4;
	payload = l4len > payload ? l4len - payload : 0;
	/* As fill_skb_flow: SYN and FIN take one sequence number each. */
	end = bpf_ntohl(th.seq) + payload + (th.flags & 1) + ((th.flags >> 1) & 1);
	return !nt_sample_range(nt_sample_flow(s, d, bpf_ntohs(th.source),
					       bpf_ntohs(th.dest)),
				bpf_ntohl(th.seq), end, sample_threshold);
}

static __always_inline bool is_ip(__u16 proto)
{
	return proto == ETH_P_IP || proto == ETH_P_IPV6;
}

/* Stack entry: the skb as the driver and GRO hand it to the stack; no
 * socket yet, so the flow and TCP range come from the headers. */
SEC("tp_btf/netif_receive_skb")
int BPF_PROG(rx_stack_entry, struct sk_buff *skb)
{
	struct net_device *dev = skb->dev;
	struct rx_record *r;
	__u32 netns;
	__u16 proto;
	__u64 seq;

	if (!dev)
		return 0;
	netns = dev->nd_net.net->ns.inum;
	if (other_netns(netns))
		return 0;
	proto = bpf_ntohs(skb->protocol);
	if (!is_ip(proto) || rx_sampled_out_hdr(skb, proto))
		return 0;
	if (!skb_flow_matches(skb, proto))
		return 0;

	r = reserve(&seq);
	if (!r)
		return 0;
	fill_common(r, RX_STACK_ENTRY, netns);
	fill_stamps(r, skb);
	r->ifindex = dev->ifindex;
	r->len = skb->len;
	/* The slot is taken: on a read error publish it with what is known
	 * rather than leave a hole the reader would count as lost. */
	if (fill_skb_flow(r, skb, proto))
		count(RX_CTR_READ_ERR);
	commit(r, seq);
	return 0;
}

/* TCP input on the established path (tcp_rcv_established), segments of
 * every size, pure ACKs included (seq == end_seq). */
SEC("tp_btf/tcp_probe")
int BPF_PROG(rx_tcp_input, struct sock *sk, struct sk_buff *skb)
{
	struct rx_record *r;
	__u32 netns;
	__u64 seq;

	netns = sk_netns(sk);
	if (other_netns(netns) || rx_sampled_out_cb(sk, skb))
		return 0;
	if (!sk_flow_matches(sk, false))
		return 0;
	r = reserve(&seq);
	if (!r)
		return 0;
	fill_common(r, RX_TCP_INPUT, netns);
	fill_sock_flow(r, sk);
	fill_stamps(r, skb);
	r->cookie = bpf_get_socket_cookie(sk);
	r->ifindex = skb->skb_iif;
	r->len = skb->len;
	/* TCP_SKB_CB(skb): seq at 0, end_seq at 4. */
	r->seq = *(__u32 *)skb->cb;
	r->end_seq = *(__u32 *)(skb->cb + 4);
	commit(r, seq);
	return 0;
}

/* The reader is woken: no skb here. For TCP, end_seq is rcv_nxt, the
 * sequence number after the last byte now queued for the reader. */
SEC("tp_btf/sk_data_ready")
int BPF_PROG(rx_data_ready, struct sock *sk)
{
	struct rx_record *r;
	__u32 netns;
	__u64 seq;

	netns = sk_netns(sk);
	if (other_netns(netns) || !sk_is_inet(sk) ||
	    rx_sampled_out_sk(sk, false))
		return 0;
	if (!sk_flow_matches(sk, false))
		return 0;
	r = reserve(&seq);
	if (!r)
		return 0;
	fill_common(r, RX_DATA_READY, netns);
	fill_sock_flow(r, sk);
	r->cookie = bpf_get_socket_cookie(sk);
	if (sk->sk_protocol == IPPROTO_TCP)
		r->end_seq = bpf_core_cast(sk, struct tcp_sock)->rcv_nxt;
	commit(r, seq);
	return 0;
}

/* The application copies `len` bytes of this skb (the reader's task is
 * current). The flow comes from the skb's headers: a UDP socket may be
 * unconnected, and UDP queues skbs without skb->sk or skb->dev. The netns
 * is the owning socket's, else the reading task's (a UDP skb has no other
 * trace of it here); skbs that are not IP (netlink, unix) are skipped. */
SEC("tp_btf/skb_copy_datagram_iovec")
int BPF_PROG(rx_copy, struct sk_buff *skb, int len)
{
	struct sock *sk = skb->sk;
	struct rx_record *r;
	__u32 netns;
	__u16 proto;
	__u64 seq;

	if (sk) {
		if (!sk_is_inet(sk))
			return 0;
		netns = sk_netns(sk);
	} else {
		struct task_struct *task = bpf_get_current_task_btf();
		struct nsproxy *ns = task->nsproxy;

		/* NULL while the task exits. */
		if (!ns)
			return 0;
		netns = ns->net_ns->ns.inum;
	}
	if (other_netns(netns))
		return 0;
	proto = bpf_ntohs(skb->protocol);
	if (!is_ip(proto) || (sk && rx_sampled_out_cb(sk, skb)))
		return 0;
	if (!skb_flow_matches(skb, proto))
		return 0;
	r = reserve(&seq);
	if (!r)
		return 0;
	fill_common(r, RX_COPY, netns);
	/* A TCP socket knows its flow: direct loads instead of the header
	 * reads (three helper calls), the bulk of this hook's cost. */
	if (sk && sk->sk_protocol == IPPROTO_TCP)
		fill_sock_flow(r, sk);
	else if (fill_skb_flow(r, skb, proto))
		count(RX_CTR_READ_ERR);
	fill_stamps(r, skb);
	fill_task(r);
	r->ifindex = skb->skb_iif;
	r->len = len > 0 ? len : 0;
	if (sk) {
		/* skb->sk is an RCU pointer the cookie helper refuses: read the
		 * cookie the socket already has (TCP_INPUT or DATA_READY
		 * assigned it through the helper; 0 if no earlier stage ran). */
		r->cookie = sk->__sk_common.skc_cookie.counter;
		/* The control block holds tcp_skb_cb while TCP queues the skb;
		 * it is the right range also when TCP coalesced skbs. */
		if (sk->sk_protocol == IPPROTO_TCP) {
			r->seq = *(__u32 *)skb->cb;
			r->end_seq = *(__u32 *)(skb->cb + 4);
		}
	}
	commit(r, seq);
	return 0;
}

/* recvmsg returns `ret` bytes (or an error): no skb. For TCP, end_seq is
 * copied_seq, the sequence number after the last byte the reader has. */
SEC("tp_btf/sock_recv_length")
int BPF_PROG(rx_read_done, struct sock *sk, int ret, int flags)
{
	struct rx_record *r;
	__u32 netns;
	__u64 seq;

	netns = sk_netns(sk);
	if (other_netns(netns) || !sk_is_inet(sk) || ret <= 0 ||
	    rx_sampled_out_sk(sk, true))
		return 0;
	if (!sk_flow_matches(sk, false))
		return 0;
	r = reserve(&seq);
	if (!r)
		return 0;
	fill_common(r, RX_READ_DONE, netns);
	fill_sock_flow(r, sk);
	fill_task(r);
	r->cookie = bpf_get_socket_cookie(sk);
	r->len = ret;
	if (sk->sk_protocol == IPPROTO_TCP)
		r->end_seq = bpf_core_cast(sk, struct tcp_sock)->copied_seq;
	commit(r, seq);
	return 0;
}

/* Never written: exported so the skeleton generates the Rust mirrors of
 * struct rx_record and the enums of tracer.h the agent uses. */
struct rx_record rx_record_layout SEC(".bss") __attribute__((used));
enum record_kind rx_record_kind_values SEC(".bss") __attribute__((used));
enum rx_stage rx_stage_values SEC(".bss") __attribute__((used));
enum rx_counter rx_counter_values SEC(".bss") __attribute__((used));
