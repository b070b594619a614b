//! The stage-latency rule of the README, computed independently of the
//! Lua script.

use std::collections::HashMap;

use tracer_codec::TxEvent;

use super::events::{ACK, SCHED, SENDMSG, SND_HW, SND_SW};

/// Expected stage latencies of one event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Latency {
    pub sched_ns: Option<i64>,
    pub snd_sw_ns: Option<i64>,
    pub snd_hw_ns: Option<i64>,
    pub ack_ns: Option<i64>,
    pub total_ns: Option<i64>,
}

/// The latency rule of the README, written again here from its definition
/// (not from the Lua code): events in file order; per (agent, cookie, tskey)
/// the latest event of each stage and the latency it got. An event shows
/// its own stage latency and those of the skb's stages seen before it.
#[derive(Default)]
pub struct LatencyModel {
    seen: HashMap<SkbKey, HashMap<u8, StageSeen>>,
}

/// (agent_id, cookie, tskey): one skb of one agent.
type SkbKey = (u64, u64, u32);
/// A stage's latest global_ns and the latency it got.
type StageSeen = (u64, Option<i64>);

impl LatencyModel {
    /// Latencies of the next event in file order.
    pub fn next(&mut self, agent_id: u64, ev: &TxEvent) -> Latency {
        let stages = self
            .seen
            .entry((agent_id, ev.cookie, ev.tskey))
            .or_default();
        let since = |from: u8| {
            stages
                .get(&from)
                .map(|&(t, _)| ev.global_ns as i64 - t as i64)
        };
        let own = match ev.stage {
            SCHED => since(SENDMSG),
            SND_SW | SND_HW => since(SCHED),
            ACK => since(SND_SW).or(since(SND_HW)).or(since(SCHED)),
            _ => None,
        };
        let total = if ev.stage == SENDMSG {
            None
        } else {
            since(SENDMSG)
        };
        stages.insert(ev.stage, (ev.global_ns, own));
        let of = |stage: u8| stages.get(&stage).and_then(|&(_, lat)| lat);
        Latency {
            sched_ns: of(SCHED),
            snd_sw_ns: of(SND_SW),
            snd_hw_ns: of(SND_HW),
            ack_ns: of(ACK),
            total_ns: total,
        }
    }
}
