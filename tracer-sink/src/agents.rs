//! Per-agent state: identity, clock, and datagram/event sequence tracking
//! (gaps, late datagrams that fill them, duplicates).
//!
//! An agent is keyed by `(agent_id, boot_id, incarnation)`: an agent
//! restart picks a new random incarnation (and, unless `--agent-id` is
//! fixed, a new `agent_id`), so it shows up as a new agent (a new pcapng
//! interface) whose sequence numbers start again.

use std::collections::{BTreeMap, HashMap};

use tracer_codec::DatagramHeaderRef;

/// Identity of one agent process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AgentKey {
    /// Random per agent process (or `--agent-id`).
    pub agent_id: u64,
    /// The agent host's boot id.
    pub boot_id: [u8; 16],
    /// Random per agent process start (0 from a version-1 agent).
    pub incarnation: u64,
}

impl AgentKey {
    /// The key of the agent that sent `h`.
    pub fn of(h: &DatagramHeaderRef<'_>) -> Self {
        AgentKey {
            agent_id: h.agent_id,
            boot_id: h.boot_id,
            incarnation: h.incarnation,
        }
    }
}

/// Largest number of gap ranges remembered per agent. Past it the oldest
/// range is forgotten: its datagrams stay counted as lost, and if one still
/// arrives it is rejected as `stale` (it can no longer be told from a
/// duplicate).
pub const MAX_GAP_RANGES: usize = 4096;

/// Largest number of distinct agents; datagrams of further agents are
/// rejected as `too_many_agents` (protects memory and the IDB list from a
/// sender that invents agent ids).
pub const MAX_AGENTS: usize = 65_536;

/// Reject reasons the sink adds to [`tracer_codec::DecodeError::ALL_REASONS`].
pub const SINK_REASONS: &[&str] = &["duplicate", "stale", "too_many_agents"];

/// What one datagram did to an agent's sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqVerdict {
    /// Next in sequence (or the first datagram seen from this agent).
    InOrder,
    /// Ahead of sequence: `datagrams` datagrams carrying `events` events are missing.
    Gap {
        /// Datagrams skipped.
        datagrams: u64,
        /// Events skipped (from `first_event_seq`).
        events: u64,
    },
    /// A late datagram that fills a gap; `counted` tells whether that gap
    /// had been counted as loss (gaps before the first datagram seen are not).
    LateFill {
        /// The gap had been counted and is now corrected.
        counted: bool,
    },
    /// Already received: rejected.
    Duplicate,
    /// Older than every gap still remembered: rejected.
    Stale,
}

/// A range of missing datagram sequence numbers, `[start, end)`.
#[derive(Debug, Clone, Copy)]
struct Missing {
    end: u64,
    /// False for the range before the first datagram seen (the sink may
    /// simply have started late): filling it corrects no loss counter.
    counted: bool,
}

/// Datagram and event sequence tracking of one agent.
#[derive(Debug, Default)]
pub struct SeqTracker {
    started: bool,
    /// Highest datagram seq seen + 1.
    next_seq: u64,
    /// `first_event_seq + event_count` of the highest datagram seen.
    next_event_seq: u64,
    /// Missing datagram ranges by start.
    missing: BTreeMap<u64, Missing>,
    /// Every seq below this is either received or forgotten.
    floor: u64,
    /// Net datagrams missing (gaps minus late fills).
    pub datagram_gaps: u64,
    /// Net events missing according to `first_event_seq`.
    pub event_gaps: u64,
}

impl SeqTracker {
    /// Account one datagram; the caller rejects it on `Duplicate`/`Stale`.
    pub fn observe(&mut self, seq: u64, first_event_seq: u64, event_count: u64) -> SeqVerdict {
        let end_event = first_event_seq.saturating_add(event_count);
        if !self.started {
            self.started = true;
            self.next_seq = seq.saturating_add(1);
            self.next_event_seq = end_event;
            if seq > 0 {
                self.missing.insert(
                    0,
                    Missing {
                        end: seq,
                        counted: false,
                    },
                );
            }
            return SeqVerdict::InOrder;
        }
        if seq >= self.next_seq {
            let datagrams = seq - self.next_seq;
            // A datagram may overlap events already seen only if the agent
            // is confused; count no negative loss.
            let events = first_event_seq.saturating_sub(self.next_event_seq);
            if datagrams > 0 {
                self.missing.insert(
                    self.next_seq,
                    Missing {
                        end: seq,
                        counted: true,
                    },
                );
                self.trim();
            }
            self.next_seq = seq.saturating_add(1);
            self.next_event_seq = end_event;
            self.datagram_gaps += datagrams;
            self.event_gaps += events;
            return if datagrams == 0 && events == 0 {
                SeqVerdict::InOrder
            } else {
                SeqVerdict::Gap { datagrams, events }
            };
        }
        // Late: does it fall into a remembered gap?
        let hit = self
            .missing
            .range(..=seq)
            .next_back()
            .filter(|(_, m)| m.end > seq)
            .map(|(&start, &m)| (start, m));
        match hit {
            Some((start, m)) => {
                self.missing.remove(&start);
                if start < seq {
                    self.missing.insert(
                        start,
                        Missing {
                            end: seq,
                            counted: m.counted,
                        },
                    );
                }
                if seq + 1 < m.end {
                    self.missing.insert(
                        seq + 1,
                        Missing {
                            end: m.end,
                            counted: m.counted,
                        },
                    );
                }
                if m.counted {
                    self.datagram_gaps = self.datagram_gaps.saturating_sub(1);
                    self.event_gaps = self.event_gaps.saturating_sub(event_count);
                }
                SeqVerdict::LateFill { counted: m.counted }
            }
            None if seq < self.floor => SeqVerdict::Stale,
            None => SeqVerdict::Duplicate,
        }
    }

    /// Forget the oldest gaps beyond [`MAX_GAP_RANGES`].
    fn trim(&mut self) {
        while self.missing.len() > MAX_GAP_RANGES {
            if let Some((_, m)) = self.missing.pop_first() {
                self.floor = self.floor.max(m.end);
            }
        }
    }
}

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
}

impl AgentTable {
    /// The index of a known agent.
    pub fn index_of(&self, key: &AgentKey) -> Option<u32> {
        self.by_key.get(key).copied()
    }

    /// Account a validated datagram header (read in place, no allocation
    /// unless the agent or its host name is new).
    pub fn observe(&mut self, h: &DatagramHeaderRef<'_>) -> Observation {
        let key = AgentKey::of(h);
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
                });
                (i, true)
            }
        };
        let a = &mut self.agents[index as usize];
        match a
            .seq
            .observe(h.seq, h.first_event_seq, u64::from(h.event_count))
        {
            SeqVerdict::Duplicate => {
                a.duplicates += 1;
                return Observation::Reject("duplicate");
            }
            SeqVerdict::Stale => {
                a.stale += 1;
                return Observation::Reject("stale");
            }
            SeqVerdict::LateFill { .. } => a.late += 1,
            SeqVerdict::InOrder | SeqVerdict::Gap { .. } => {
                // Latest by sequence, not by arrival: a late datagram must
                // not roll the clock state back.
                a.clock_source = h.clock_source;
                a.clock_state = h.clock_state;
                if a.host != h.hostname {
                    a.host.clear();
                    a.host.push_str(h.hostname);
                }
            }
        }
        a.datagrams += 1;
        a.events += u64::from(h.event_count);
        a.agent_lost = a.agent_lost.max(h.lost_events);
        Observation::Accept { index, is_new }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_stream_has_no_gaps() {
        let mut t = SeqTracker::default();
        for s in 0..10 {
            assert_eq!(t.observe(s, s * 5, 5), SeqVerdict::InOrder);
        }
        assert_eq!((t.datagram_gaps, t.event_gaps), (0, 0));
    }

    #[test]
    fn gap_then_late_fill_then_duplicate() {
        let mut t = SeqTracker::default();
        t.observe(0, 0, 3);
        // seq 1 (events 3..7) and 2 (events 7..9) lost
        assert_eq!(
            t.observe(3, 9, 1),
            SeqVerdict::Gap {
                datagrams: 2,
                events: 6
            }
        );
        assert_eq!((t.datagram_gaps, t.event_gaps), (2, 6));
        assert_eq!(t.observe(2, 7, 2), SeqVerdict::LateFill { counted: true });
        assert_eq!((t.datagram_gaps, t.event_gaps), (1, 4));
        assert_eq!(t.observe(2, 7, 2), SeqVerdict::Duplicate);
        assert_eq!(t.observe(3, 9, 1), SeqVerdict::Duplicate);
        assert_eq!(t.observe(1, 3, 4), SeqVerdict::LateFill { counted: true });
        assert_eq!((t.datagram_gaps, t.event_gaps), (0, 0));
        assert_eq!(t.observe(0, 0, 3), SeqVerdict::Duplicate);
    }

    #[test]
    fn late_start_is_not_loss_but_accepts_earlier_datagrams() {
        let mut t = SeqTracker::default();
        assert_eq!(t.observe(100, 1000, 10), SeqVerdict::InOrder);
        assert_eq!(
            t.observe(99, 990, 10),
            SeqVerdict::LateFill { counted: false }
        );
        assert_eq!(t.observe(99, 990, 10), SeqVerdict::Duplicate);
        assert_eq!((t.datagram_gaps, t.event_gaps), (0, 0));
    }

    #[test]
    fn forgotten_gaps_become_stale() {
        let mut t = SeqTracker::default();
        t.observe(0, 0, 1);
        let mut seq = 0;
        for _ in 0..MAX_GAP_RANGES + 10 {
            seq += 2; // lose one datagram each time
            t.observe(seq, seq, 1);
        }
        assert_eq!(t.datagram_gaps, MAX_GAP_RANGES as u64 + 10);
        assert_eq!(t.observe(1, 1, 1), SeqVerdict::Stale);
        assert_eq!(
            t.observe(seq - 1, seq - 1, 1),
            SeqVerdict::LateFill { counted: true }
        );
    }

    #[test]
    fn table_keeps_max_agent_loss_and_counts_duplicates() {
        use tracer_codec::DatagramHeader;
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
            flags: 0,
            incarnation: 0,
            hostname: "a".into(),
        };
        assert_eq!(
            tab.observe(&h.borrowed()),
            Observation::Accept {
                index: 0,
                is_new: true
            }
        );
        assert_eq!(tab.observe(&h.borrowed()), Observation::Reject("duplicate"));
        h.seq = 1;
        h.first_event_seq = 3;
        h.lost_events = 2; // smaller: a reordered older value
        tab.observe(&h.borrowed());
        h.boot_id = [2; 16];
        assert_eq!(
            tab.observe(&h.borrowed()),
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
