//! Counters shared by the receive task and the writer thread, and the
//! [`SinkStats`] snapshot of them (its fields and its human table are in
//! `report.rs`).

mod live;
mod report;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use tracer_codec::{ClockState, DecodeError};

use crate::agents::{AgentState, AgentTable, AgentTotals, SINK_REASONS};
use crate::freshness::{Freshness, FRESHNESS_REASONS};
use crate::peers::{Peer, PeerTable, SinkKeys, AUTH_REASONS};

pub use live::LiveStats;
pub(crate) use live::{add, LiveCounters};
pub use report::{clock_source_name, AgentStats, SinkStats};

/// Distinct source addresses whose rejects are counted separately; the
/// rest are added up under [`OTHER_SOURCES`] (a spoofed flood must not grow
/// memory without bound).
pub const MAX_REJECT_SOURCES: usize = 1024;
/// Key of the rejects of sources beyond [`MAX_REJECT_SOURCES`].
pub const OTHER_SOURCES: &str = "other";

/// Counters of the receive task.
#[derive(Debug, Default)]
pub(crate) struct ReceiveCounters {
    pub tags_unchecked: u64,
    pub acks_sent: u64,
    pub datagrams_received: u64,
    /// UDP payload bytes read from the socket (added once per burst).
    pub bytes_received: u64,
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
    /// Events in the reorder buffer when the writer last published.
    pub reorder_held: u64,
    pub bytes_written: u64,
    pub bytes_uncompressed: u64,
    pub compression: &'static str,
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
    /// The live outputs' counters, when one is configured.
    live: OnceLock<Arc<LiveCounters>>,
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
            live: OnceLock::new(),
        }
    }

    /// Report the live outputs' counters in every snapshot.
    pub fn set_live(&self, c: Arc<LiveCounters>) {
        let _ = self.live.set(c);
    }

    /// The live outputs' counts now, when one is configured (atomics,
    /// read without the lock).
    pub fn live_stats(&self) -> Option<LiveStats> {
        self.live.get().map(|c| c.snapshot())
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
            bytes_received: rx.bytes_received,
            datagrams_accepted: rx.datagrams_accepted,
            datagrams_rejected: rx.rejects.values().sum(),
            events_accepted: rx.events_accepted,
            events_written: wr.events_written,
            sink_write_lost: wr.sink_write_lost,
            events_out_of_order: wr.events_out_of_order,
            reorder_overflow: wr.reorder_overflow,
            reorder_held: wr.reorder_held,
            bytes_written: wr.bytes_written,
            bytes_uncompressed: wr.bytes_uncompressed,
            compression: wr.compression.to_owned(),
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
            live: self.live_stats(),
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
