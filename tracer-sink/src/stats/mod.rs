//! Counters shared by the receive task and the writer thread, and the
//! serialisable [`SinkStats`] snapshot (JSON and a human table).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tracer_codec::{ClockSource, ClockState, DecodeError};

use crate::agents::{AgentState, AgentTable, AgentTotals, SINK_REASONS};
use crate::freshness::{Freshness, FRESHNESS_REASONS};
use crate::peers::{Peer, PeerTable, SinkKeys, AUTH_REASONS};

/// Distinct source addresses whose rejects are counted separately; the
/// rest are added up under [`OTHER_SOURCES`] (a spoofed flood must not grow
/// memory without bound).
pub const MAX_REJECT_SOURCES: usize = 1024;
/// Key of the rejects of sources beyond [`MAX_REJECT_SOURCES`].
pub const OTHER_SOURCES: &str = "other";

/// One agent's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentStats {
    /// Hostname from the latest datagram.
    pub host: String,
    /// Agent id as 16 hex digits (as in the pcapng interface description).
    pub agent_id: String,
    /// Boot id of the agent host, 32 hex digits.
    pub boot_id: String,
    /// Clock source name (`system`, `phc`, `sink`, or `unknown(N)`).
    pub clock_source: String,
    /// Clock servo state name (`UNLOCKED` ... `LOCKED_STABLE`).
    pub clock_state: String,
    /// Datagrams accepted.
    pub datagrams: u64,
    /// Events accepted.
    pub events: u64,
    /// Datagrams missing from the sequence (net of late arrivals).
    pub datagram_gaps: u64,
    /// Events missing according to `first_event_seq` (net of late arrivals).
    pub event_gaps: u64,
    /// Events the agent itself reported lost (max of its cumulative counter).
    pub agent_lost: u64,
    /// Exact duplicate datagrams rejected.
    pub duplicates: u64,
    /// Datagrams older than every remembered gap, rejected.
    pub stale: u64,
    /// Late datagrams that filled a gap (accepted).
    pub late_datagrams: u64,
    /// Datagrams rejected as `seq_jump`: their sequence, event sequence
    /// or position was beyond the bounds of `tracer_sink::seq` (a forged
    /// or confused sender); they changed nothing.
    #[serde(default)]
    pub seq_jumps: u64,
    /// Times the sink followed the agent to a new sequence position after
    /// a consistent jump (the distance is not counted as loss).
    #[serde(default)]
    pub resyncs: u64,
    /// Late datagrams accepted into a gap range kept whole at the memory
    /// bound (loss counters left as they were: loss may be overstated).
    #[serde(default)]
    pub uncertain_fills: u64,
    /// Datagrams whose cumulative `lost_events` rose by more than the
    /// bounded step (the rise was cut).
    #[serde(default)]
    pub lost_clamped: u64,
    /// Gap ranges the sink holds for this agent (bounded).
    #[serde(default)]
    pub gap_ranges: u64,
    /// Incarnation, 16 hex digits (random per agent start; 0 from a
    /// version-1 agent).
    #[serde(default)]
    pub incarnation: String,
    /// Source address of its latest accepted datagram.
    #[serde(default)]
    pub source: String,
    /// Times an accepted datagram came from another address than the one
    /// before (logged at warn).
    #[serde(default)]
    pub source_changes: u64,
    /// Events numbered before the first one this sink received: sent
    /// before it started, or while no sink listened. Not lost to this
    /// sink, but in none of its files.
    #[serde(default)]
    pub preceding_events: u64,
    /// Events committed to a file.
    #[serde(default)]
    pub delivered_events: u64,
    /// Events accepted that the sink could not write (part of the sink's
    /// `sink_write_lost`).
    #[serde(default)]
    pub write_lost: u64,
    /// Datagrams accepted although another one with the same sequence
    /// number and other content was accepted before (without a key one of
    /// the two is forged; both are in the file).
    #[serde(default)]
    pub seq_conflicts: u64,
}

impl AgentStats {
    /// Events lost on the way: event gaps plus agent-side losses (the ISB
    /// `isb_ifdrop` of this agent's interface).
    pub fn dropped(&self) -> u64 {
        self.event_gaps + self.agent_lost
    }
}

/// Everything the sink counts, as one snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SinkStats {
    /// Seconds since the sink started.
    pub uptime_s: f64,
    /// Datagrams read from the socket.
    pub datagrams_received: u64,
    /// Datagrams accepted (their events go to the file).
    pub datagrams_accepted: u64,
    /// Datagrams rejected, all reasons.
    pub datagrams_rejected: u64,
    /// Events in accepted datagrams.
    pub events_accepted: u64,
    /// Events written to a pcapng file (committed to the file system).
    pub events_written: u64,
    /// Events accepted but lost by the sink itself (write error, full disk,
    /// no file open). Never silent.
    pub sink_write_lost: u64,
    /// Events written later than an event with a larger timestamp (arrived
    /// after the reorder window had moved past them).
    pub events_out_of_order: u64,
    /// Events released early because the reorder buffer was full.
    pub reorder_overflow: u64,
    /// Bytes committed to pcapng files.
    pub bytes_written: u64,
    /// pcapng files opened.
    pub files: u64,
    /// The file being written, if any.
    pub current_file: Option<String>,
    /// Accepted datagrams whose host name held control characters (shown
    /// and written with `?` in their place).
    #[serde(default)]
    pub hostnames_sanitized: u64,
    /// Whether datagrams are authenticated (`--key-file`).
    #[serde(default)]
    pub authenticated: bool,
    /// Datagrams that carried a tag this sink could not check (it has no
    /// key); accepted.
    #[serde(default)]
    pub tags_unchecked: u64,
    /// Acknowledgements sent to agents.
    #[serde(default)]
    pub acks_sent: u64,
    /// Authenticated datagrams waiting for their agent to bind to this
    /// sink (neither accepted nor rejected yet; see docs/security.md).
    #[serde(default)]
    pub datagrams_held: u64,
    /// Rejected datagrams by reason (every reason listed, zeros included).
    pub rejects: BTreeMap<String, u64>,
    /// Rejected datagrams by source address, then reason (non-zero only).
    pub rejects_by_source: BTreeMap<String, BTreeMap<String, u64>>,
    /// Per live agent, in order of first appearance; at most the
    /// configured number (`SinkConfig::stats_max_agents`): the agents
    /// with the most events. The others are added up in
    /// `agents_not_listed`.
    pub agents: Vec<AgentStats>,
    /// Live agents (listed or not).
    #[serde(default)]
    pub agents_live: u64,
    /// Agents admitted since the sink started (live and expired).
    #[serde(default)]
    pub agents_seen: u64,
    /// Live agents not listed in `agents`, their counters added up.
    #[serde(default)]
    pub agents_not_listed: AgentTotals,
    /// Agents that expired after sending nothing for the idle timeout,
    /// their counters added up.
    #[serde(default)]
    pub agents_expired: AgentTotals,
}

/// Counters of the receive task.
#[derive(Debug, Default)]
pub(crate) struct ReceiveCounters {
    pub tags_unchecked: u64,
    pub acks_sent: u64,
    pub datagrams_received: u64,
    pub datagrams_accepted: u64,
    pub events_accepted: u64,
    pub rejects: BTreeMap<&'static str, u64>,
    pub hostnames_sanitized: u64,
    pub by_source: HashMap<SocketAddr, BTreeMap<&'static str, u64>>,
    pub other_sources: BTreeMap<&'static str, u64>,
}

impl ReceiveCounters {
    fn new() -> Self {
        let mut c = ReceiveCounters::default();
        for r in DecodeError::ALL_REASONS
            .iter()
            .chain(SINK_REASONS)
            .chain(AUTH_REASONS)
            .chain(FRESHNESS_REASONS)
        {
            c.rejects.insert(r, 0);
        }
        c
    }

    /// Count one rejected datagram.
    pub fn reject(&mut self, src: SocketAddr, reason: &'static str) {
        *self.rejects.entry(reason).or_insert(0) += 1;
        let per = if self.by_source.len() < MAX_REJECT_SOURCES || self.by_source.contains_key(&src)
        {
            self.by_source.entry(src).or_default()
        } else {
            &mut self.other_sources
        };
        *per.entry(reason).or_insert(0) += 1;
    }
}

/// Counters of the writer thread (it keeps its own copy and publishes it).
#[derive(Debug, Default, Clone)]
pub(crate) struct WriterCounters {
    pub events_written: u64,
    pub sink_write_lost: u64,
    pub events_out_of_order: u64,
    pub reorder_overflow: u64,
    pub bytes_written: u64,
    pub files: u64,
    pub current_file: Option<String>,
}

/// State behind the shared lock.
#[derive(Debug)]
pub(crate) struct SharedState {
    pub agents: AgentTable,
    pub peers: PeerTable,
    /// With a key: what tells replays from late datagrams across restarts.
    pub fresh: Option<Freshness>,
    /// An incarnation's first datagram was just held: send the binding
    /// acknowledgements now rather than at the next tick.
    pub bind_now: bool,
    pub rx: ReceiveCounters,
    pub wr: WriterCounters,
}

/// The lock shared by the receive task, the writer and the reporter.
///
/// The receive task holds it while it handles one burst of datagrams; the
/// others take it briefly. A poisoned lock (a panic elsewhere) still holds
/// valid counters, so it is used as is.
#[derive(Debug)]
pub(crate) struct Shared {
    started: Instant,
    /// Agents listed by name in a snapshot at most.
    max_listed: usize,
    state: Mutex<SharedState>,
}

impl Shared {
    pub fn new(keys: Option<SinkKeys>, max_listed: usize) -> Self {
        let started = Instant::now();
        let peers = PeerTable::new(keys);
        let fresh = peers
            .keys()
            .is_some()
            .then(|| Freshness::new(peers.instance, started));
        Shared {
            started,
            max_listed,
            state: Mutex::new(SharedState {
                agents: AgentTable::default(),
                peers,
                fresh,
                bind_now: false,
                rx: ReceiveCounters::new(),
                wr: WriterCounters::default(),
            }),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, SharedState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn snapshot(&self) -> SinkStats {
        let s = self.lock();
        let rx = &s.rx;
        let wr = &s.wr;
        let mut by_source: BTreeMap<String, BTreeMap<String, u64>> = rx
            .by_source
            .iter()
            .map(|(a, m)| (a.to_string(), own(m)))
            .collect();
        if !rx.other_sources.is_empty() {
            by_source.insert(OTHER_SOURCES.to_owned(), own(&rx.other_sources));
        }
        let (listed, not_listed) = select_listed(&s.agents, self.max_listed);
        SinkStats {
            uptime_s: self.started.elapsed().as_secs_f64(),
            datagrams_received: rx.datagrams_received,
            datagrams_accepted: rx.datagrams_accepted,
            datagrams_rejected: rx.rejects.values().sum(),
            events_accepted: rx.events_accepted,
            events_written: wr.events_written,
            sink_write_lost: wr.sink_write_lost,
            events_out_of_order: wr.events_out_of_order,
            reorder_overflow: wr.reorder_overflow,
            bytes_written: wr.bytes_written,
            files: wr.files,
            current_file: wr.current_file.clone(),
            authenticated: s.peers.keys().is_some(),
            tags_unchecked: rx.tags_unchecked,
            acks_sent: rx.acks_sent,
            datagrams_held: s.fresh.as_ref().map_or(0, |f| f.held() as u64),
            rejects: own(&rx.rejects),
            hostnames_sanitized: rx.hostnames_sanitized,
            rejects_by_source: by_source,
            agents: listed
                .iter()
                .map(|a| agent_stats(a, s.peers.get(a.index)))
                .collect(),
            agents_live: s.agents.agents.len() as u64,
            agents_seen: s.agents.admitted(),
            agents_not_listed: not_listed,
            agents_expired: s.agents.expired.clone(),
        }
    }
}

/// The `max` live agents with the most events, in order of first
/// appearance, and the others added up.
fn select_listed(agents: &AgentTable, max: usize) -> (Vec<&AgentState>, AgentTotals) {
    let mut not_listed = AgentTotals::default();
    if agents.agents.len() <= max {
        return (agents.agents.values().collect(), not_listed);
    }
    let mut by_events: Vec<(u64, u32)> = agents
        .agents
        .values()
        .map(|a| (a.events, a.index))
        .collect();
    by_events.select_nth_unstable_by(max, |x, y| y.cmp(x));
    let mut keep: Vec<u32> = by_events[..max].iter().map(|&(_, i)| i).collect();
    keep.sort_unstable();
    let mut listed = Vec::with_capacity(max);
    let mut k = keep.iter().peekable();
    for a in agents.agents.values() {
        if k.peek() == Some(&&a.index) {
            k.next();
            listed.push(a);
        } else {
            not_listed.add(a);
        }
    }
    (listed, not_listed)
}

fn agent_stats(a: &AgentState, p: Option<&Peer>) -> AgentStats {
    AgentStats {
        host: a.host.clone(),
        agent_id: format!("{:016x}", a.key.agent_id),
        boot_id: a.key.boot_id.iter().map(|b| format!("{b:02x}")).collect(),
        clock_source: clock_source_name(a.clock_source),
        clock_state: ClockState::from_u8(a.clock_state)
            .map(|c| c.name().to_owned())
            .unwrap_or_else(|| format!("unknown({})", a.clock_state)),
        datagrams: a.datagrams,
        events: a.events,
        datagram_gaps: a.seq.datagram_gaps,
        event_gaps: a.seq.event_gaps,
        agent_lost: a.agent_lost,
        duplicates: a.duplicates,
        stale: a.stale,
        late_datagrams: a.late,
        seq_jumps: a.seq_jumps,
        resyncs: a.resyncs,
        uncertain_fills: a.uncertain_fills,
        lost_clamped: a.lost_clamped,
        gap_ranges: a.seq.gap_ranges() as u64,
        incarnation: format!("{:016x}", a.key.incarnation),
        source: p.map(|p| p.source.to_string()).unwrap_or_default(),
        source_changes: p.map_or(0, |p| p.source_changes),
        preceding_events: p.map_or(0, |p| p.preceding_events),
        delivered_events: p.map_or(0, |p| p.delivered_events),
        write_lost: p.map_or(0, |p| p.write_lost),
        seq_conflicts: p.map_or(0, |p| p.seq_conflicts),
    }
}

fn own(m: &BTreeMap<&'static str, u64>) -> BTreeMap<String, u64> {
    m.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

/// Name of a clock source wire value (`unknown(N)` for values this build
/// does not know).
pub fn clock_source_name(v: u8) -> String {
    ClockSource::from_u8(v)
        .map(|c| c.name().to_owned())
        .unwrap_or_else(|| format!("unknown({v})"))
}

impl SinkStats {
    /// The stats as a multi-line human table (what the binary prints
    /// without `--json`).
    pub fn to_table(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "sink: up {:.1}s  datagrams {} (accepted {}, rejected {})  events accepted {}  written {}  sink_write_lost {}",
            self.uptime_s,
            self.datagrams_received,
            self.datagrams_accepted,
            self.datagrams_rejected,
            self.events_accepted,
            self.events_written,
            self.sink_write_lost
        );
        let _ = writeln!(
            o,
            "      files {}  bytes {}  out-of-order {}  reorder overflow {}  current {}",
            self.files,
            self.bytes_written,
            self.events_out_of_order,
            self.reorder_overflow,
            self.current_file.as_deref().unwrap_or("-")
        );
        let rejects: Vec<String> = self
            .rejects
            .iter()
            .filter(|(_, &n)| n > 0)
            .map(|(r, n)| format!("{r}={n}"))
            .collect();
        if !rejects.is_empty() {
            let _ = writeln!(o, "      rejects: {}", rejects.join(" "));
        }
        if self.hostnames_sanitized > 0 {
            let _ = writeln!(
                o,
                "      host names with control characters (replaced by '?'): {} datagrams",
                self.hostnames_sanitized
            );
        }
        if self.agents.is_empty() && self.agents_expired.agents == 0 {
            let _ = writeln!(o, "      no agents yet");
            return o;
        }
        let _ = writeln!(
            o,
            "{:<20} {:<16} {:<18} {:>10} {:>12} {:>8} {:>10} {:>10} {:>6} {:>10} {:>7} {:<21}",
            "HOST",
            "AGENT",
            "CLOCK",
            "DATAGRAMS",
            "EVENTS",
            "DG_GAPS",
            "EV_GAPS",
            "AGENT_LOST",
            "DUPS",
            "PRECEDING",
            "SRC_CHG",
            "SOURCE"
        );
        for a in &self.agents {
            let clock = format!("{}/{}", a.clock_source, a.clock_state);
            let _ = writeln!(
                o,
                "{:<20} {:<16} {:<18} {:>10} {:>12} {:>8} {:>10} {:>10} {:>6} {:>10} {:>7} {:<21}",
                a.host,
                a.agent_id,
                clock,
                a.datagrams,
                a.events,
                a.datagram_gaps,
                a.event_gaps,
                a.agent_lost,
                a.duplicates,
                a.preceding_events,
                a.source_changes,
                a.source
            );
        }
        for (what, t) in [
            ("more live agents (fewest events)", &self.agents_not_listed),
            ("expired agents (idle)", &self.agents_expired),
        ] {
            if t.agents > 0 {
                let _ = writeln!(
                    o,
                    "... {} {what}: datagrams {} events {} dg_gaps {} ev_gaps {} agent_lost {} dups {} seq_jumps {}",
                    t.agents,
                    t.datagrams,
                    t.events,
                    t.datagram_gaps,
                    t.event_gaps,
                    t.agent_lost,
                    t.duplicates,
                    t.seq_jumps
                );
            }
        }
        o
    }
}
