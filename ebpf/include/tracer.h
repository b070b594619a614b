/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Records the probes write into their per-CPU slot ring, and the enums they
 * use. This header is the single source of truth for both: the agent's Rust
 * mirrors are generated from the BTF of each compiled probe (the libbpf-rs
 * skeleton's `types` module, see tracer-agent/build.rs), and compile-time
 * asserts in tracer-agent/src/probes/ tie them to the wire codec.
 */
#ifndef TRACER_H
#define TRACER_H

/* Every record starts with this header so several probes can share one ring. */
struct record_hdr {
	__u16 kind;	/* enum record_kind */
	__u16 len;	/* whole record, header included */
	/* Low 32 bits of the slot's sequence number + 1, written last: the
	 * consumer reads a slot only once this matches what it expects. */
	__u32 commit;
};

enum record_kind {
	RECORD_TX = 1,
	RECORD_RX = 2,
	RECORD_DROP = 3,
	RECORD_TCP = 4,
};

/* Values of tx_record.stage; the same numbers as on the wire. */
enum tx_stage {
	TX_SENDMSG = 0,
	TX_SCHED = 1,
	TX_SND_SW = 2,
	TX_SND_HW = 3,
	TX_ACK = 4,
	TX_STAGE_MAX = 5,	/* number of stages, not a stage */
};

/* One BPF TX timestamping callback. */
struct tx_record {
	struct record_hdr hdr;
	__u64 mono_ns;		/* bpf_ktime_get_ns() */
	__u64 hw_ns;		/* NIC stamp at SND_HW, else 0 */
	__u64 cookie;		/* socket cookie */
	__u32 tskey;		/* skb_shinfo(skb)->tskey */
	__u32 seq;		/* first byte the skb holds now (TX_F_RANGE) */
	__u32 netns;		/* netns inode */
	__u32 cpu;
	__u32 pid;		/* tgid, SENDMSG only */
	__u32 tid;		/* SENDMSG only */
	__u8 stage;		/* enum tx_stage */
	__u8 family;		/* 4 or 6 */
	__u16 sport;		/* host order */
	__u16 dport;		/* host order */
	__u8 flags;		/* TX_F_* */
	__u8 _pad;
	__u8 saddr[16];
	__u8 daddr[16];
	char comm[16];
	__u32 end_seq;		/* after the last byte it holds now (TX_F_RANGE) */
	__u32 _pad2;
};

/* Bits of tx_record.flags; the same values as the wire's tx_flags. */
enum tx_flag {
	TX_F_RANGE = 1,	/* seq..end_seq read from the skb at this callback */
	TX_F_SENT = 2,	/* SENDMSG: the tagged skb was already transmitted */
};

/* Indexes of the per-CPU counters (slot_ring.h: struct slot_cpu). */
enum counter {
	CTR_RB_LOST = 0,	/* no slot could be had: events lost */
	CTR_SETSOCKOPT_ERR = 1,	/* SK_BPF_CB_FLAGS refused (kernel lacks it?) */
	CTR_TAG_ERR = 2,	/* bpf_sock_ops_enable_tx_tstamp failed */
	CTR_SOCKETS = 3,	/* sockets enabled for TX timestamping */
	CTR_SENDMSG_SEEN = 4,	/* sendmsg calls seen while sampling */
	CTR_MAX = 5,
};

/* One skb freed with a drop reason (skb:kfree_skb), in the traced netns. */
struct drop_record {
	struct record_hdr hdr;
	__u64 mono_ns;		/* bpf_ktime_get_ns() */
	__u64 location;		/* kernel address that freed it (tracepoint's location) */
	__u32 reason;		/* enum skb_drop_reason, as the kernel numbers it */
	__u32 netns;		/* netns inode (device's, else socket's) */
	__u32 ifindex;		/* skb->dev's ifindex, 0 without a device */
	__u32 cpu;
	__u32 len;		/* skb->len */
	__u16 protocol;		/* skb->protocol, host order (0x0800 IPv4, 0x86dd IPv6) */
	__u8 family;		/* 4, 6, or 0 when not IP (flow fields are then 0) */
	__u8 l4proto;		/* IP protocol (6 TCP, 17 UDP, ...), 0 when not IP */
	__u16 sport;		/* host order; 0 unless TCP or UDP */
	__u16 dport;		/* host order */
	__u32 _pad;
	__u8 saddr[16];		/* IPv4 in the first 4 bytes, or IPv6 */
	__u8 daddr[16];
};

/* EtherType of the frames of a nettrace live interface (a TAP that
 * tracer-sink --live-iface writes every event into; the codec's
 * LIVE_ETHERTYPE). A TAP's frames are *received* by its host: the
 * netif_receive_skb tracepoint, then a drop on kfree_skb, since no handler
 * knows the EtherType. Every probe that sees skbs ignores this protocol
 * before anything else, or a live view on a traced host would trace its
 * own frames, one more event for each. */
enum live_ethertype {
	NT_LIVE_ETHERTYPE = 0x88B5,
};

/* Indexes of the drops probe's per-CPU counters (slot_ring.h: struct slot_cpu). */
enum drop_counter {
	DROP_CTR_LOST = 0,	/* no slot could be had: events lost */
	DROP_CTR_SEEN = 1,	/* kfree_skb calls with a drop reason, any netns */
	DROP_CTR_NO_NETNS = 2,	/* skbs with neither device nor socket: not attributable */
	DROP_CTR_MAX = 3,
};

/* Values of tcp_record.anomaly; the same numbers as on the wire. */
enum tcp_anomaly {
	TCP_RETRANSMIT = 0,	/* tcp:tcp_retransmit_skb */
	TCP_RESET_SENT = 1,	/* tcp:tcp_send_reset */
	TCP_RESET_RECEIVED = 2,	/* tcp:tcp_receive_reset */
	TCP_RCVQUEUE_FULL = 3,	/* sock:sock_rcvqueue_full */
	TCP_EXCEED_BUF_LIMIT = 4,	/* sock:sock_exceed_buf_limit */
	TCP_ANOMALY_MAX = 5,	/* number of anomalies, not one */
};

/* One TCP (or socket memory) anomaly, from the socket's point of view:
 * saddr/sport local, daddr/dport remote. */
struct tcp_record {
	struct record_hdr hdr;
	__u64 mono_ns;		/* bpf_ktime_get_ns() */
	__u64 cookie;		/* socket cookie, 0 without a socket */
	__u32 seq;		/* RETRANSMIT: first sequence number of the skb */
	__u32 end_seq;		/* RETRANSMIT: sequence number after its last byte */
	__u32 netns;
	__u32 cpu;
	__u32 detail;		/* per anomaly: retransmit err, reset reason,
				 * length of the skb that did not fit, or
				 * SK_MEM_SEND(0)/SK_MEM_RECV(1) */
	__u8 anomaly;		/* enum tcp_anomaly */
	__u8 family;		/* 4, 6, or 0 when unknown */
	__u8 state;		/* TCP state (TCP_ESTABLISHED = 1, ...), 0 without a socket */
	__u8 _pad;
	__u16 sport;		/* local port, host order */
	__u16 dport;		/* remote port, host order */
	__u8 saddr[16];
	__u8 daddr[16];
	__u32 _pad2;		/* explicit tail padding to 8 bytes */
};

/* Indexes of the tcp probe's per-CPU counters (slot_ring.h: struct slot_cpu). */
enum tcp_counter {
	TCP_CTR_LOST = 0,	/* no slot could be had: events lost */
	TCP_CTR_MAX = 1,
};

/* Values of rx_record.stage, in the order an skb meets them; the same
 * numbers as on the wire. */
enum rx_stage {
	RX_STACK_ENTRY = 0,	/* net:netif_receive_skb: after driver and GRO */
	RX_TCP_INPUT = 1,	/* tcp:tcp_probe: established-path TCP input */
	RX_DATA_READY = 2,	/* sock:sk_data_ready: reader woken (no skb) */
	RX_COPY = 3,		/* skb:skb_copy_datagram_iovec: copy to the app */
	RX_READ_DONE = 4,	/* sock:sock_recv_length: recvmsg returns (no skb) */
	RX_STAGE_MAX = 5,	/* number of stages, not a stage */
};

/* One RX tracepoint hit. The flow is as the packet travelled: saddr/sport
 * is the sender (remote), daddr/dport this host (local). */
struct rx_record {
	struct record_hdr hdr;
	__u64 mono_ns;		/* bpf_ktime_get_ns() */
	__u64 rx_stamp_ns;	/* skb->tstamp, CLOCK_REALTIME ns; 0 if unset/no skb */
	__u64 hw_ns;		/* skb_hwtstamps(skb)->hwtstamp, else 0 */
	__u64 cookie;		/* socket cookie at socket stages, else 0 */
	__u32 seq;		/* TCP seq of the skb's first byte (0: none) */
	__u32 end_seq;		/* TCP seq after its last byte (rcv_nxt / copied_seq at DATA_READY / READ_DONE) */
	__u32 len;		/* payload bytes (skb->len, copied or read bytes) */
	__u32 netns;		/* netns inode */
	__u32 ifindex;		/* receiving device, 0 if unknown */
	__u32 cpu;
	__u32 pid;		/* tgid at COPY and READ_DONE, else 0 */
	__u32 tid;		/* COPY and READ_DONE, else 0 */
	__u8 stage;		/* enum rx_stage */
	__u8 family;		/* 4 or 6 */
	__u8 protocol;		/* IPPROTO_TCP (6), IPPROTO_UDP (17), else 0 */
	__u8 tstamp_type;	/* skb->tstamp_type: 0 REALTIME, 1 MONO, 2 TAI */
	__u16 sport;		/* host order */
	__u16 dport;		/* host order */
	__u8 saddr[16];
	__u8 daddr[16];
	char comm[16];		/* reader's task name at COPY and READ_DONE */
};

/* Indexes of the rx probe's per-CPU counters (slot_ring.h: struct slot_cpu). */
enum rx_counter {
	RX_CTR_LOST = 0,	/* no slot could be had: events lost */
	RX_CTR_READ_ERR = 1,	/* IP header unreadable: skb not recorded */
	RX_CTR_MAX = 2,
};

#endif /* TRACER_H */
