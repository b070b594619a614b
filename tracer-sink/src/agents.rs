//! Per-agent state: identity, clock, counters, and the table of agents
//! (sequence tracking itself is in [`crate::seq`]).
//!
//! An agent is keyed by `(agent_id, boot_id)`: an agent restart picks a new
//! random `agent_id`, so it shows up as a new agent (a new pcapng interface).

use std::collections::HashMap;
use std::time::Instant;

use tracer_codec::DatagramHeaderRef;

use crate::seq::{bounded_lost, SeqTracker, SeqVerdict};

/// Identity of one agent process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AgentKey {
    /// Random per agent process (or `--agent-id`).
    pub agent_id: u64,
    /// The agent host's boot id.
    pub boot_id: [u8; 16],
}

/// Largest number of distinct agents; datagrams of further agents are
/// rejected as `too_many_agents` (protects memory and the IDB list from a
/// sender that invents agent ids).
pub const MAX_AGENTS: usize = 65_536;

/// Largest number of gap ranges over all agents (about 12 MB): past it an
/// agent merges its gaps instead of adding ranges (see [`crate::seq`]).
pub const MAX_TOTAL_GAP_RANGES: usize = 1 << 18;

/// Reject reasons the sink adds to [`tracer_codec::DecodeError::ALL_REASONS`].
pub const SINK_REASONS: &[&str] = &["duplicate", "seq_jump", "stale", "too_many_agents"];

/// Everything the sink knows about one agent.
#[derive(Debug)]
pub struct AgentState {
    /// Identity.
    pub key: AgentKey,
    /// Index in the table (stable for the sink's lifetime; the writer's handle).
    pub index: u32,
    /// Hostname from the latest datagram.
    pub host: String,
    /// Clock source wire value from the latest datagram.
    pub clock_source: u8,
    /// Clock state wire value from the latest datagram.
    pub clock_state: u8,
    /// Sequence tracking.
    pub seq: SeqTracker,
    /// Datagrams accepted.
    pub datagrams: u64,
    /// Events accepted.
    pub events: u64,
    /// Agent-side losses: the maximum `lost_events` seen (it is cumulative).
    pub agent_lost: u64,
    /// Exact duplicates rejected.
    pub duplicates: u64,
    /// Datagrams rejected as `stale`.
    pub stale: u64,
    /// Late datagrams that filled a gap.
    pub late: u64,
    /// Datagrams rejected as `seq_jump` (beyond the sequence bounds).
    pub seq_jumps: u64,
    /// Times the tracker followed the agent to a new position.
    pub resyncs: u64,
    /// Late datagrams accepted into an uncertain gap range (loss counters
    /// left as they were).
    pub uncertain_fills: u64,
    /// Datagrams whose `lost_events` rose by more than the bounded step.
    pub lost_clamped: u64,
}

/// Result of [`AgentTable::observe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observation {
    /// Write the datagram's events under agent `index`; `is_new` on the
    /// first datagram of this agent.
    Accept {
        /// Agent index.
        index: u32,
        /// First datagram of this agent.
        is_new: bool,
    },
    /// Do not write it; count it under this reason.
    Reject(&'static str),
}

/// All agents seen, by key.
#[derive(Debug, Default)]
pub struct AgentTable {
    by_key: HashMap<AgentKey, u32>,
    /// Agents in order of first appearance.
    pub agents: Vec<AgentState>,
    /// Gap ranges of all agents.
    gap_ranges: usize,
}

impl AgentTable {
    /// Gap ranges held by all agents.
    pub fn gap_ranges(&self) -> usize {
        self.gap_ranges
    }

    /// Account a validated datagram header received at `now` (read in
    /// place, no allocation unless the agent or its host name is new).
    pub fn observe(&mut self, h: &DatagramHeaderRef<'_>, now: Instant) -> Observation {
        let key = AgentKey {
            agent_id: h.agent_id,
            boot_id: h.boot_id,
        };
        let (index, is_new) = match self.by_key.get(&key) {
            Some(&i) => (i, false),
            None => {
                if self.agents.len() >= MAX_AGENTS {
                    return Observation::Reject("too_many_agents");
                }
                let i = self.agents.len() as u32;
                self.by_key.insert(key, i);
                self.agents.push(AgentState {
                    key,
                    index: i,
                    host: h.hostname.to_owned(),
                    clock_source: h.clock_source,
                    clock_state: h.clock_state,
                    seq: SeqTracker::default(),
                    datagrams: 0,
                    events: 0,
                    agent_lost: 0,
                    duplicates: 0,
                    stale: 0,
                    late: 0,
                    seq_jumps: 0,
                    resyncs: 0,
                    uncertain_fills: 0,
                    lost_clamped: 0,
                });
                (i, true)
            }
        };
        let a = &mut self.agents[index as usize];
        let before = a.seq.gap_ranges();
        let verdict = a.seq.observe(
            h.seq,
            h.first_event_seq,
            u64::from(h.event_count),
            now,
            self.gap_ranges < MAX_TOTAL_GAP_RANGES,
        );
        self.gap_ranges = self.gap_ranges + a.seq.gap_ranges() - before;
        match verdict {
            SeqVerdict::Duplicate => {
                a.duplicates += 1;
                return Observation::Reject("duplicate");
            }
            SeqVerdict::Stale => {
                a.stale += 1;
                return Observation::Reject("stale");
            }
            SeqVerdict::Suspect => {
                a.seq_jumps += 1;
                return Observation::Reject("seq_jump");
            }
            SeqVerdict::LateFill { uncertain, .. } => {
                a.late += 1;
                a.uncertain_fills += u64::from(uncertain);
            }
            SeqVerdict::Resync { from, to } => {
                a.resyncs += 1;
                tracing::warn!(
                    agent_id = %format_args!("{:016x}", h.agent_id),
                    from, to,
                    "agent sequence jumped and stayed there: following it (the distance is not counted as loss)"
                );
            }
            SeqVerdict::InOrder | SeqVerdict::Gap { .. } => {}
        }
        if verdict.is_newest() {
            // Latest by sequence, not by arrival: a late datagram must
            // not roll the clock state back.
            a.clock_source = h.clock_source;
            a.clock_state = h.clock_state;
            if a.host != h.hostname {
                a.host.clear();
                a.host.push_str(h.hostname);
            }
        }
        a.datagrams += 1;
        a.events += u64::from(h.event_count);
        let (lost, clamped) = bounded_lost(a.agent_lost, h.lost_events);
        a.agent_lost = lost;
        a.lost_clamped += u64::from(clamped);
        Observation::Accept { index, is_new }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_keeps_max_agent_loss_and_counts_duplicates() {
        use tracer_codec::DatagramHeader;
        let now = Instant::now();
        let mut tab = AgentTable::default();
        let mut h: DatagramHeader = DatagramHeader {
            version: 1,
            agent_id: 7,
            boot_id: [1; 16],
            seq: 0,
            lost_events: 5,
            first_event_seq: 0,
            clock_source: 0,
            clock_state: 2,
            event_count: 3,
            hostname: "a".into(),
        };
        assert_eq!(
            tab.observe(&h.borrowed(), now),
            Observation::Accept {
                index: 0,
                is_new: true
            }
        );
        assert_eq!(
            tab.observe(&h.borrowed(), now),
            Observation::Reject("duplicate")
        );
        h.seq = 1;
        h.first_event_seq = 3;
        h.lost_events = 2; // smaller: a reordered older value
        tab.observe(&h.borrowed(), now);
        h.boot_id = [2; 16];
        assert_eq!(
            tab.observe(&h.borrowed(), now),
            Observation::Accept {
                index: 1,
                is_new: true
            }
        );
        let a = &tab.agents[0];
        assert_eq!(
            (a.datagrams, a.events, a.agent_lost, a.duplicates),
            (2, 6, 5, 1)
        );
    }
}
