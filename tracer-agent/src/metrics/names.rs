//! The names the kernel's numbers get in the exposition: hooks,
//! counted kinds and what could not be observed, indexed by the enums of
//! `ebpf/include/metrics.h`.

/// Histograms by `enum nt_metric_hook` (metrics.h): which metric and the
/// value of its label.
pub const HOOKS: [HookName; 6] = [
    HookName::Rx("netif_receive_skb"),
    HookName::Rx("tcp_probe"),
    HookName::Rx("skb_copy_datagram_iovec"),
    HookName::Tx("sendmsg_to_sched"),
    HookName::Tx("sched_to_snd_sw"),
    HookName::Tx("snd_sw_to_ack"),
];

/// A histogram's metric and label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookName {
    /// `nettrace_rx_latency_seconds{hook=...}`.
    Rx(&'static str),
    /// `nettrace_tx_stage_latency_seconds{stage=...}`.
    Tx(&'static str),
}

/// Counted kinds by `enum nt_count_kind`.
pub const COUNT_KINDS: [&str; 6] = [
    "drop",
    "retransmit",
    "reset_sent",
    "reset_received",
    "rcvqueue_full",
    "mem_limit",
];

/// What the program could not observe, by `enum nt_metric_error`.
pub const ERRORS: [&str; 6] = [
    "no_rx_stamp",
    "future_rx_stamp",
    "series_full",
    "counters_full",
    "tx_tag_refused",
    "tx_inflight_full",
];
