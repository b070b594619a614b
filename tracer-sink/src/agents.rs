//! Per-agent state: identity, clock, counters, and the table of agents
//! (sequence tracking itself is in [`crate::seq`], admission limits in
//! [`crate::limits`]).
//!
//! An agent is keyed by `(agent_id, boot_id, incarnation)`: an agent
//! restart picks a new random incarnation (and, unless `--agent-id` is
//! fixed, a new `agent_id`), so it shows up as a new agent (a new pcapng
//! interface) whose sequence numbers start again.
//!
//! The table is bounded: new agents are admitted at a limited rate per
//! source address and overall ([`crate::limits`]), at most [`MAX_AGENTS`]
//! are live at once, and an agent that sends nothing for the idle timeout
//! expires (its interface stays in the file written so far; its counters
//! are added to [`AgentTable::expired`]). If it comes back it is a new
//! agent: a new interface, its sequence tracked afresh.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tracer_codec::DatagramHeaderRef;

use crate::limits::{Admission, Refused};
use crate::seq::{bounded_lost, SeqTracker, SeqVerdict};

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

/// Largest number of live agents; datagrams of further new agents are
/// rejected as `too_many_agents` until idle ones expire.
pub const MAX_AGENTS: usize = 65_536;

/// Largest number of gap ranges over all agents (about 12 MB): past it an
/// agent merges its gaps instead of adding ranges (see [`crate::seq`]).
pub const MAX_TOTAL_GAP_RANGES: usize = 1 << 18;

/// Reject reasons the sink adds to [`tracer_codec::DecodeError::ALL_REASONS`].
pub const SINK_REASONS: &[&str] = &[
    "duplicate",
    "new_agent_rate",
    "seq_jump",
    "stale",
    "too_many_agents",
];

/// True when `host` holds a control or bidirectional formatting character
/// (they would reach logs, the stats table and pcapng interface names,
/// where they hide or reorder text).
pub fn has_control(host: &str) -> bool {
    // Printable ASCII hides nothing: most names are decided without
    // decoding a character (this runs for every datagram).
    !host.bytes().all(|b| (0x20..0x7f).contains(&b))
        && host.chars().any(tracer_cli::text::hides_text)
}

fn sanitized(c: char) -> char {
    if tracer_cli::text::hides_text(c) {
        '?'
    } else {
        c
    }
}

/// Append `host` to `out` with every control or bidirectional formatting
/// character replaced by `?`.
pub fn push_sanitized(out: &mut String, host: &str) {
    out.extend(host.chars().map(sanitized));
}

/// True when `stored` is `raw` sanitized (compared without allocating).
fn same_sanitized(stored: &str, raw: &str) -> bool {
    if raw.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        // Printable ASCII is stored as it is (checked for every datagram).
        return stored == raw;
    }
    stored.chars().eq(raw.chars().map(sanitized))
}

/// Counters of several agents added up (the agents not listed in a stats
/// snapshot, or the expired ones).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentTotals {
    /// Agents counted.
    pub agents: u64,
    /// Datagrams accepted.
    pub datagrams: u64,
    /// Events accepted.
    pub events: u64,
    /// Datagrams missing from the sequence.
    pub datagram_gaps: u64,
    /// Events missing according to `first_event_seq`.
    pub event_gaps: u64,
    /// Events the agents reported lost.
    pub agent_lost: u64,
    /// Duplicates rejected.
    pub duplicates: u64,
    /// Stale datagrams rejected.
    pub stale: u64,
    /// Datagrams rejected as `seq_jump`.
    pub seq_jumps: u64,
}

impl AgentTotals {
    /// Add one agent's counters.
    pub fn add(&mut self, a: &AgentState) {
        self.agents += 1;
        self.datagrams += a.datagrams;
        self.events += a.events;
        self.datagram_gaps += a.seq.datagram_gaps;
        self.event_gaps += a.seq.event_gaps;
        self.agent_lost += a.agent_lost;
        self.duplicates += a.duplicates;
        self.stale += a.stale;
        self.seq_jumps += a.seq_jumps;
    }

    /// Events lost before the sink (gaps plus agent-side losses).
    pub fn dropped(&self) -> u64 {
        self.event_gaps + self.agent_lost
    }
}

/// Everything the sink knows about one agent.
#[derive(Debug)]
pub struct AgentState {
    /// Identity.
    pub key: AgentKey,
    /// Index in the table (stable for the sink's lifetime; the writer's handle).
    pub index: u32,
    /// Hostname from the latest datagram, control characters replaced
    /// by `?`.
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
    /// Source address of its first datagram.
    pub source: SocketAddr,
    /// When a datagram of it was last accepted.
    pub last_seen: Instant,
}

impl AgentState {
    /// Events lost before the sink: event gaps plus agent-side losses
    /// (the `isb_ifdrop` of its interface).
    pub fn ifdrop(&self) -> u64 {
        self.seq.event_gaps + self.agent_lost
    }

    /// The breakdown written as the comment of its Interface Statistics
    /// Block.
    pub fn isb_comment(&self) -> String {
        format!(
            "datagrams={} datagram_gaps={} event_gaps={} agent_lost={} rejects={} (duplicates={} stale={} seq_jumps={}) late_datagrams={} resyncs={} uncertain_fills={} lost_clamped={}",
            self.datagrams,
            self.seq.datagram_gaps,
            self.seq.event_gaps,
            self.agent_lost,
            self.duplicates + self.stale + self.seq_jumps,
            self.duplicates,
            self.stale,
            self.seq_jumps,
            self.late,
            self.resyncs,
            self.uncertain_fills,
            self.lost_clamped
        )
    }
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

/// An agent that expired: what the writer needs for its last ISB.
#[derive(Debug, Clone)]
pub struct ExpiredAgent {
    /// Agent index.
    pub index: u32,
    /// Its `isb_ifdrop`.
    pub ifdrop: u64,
    /// Its ISB comment.
    pub comment: String,
}

/// The live agents, by key and by index.
#[derive(Debug, Default)]
pub struct AgentTable {
    by_key: HashMap<AgentKey, u32>,
    /// Live agents by index (= order of first appearance).
    pub agents: BTreeMap<u32, AgentState>,
    /// Index of the next new agent (indices are never reused).
    next_index: u32,
    /// Gap ranges of all agents.
    gap_ranges: usize,
    admission: Admission,
    /// Counters of the agents that expired.
    pub expired: AgentTotals,
}

impl AgentTable {
    /// Gap ranges held by all agents.
    pub fn gap_ranges(&self) -> usize {
        self.gap_ranges
    }

    /// The index of a live agent.
    pub fn index_of(&self, key: &AgentKey) -> Option<u32> {
        self.by_key.get(key).copied()
    }

    /// Account a validated datagram header from `src` received at `now`
    /// (read in place, no allocation unless the agent or its host name is
    /// new).
    pub fn observe(
        &mut self,
        h: &DatagramHeaderRef<'_>,
        src: SocketAddr,
        now: Instant,
    ) -> Observation {
        self.observe_known(self.index_of(&AgentKey::of(h)), h, src, now)
    }

    /// [`observe`](Self::observe) for a caller that has already looked the
    /// agent up: `known` is [`index_of`](Self::index_of) its key (the key
    /// is hashed once per datagram).
    pub fn observe_known(
        &mut self,
        known: Option<u32>,
        h: &DatagramHeaderRef<'_>,
        src: SocketAddr,
        now: Instant,
    ) -> Observation {
        let key = AgentKey::of(h);
        let (index, is_new) = match known {
            Some(i) => (i, false),
            None => {
                if self.agents.len() >= MAX_AGENTS {
                    return Observation::Reject("too_many_agents");
                }
                match self.admission.admit(src, now) {
                    Ok(()) => {}
                    Err(Refused::Source | Refused::Global) => {
                        return Observation::Reject("new_agent_rate")
                    }
                }
                let i = self.next_index;
                self.next_index += 1;
                self.by_key.insert(key, i);
                self.agents.insert(
                    i,
                    AgentState {
                        key,
                        index: i,
                        host: {
                            let mut host = String::with_capacity(h.hostname.len());
                            push_sanitized(&mut host, h.hostname);
                            host
                        },
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
                        source: src,
                        last_seen: now,
                    },
                );
                (i, true)
            }
        };
        let Some(a) = self.agents.get_mut(&index) else {
            // by_key and agents are kept in step; never reached.
            return Observation::Reject("too_many_agents");
        };
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
            if !same_sanitized(&a.host, h.hostname) {
                a.host.clear();
                push_sanitized(&mut a.host, h.hostname);
            }
        }
        a.last_seen = now;
        a.datagrams += 1;
        a.events += u64::from(h.event_count);
        let (lost, clamped) = bounded_lost(a.agent_lost, h.lost_events);
        a.agent_lost = lost;
        a.lost_clamped += u64::from(clamped);
        Observation::Accept { index, is_new }
    }

    /// Remove the agents that sent nothing accepted for `idle` (at `now`);
    /// their counters go to [`expired`](Self::expired).
    pub fn expire(&mut self, now: Instant, idle: Duration) -> Vec<ExpiredAgent> {
        let gone: Vec<u32> = self
            .agents
            .values()
            .filter(|a| now.saturating_duration_since(a.last_seen) >= idle)
            .map(|a| a.index)
            .collect();
        let mut out = Vec::with_capacity(gone.len());
        for i in gone {
            let Some(a) = self.agents.remove(&i) else {
                continue;
            };
            self.by_key.remove(&a.key);
            self.gap_ranges -= a.seq.gap_ranges();
            self.expired.add(&a);
            out.push(ExpiredAgent {
                index: i,
                ifdrop: a.ifdrop(),
                comment: a.isb_comment(),
            });
        }
        out
    }

    /// Agents that have been admitted since the sink started.
    pub fn admitted(&self) -> u64 {
        u64::from(self.next_index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_keeps_max_agent_loss_and_counts_duplicates() {
        use tracer_codec::DatagramHeader;
        let now = Instant::now();
        let src = SocketAddr::from(([127, 0, 0, 1], 9));
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
            sink_instance: 0,
            sent_mono_ns: 0,
            hostname: "a".into(),
        };
        assert_eq!(
            tab.observe(&h.borrowed(), src, now),
            Observation::Accept {
                index: 0,
                is_new: true
            }
        );
        assert_eq!(
            tab.observe(&h.borrowed(), src, now),
            Observation::Reject("duplicate")
        );
        h.seq = 1;
        h.first_event_seq = 3;
        h.lost_events = 2; // smaller: a reordered older value
        tab.observe(&h.borrowed(), src, now);
        h.boot_id = [2; 16];
        assert_eq!(
            tab.observe(&h.borrowed(), src, now),
            Observation::Accept {
                index: 1,
                is_new: true
            }
        );
        let a = &tab.agents[&0];
        assert_eq!(
            (a.datagrams, a.events, a.agent_lost, a.duplicates),
            (2, 6, 5, 1)
        );
    }

    fn header(agent_id: u64) -> tracer_codec::DatagramHeader {
        tracer_codec::DatagramHeader {
            version: 1,
            agent_id,
            boot_id: [1; 16],
            seq: 0,
            lost_events: 0,
            first_event_seq: 0,
            clock_source: 0,
            clock_state: 2,
            event_count: 1,
            flags: 0,
            incarnation: 0,
            sink_instance: 0,
            sent_mono_ns: 0,
            hostname: "h".into(),
        }
    }

    #[test]
    fn host_names_are_sanitized() {
        let mut out = String::new();
        push_sanitized(&mut out, "a\u{1b}[31mb\nc\u{85}é");
        assert_eq!(out, "a?[31mb?c?é");
        assert!(has_control("x\ty"));
        // A right-to-left override would show "evil\u{202e}gnp" reversed.
        assert!(has_control("evil\u{202e}gnp"));
        let mut out = String::new();
        push_sanitized(&mut out, "a\u{2066}b\u{200f}");
        assert_eq!(out, "a?b?");
        assert!(!has_control("é-host.example"));
        assert!(same_sanitized("a?b", "a\u{7f}b"));
        assert!(!same_sanitized("a?b", "a?bc"));
    }

    #[test]
    fn idle_agents_expire_and_come_back_as_new() {
        let t0 = Instant::now();
        let src = SocketAddr::from(([127, 0, 0, 1], 9));
        let mut tab = AgentTable::default();
        let mut h = header(1);
        tab.observe(&h.borrowed(), src, t0);
        tab.observe(&header(2).borrowed(), src, t0);
        h.seq = 1;
        h.first_event_seq = 1;
        let t1 = t0 + Duration::from_secs(30);
        tab.observe(&h.borrowed(), src, t1);
        let gone = tab.expire(t0 + Duration::from_secs(40), Duration::from_secs(20));
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].index, 1);
        assert!(
            gone[0].comment.contains("datagrams=1 "),
            "{}",
            gone[0].comment
        );
        assert_eq!(tab.agents.len(), 1);
        assert_eq!((tab.expired.agents, tab.expired.events), (1, 1));
        // Agent 2 again: a new index.
        assert_eq!(
            tab.observe(&header(2).borrowed(), src, t1),
            Observation::Accept {
                index: 2,
                is_new: true
            }
        );
        assert_eq!(tab.admitted(), 3);
    }

    #[test]
    fn a_spray_of_agent_ids_is_rate_limited_per_source() {
        let t0 = Instant::now();
        let spray = SocketAddr::from(([127, 0, 0, 1], 1000));
        let real = SocketAddr::from(([127, 0, 0, 1], 2000));
        let mut tab = AgentTable::default();
        let mut refused = 0;
        for id in 0..10_000 {
            if tab.observe(&header(id).borrowed(), spray, t0)
                == Observation::Reject("new_agent_rate")
            {
                refused += 1;
            }
        }
        assert_eq!(refused, 10_000 - crate::limits::SOURCE_BURST as usize);
        assert!(matches!(
            tab.observe(&header(1 << 40).borrowed(), real, t0),
            Observation::Accept { is_new: true, .. }
        ));
    }
}
