//! What the matcher holds between events: each TX skb, each recorded
//! transmission and each one waiting for its decision, and per flow both
//! ends' byte indexes.

use std::collections::BTreeMap;

use tracer_codec::sample;

use crate::flow::{FlowKey, SeqUnwrap};
use crate::input::HostId;
use crate::receiver::RxFlow;

/// A TX skb on its host: (host, socket cookie, tskey).
pub(super) type TxKey = (HostId, u64, u32);

/// What is known of one TX skb.
#[derive(Debug, Default)]
pub(super) struct TxSkb {
    /// SENDMSG time and first byte.
    pub(super) sendmsg: Option<(u64, u32)>,
    /// SENDMSG tagged an skb already sent: no first transmission of it
    /// was stamped.
    pub(super) tagged_sent: bool,
    /// A SCHED waiting for its SND_SW.
    pub(super) sched: u64,
    /// Transmissions so far.
    pub(super) sent: u32,
    /// Ids of its transmissions.
    pub(super) ids: Vec<u64>,
    pub(super) last_ns: u64,
}

/// A recorded transmission in its flow's byte index.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sent {
    /// First byte (unwrapped).
    pub(super) start: i64,
    /// Send time (global).
    pub(super) t: u64,
    /// Sending host.
    pub(super) host: HostId,
}

/// One transmission waiting for its decision.
#[derive(Debug, Clone)]
pub(super) struct Attempt {
    pub(super) id: u64,
    pub(super) key: TxKey,
    pub(super) flow: FlowKey,
    /// Send time: SND_SW, else the SND_HW event's time.
    pub(super) t: u64,
    /// True when `t` is an SND_SW.
    pub(super) sw: bool,
    pub(super) sendmsg: Option<(u64, u32)>,
    pub(super) sched: u64,
    pub(super) tx_hw_ns: u64,
    pub(super) index: u32,
    pub(super) retransmit: bool,
    /// The byte followed: the last one the skb held at the send
    /// (unwrapped); `tskey` for a version-1 event.
    pub(super) b: i64,
    /// The bytes the skb held at the send, when recorded.
    pub(super) range: Option<(u32, u32)>,
    /// The sender's clock was locked at the send.
    pub(super) locked: bool,
}

/// Everything about one flow (data direction), both ends.
#[derive(Debug)]
pub(super) struct FlowState {
    pub(super) unwrap: SeqUnwrap,
    pub(super) hash: u64,
    pub(super) rx: Vec<RxFlow>,
    /// TCP RETRANSMIT ranges by (end, number): (time, sender host, start).
    pub(super) retx: BTreeMap<(i64, u64), (u64, HostId, i64)>,
    /// The next RETRANSMIT's number.
    pub(super) retx_next: u64,
    /// The longest RETRANSMIT range seen (at most [`MAX_SKB_SPAN`]).
    pub(super) retx_max_len: i64,
    /// Recorded transmissions by (end, id): which ones held a byte.
    pub(super) sends: BTreeMap<(i64, u64), Sent>,
    /// The longest transmission seen (at most [`MAX_SKB_SPAN`]).
    pub(super) sends_max_len: i64,
    /// End of the highest byte transmitted so far (exclusive).
    pub(super) tx_high: Option<i64>,
    pub(super) last_ns: u64,
}

impl FlowState {
    pub(super) fn new(f: &FlowKey) -> Self {
        FlowState {
            unwrap: SeqUnwrap::new(),
            hash: sample::flow_hash(&f.src, &f.dst, f.sport, f.dport),
            rx: Vec::new(),
            retx: BTreeMap::new(),
            retx_next: 0,
            retx_max_len: 1,
            sends: BTreeMap::new(),
            sends_max_len: 1,
            tx_high: None,
            last_ns: 0,
        }
    }

    pub(super) fn rx_of(&mut self, host: HostId) -> &mut RxFlow {
        let i = match self.rx.iter().position(|r| r.host == host) {
            Some(i) => i,
            None => {
                self.rx.push(RxFlow::new(host));
                self.rx.len() - 1
            }
        };
        &mut self.rx[i]
    }
}
