/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The few kernel types the probes use, written by hand instead of a full
 * vmlinux.h: small, reviewable, and portable through CO-RE. Kernel-internal
 * structs carry preserve_access_index, so only the named fields must exist
 * on the running kernel; their offsets are relocated at load time.
 * UAPI context structs (struct bpf_sock_ops) are ABI and keep their layout.
 */
#ifndef TRACER_KERNEL_H
#define TRACER_KERNEL_H

typedef unsigned char __u8;
typedef signed char __s8;
typedef unsigned short __u16;
typedef short __s16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u64 __be64;
typedef __u32 __wsum;
typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;
typedef _Bool bool;
#define true 1
#define false 0

/* UAPI (include/uapi/linux/bpf.h). */
enum bpf_map_type {
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_HASH = 5,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};

#define BPF_NOEXIST 1
#define BPF_F_NO_PREALLOC (1U << 0)
#define BPF_LOCAL_STORAGE_GET_F_CREATE (1ULL << 0)
#define BPF_F_MMAPABLE (1U << 10)
#define BPF_RB_FORCE_WAKEUP (1ULL << 1)

enum {
	BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB = 4,
	BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB = 5,
	/* BPF TX timestamping, Linux >= 6.15. */
	BPF_SOCK_OPS_TSTAMP_SCHED_CB = 16,
	BPF_SOCK_OPS_TSTAMP_SND_SW_CB = 17,
	BPF_SOCK_OPS_TSTAMP_SND_HW_CB = 18,
	BPF_SOCK_OPS_TSTAMP_ACK_CB = 19,
	BPF_SOCK_OPS_TSTAMP_SENDMSG_CB = 20,
};

#define SOL_SOCKET 1
#define SK_BPF_CB_FLAGS 1009
#define SK_BPF_CB_TX_TIMESTAMPING 1
#define AF_INET 2
#define AF_INET6 10

struct bpf_sock;

#define __bpf_md_ptr(type, name)	\
union {					\
	type name;			\
	__u64 :64;			\
} __attribute__((aligned(8)))

/* Program context of sockops programs: UAPI layout, rewritten by the verifier. */
struct bpf_sock_ops {
	__u32 op;
	union {
		__u32 args[4];
		__u32 reply;
		__u32 replylong[4];
	};
	__u32 family;
	__u32 remote_ip4;
	__u32 local_ip4;
	__u32 remote_ip6[4];
	__u32 local_ip6[4];
	__u32 remote_port;
	__u32 local_port;
	__u32 is_fullsock;
	__u32 snd_cwnd;
	__u32 srtt_us;
	__u32 bpf_sock_ops_cb_flags;
	__u32 state;
	__u32 rtt_min;
	__u32 snd_ssthresh;
	__u32 rcv_nxt;
	__u32 snd_nxt;
	__u32 snd_una;
	__u32 mss_cache;
	__u32 ecn_flags;
	__u32 rate_delivered;
	__u32 rate_interval_us;
	__u32 packets_out;
	__u32 retrans_out;
	__u32 total_retrans;
	__u32 segs_in;
	__u32 data_segs_in;
	__u32 segs_out;
	__u32 data_segs_out;
	__u32 lost_out;
	__u32 sacked_out;
	__u32 sk_txhash;
	__u64 bytes_received;
	__u64 bytes_acked;
	__bpf_md_ptr(struct bpf_sock *, sk);
	__bpf_md_ptr(void *, skb_data);
	__bpf_md_ptr(void *, skb_data_end);
	__u32 skb_len;
	__u32 skb_tcp_flags;
	__u64 skb_hwtstamp;
};

/* Kernel internals, relocated by CO-RE. */
struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct net {
	struct ns_common ns;
} __attribute__((preserve_access_index));

typedef struct {
	struct net *net;
} possible_net_t;

struct in6_addr {
	union {
		__u8 u6_addr8[16];
	} in6_u;
} __attribute__((preserve_access_index));

enum sk_rst_reason {
	SK_RST_REASON_NOT_SPECIFIED = 0,
};

struct proto;

typedef struct {
	__s64 counter;
} atomic64_t;

struct sock_common {
	atomic64_t skc_cookie;
	__be32 skc_daddr;
	__be32 skc_rcv_saddr;
	__be16 skc_dport;
	__u16 skc_num;
	unsigned short skc_family;
	volatile unsigned char skc_state;
	possible_net_t skc_net;
	struct in6_addr skc_v6_daddr;
	struct in6_addr skc_v6_rcv_saddr;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
	__u16 sk_protocol;
} __attribute__((preserve_access_index));

struct tcp_sock {
	__u32 copied_seq;
	__u32 rcv_nxt;
	__u32 snd_nxt;
} __attribute__((preserve_access_index));

struct net_device {
	int ifindex;
	possible_net_t nd_net;
} __attribute__((preserve_access_index));

struct nsproxy {
	struct net *net_ns;
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	int tgid;
	char comm[16];
	struct nsproxy *nsproxy;
} __attribute__((preserve_access_index));

typedef __s64 ktime_t;

/* x86_64: the user registers a syscall saved (raw_syscalls:sys_enter/exit);
 * orig_ax holds the syscall number until the exit. The kernel's cs is a
 * u16 in an anonymous union (FRED), which CO-RE finds by name. */
struct pt_regs {
	unsigned long orig_ax;
	unsigned short cs;
} __attribute__((preserve_access_index));

struct sk_buff {
	struct net_device *dev;
	struct sock *sk;
	ktime_t tstamp;
	char cb[48];
	unsigned int len;
	__u8 tstamp_type: 2;
	int skb_iif;
	__be16 protocol;
	__u16 transport_header;
	__u16 network_header;
	unsigned char *head;
	unsigned int end;	/* offset from head on 64-bit kernels */
} __attribute__((preserve_access_index));

struct skb_shared_hwtstamps {
	ktime_t hwtstamp;
} __attribute__((preserve_access_index));

struct skb_shared_info {
	__u32 tskey;
	struct skb_shared_hwtstamps hwtstamps;
} __attribute__((preserve_access_index));

/* skb:kfree_skb's reason values the probe filters on (not a name table:
 * names come from the running kernel's BTF in user space). */
enum skb_drop_reason {
	SKB_NOT_DROPPED_YET = 0,
	SKB_CONSUMED = 1,
};

/* Packet headers: packet.h. */
#include "packet.h"

struct bpf_sock_ops_kern {
	struct sock *sk;
	struct sk_buff *skb;
} __attribute__((preserve_access_index));

#endif /* TRACER_KERNEL_H */
