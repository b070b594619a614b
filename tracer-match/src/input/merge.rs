//! Several pcapng files merged into one stream in global-time order.
//!
//! The files may be a sink's rotated files, the files of several sinks, or
//! both, given in any order. Each file is already nearly in time order
//! (the sink writes through its own reorder window), so a k-way merge with
//! a bounded window suffices: the next event is always read from the file
//! that is furthest behind, and an event is released once every file still
//! open has read past its timestamp plus the window. Memory is bounded by
//! the events of one window (and by `max_held`), not by the trace.
//!
//! Held events wait in one queue per file, kept sorted by insertion from
//! the back (a file is nearly ordered, so that is almost always a push);
//! a small heap over the queues' heads picks the next event. Cheaper than
//! one heap over every held event, whose sift-downs miss the cache.
//! An event older than one already released is still delivered, and
//! counted as late.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::path::{Path, PathBuf};

use serde::Serialize;
use tracer_codec::{CaptureRecord, ClockState, Event};

use super::file::TraceInput;
use super::pcapng::{Block, PcapngReader};
use super::{Ev, HostId, HostTable, Input};
use crate::error::MatchError;

/// Read buffer per file: small, since many rotated files may be open.
const READ_BUF: usize = 64 << 10;

/// How the files are merged.
#[derive(Debug, Clone, Copy)]
pub struct MergeConfig {
    /// An event is released once every open file has read this far past it.
    pub reorder_window_ns: u64,
    /// Most events held; past it the oldest is released at once (counted).
    pub max_held: usize,
}

impl Default for MergeConfig {
    fn default() -> Self {
        MergeConfig {
            reorder_window_ns: 100_000_000,
            max_held: 2_000_000,
        }
    }
}

/// What reading the files met.
#[derive(Debug, Clone, Default, Serialize)]
pub struct InputStats {
    /// Files read.
    pub files: Vec<String>,
    /// Events read (every kind).
    pub events: u64,
    /// Events of the kinds the matcher uses (TX, RX, TCP, CLOCK, CPU).
    pub used: u64,
    /// Events released after a later one (out of order by more than the
    /// window): still matched, but possibly after their partners.
    pub late: u64,
    /// Events released early because `max_held` was reached.
    pub overflow: u64,
    /// Frames whose capture record could not be decoded.
    pub decode_errors: u64,
    /// Frames with a zero global timestamp (skipped).
    pub no_timestamp: u64,
    /// Frames of an interface their section never declared (skipped:
    /// no host, no time base).
    pub undeclared_interface: u64,
    /// Files that ended inside a block or held a bad one; what came
    /// before was used. (file, what)
    pub damaged_files: Vec<(String, String)>,
    /// Most events held at once by the reorder window.
    pub peak_held: usize,
}

/// An ISB total of one agent, from the file where it was largest.
#[derive(Debug, Clone, Copy, Default)]
pub struct AgentTotals {
    /// Host of the agent.
    pub host: HostId,
    /// `isb_ifrecv`: events the sink received from it.
    pub ifrecv: u64,
    /// `isb_ifdrop`: events lost before the sink wrote them.
    pub ifdrop: u64,
}

struct Source {
    path: PathBuf,
    /// `None` once the file is read to its end (closed).
    reader: Option<PcapngReader<TraceInput>>,
    /// Its events read and not yet released, in key order.
    queue: VecDeque<Held>,
}

/// An event held for reordering. Equal timestamps are ordered by agent
/// and event number, so the stream does not depend on how the events were
/// cut into files.
struct Held {
    ts: u64,
    agent: u64,
    seq: u64,
    input: Input,
}

/// Order of held events: timestamp, then agent id and event number.
type Key = (u64, u64, u64);

impl Held {
    fn key(&self) -> Key {
        (self.ts, self.agent, self.seq)
    }
}

/// The merged stream.
pub struct Merge {
    cfg: MergeConfig,
    sources: Vec<Source>,
    /// Open sources by how far they have read (smallest first).
    frontier: BinaryHeap<Reverse<(u64, usize)>>,
    /// Queue heads: (key of the head, source). An entry whose key is no
    /// longer its source's head is stale and skipped.
    heads: BinaryHeap<Reverse<(Key, usize)>>,
    /// Events held over all queues.
    held: usize,
    released: u64,
    hosts: HostTable,
    totals: HashMap<u64, AgentTotals>,
    stats: InputStats,
}

impl Merge {
    /// Open every file (an error names the file that failed).
    pub fn open(paths: &[PathBuf], cfg: MergeConfig) -> Result<Self, MatchError> {
        let mut sources = Vec::with_capacity(paths.len());
        for p in paths {
            let f = TraceInput::open(p, READ_BUF).map_err(|source| MatchError::Open {
                path: p.clone(),
                source,
            })?;
            sources.push(Source {
                path: p.clone(),
                reader: Some(PcapngReader::new(f)),
                queue: VecDeque::new(),
            });
        }
        let frontier = (0..sources.len()).map(|i| Reverse((0, i))).collect();
        Ok(Merge {
            cfg,
            stats: InputStats {
                files: paths.iter().map(|p| p.display().to_string()).collect(),
                ..InputStats::default()
            },
            sources,
            frontier,
            heads: BinaryHeap::new(),
            held: 0,
            released: 0,
            hosts: HostTable::default(),
            totals: HashMap::new(),
        })
    }

    /// Hosts seen so far.
    pub fn hosts(&self) -> &HostTable {
        &self.hosts
    }

    /// What reading met so far.
    pub fn stats(&self) -> &InputStats {
        &self.stats
    }

    /// ISB totals per agent id (largest over the files: the sink's counts
    /// are cumulative over its run, so its last file has them all).
    pub fn agent_totals(&self) -> &HashMap<u64, AgentTotals> {
        &self.totals
    }

    fn watermark(&self) -> u64 {
        match self.frontier.peek() {
            Some(Reverse((f, _))) => f.saturating_sub(self.cfg.reorder_window_ns),
            None => u64::MAX,
        }
    }

    /// The smallest held event's key and source, dropping stale heads.
    fn head(&mut self) -> Option<(Key, usize)> {
        while let Some(&Reverse((key, i))) = self.heads.peek() {
            if self.sources[i].queue.front().map(Held::key) == Some(key) {
                return Some((key, i));
            }
            self.heads.pop();
        }
        None
    }

    /// The next event in global-time order; `None` when every file is read.
    pub fn next_event(&mut self) -> Result<Option<Input>, MatchError> {
        loop {
            if let Some((key, i)) = self.head() {
                let full = self.held > self.cfg.max_held;
                let wm = self.watermark();
                if key.0 <= wm || full {
                    self.heads.pop();
                    let Some(h) = self.sources[i].queue.pop_front() else {
                        unreachable!("a live head")
                    };
                    self.held -= 1;
                    let src = &mut self.sources[i];
                    if let Some(next) = src.queue.front() {
                        self.heads.push(Reverse((next.key(), i)));
                    } else if src.reader.is_none() {
                        // A file read to its end: give its queue's
                        // memory back (rotated files are read one after
                        // the other, each filling its queue once).
                        src.queue = VecDeque::new();
                    }
                    if full && h.ts > wm {
                        self.stats.overflow += 1;
                    }
                    if h.ts < self.released {
                        self.stats.late += 1;
                    } else {
                        self.released = h.ts;
                    }
                    return Ok(Some(h.input));
                }
            }
            let Some(Reverse((f, idx))) = self.frontier.pop() else {
                if self.held == 0 {
                    return Ok(None);
                }
                continue;
            };
            if let Some(input) = self.read_one(idx)? {
                let ts = input.ts_ns;
                self.frontier.push(Reverse((f.max(ts), idx)));
                let h = Held {
                    ts,
                    agent: input.agent_id,
                    seq: input.event_seq,
                    input,
                };
                let key = h.key();
                let q = &mut self.sources[idx].queue;
                // Insert from the back: nearly always a push.
                let mut at = q.len();
                while at > 0 && q[at - 1].key() > key {
                    at -= 1;
                }
                q.insert(at, h);
                if at == 0 {
                    self.heads.push(Reverse((key, idx)));
                }
                self.held += 1;
                self.stats.peak_held = self.stats.peak_held.max(self.held);
            }
        }
    }

    /// The next usable event of one file; `None` at its end (the file is
    /// then closed: it is not pushed back on the frontier).
    fn read_one(&mut self, idx: usize) -> Result<Option<Input>, MatchError> {
        loop {
            let src = &mut self.sources[idx];
            let Some(reader) = src.reader.as_mut() else {
                return Ok(None);
            };
            let block = match reader.next_block() {
                Ok(Some(b)) => b,
                Ok(None) => {
                    // A compressed file cut inside a frame ends cleanly
                    // at its last whole frame: still say it was damaged.
                    if let Some(why) = reader.get_ref().damage() {
                        let path = src.path.display().to_string();
                        tracing::info!(file = %path, error = %why, "stopped reading this file; the events before this point are used");
                        self.stats.damaged_files.push((path, why.to_owned()));
                    }
                    src.reader = None;
                    return Ok(None);
                }
                Err(e @ (MatchError::Truncated { .. } | MatchError::BadBlock { .. })) => {
                    let path = src.path.display().to_string();
                    tracing::info!(file = %path, error = %e, "stopped reading this file; the events before this point are used");
                    self.stats.damaged_files.push((path, e.to_string()));
                    src.reader = None;
                    return Ok(None);
                }
                Err(e) => {
                    return Err(MatchError::InFile {
                        path: src.path.clone(),
                        source: Box::new(e),
                    })
                }
            };
            match block {
                Block::Packet { data, ts_ns, .. } => {
                    self.stats.events += 1;
                    let Ok(cap) = CaptureRecord::decode(data) else {
                        self.stats.decode_errors += 1;
                        continue;
                    };
                    let ev = match cap.record.decode() {
                        Ok(Event::Tx(e)) => Ev::Tx(e),
                        Ok(Event::Rx(e)) => Ev::Rx(e),
                        Ok(Event::Tcp(e)) => Ev::Tcp(e),
                        Ok(Event::Clock(e)) => Ev::Clock(e),
                        Ok(Event::Cpu(e)) => Ev::Cpu(e),
                        Ok(_) => Ev::Other,
                        Err(_) => {
                            self.stats.decode_errors += 1;
                            continue;
                        }
                    };
                    let ts = match &ev {
                        Ev::Tx(e) => e.global_ns,
                        Ev::Rx(e) => e.global_ns,
                        Ev::Tcp(e) => e.global_ns,
                        Ev::Clock(e) => e.global_ns,
                        Ev::Cpu(e) => e.global_ns,
                        Ev::Other => 0,
                    };
                    let ts = if ts == 0 { ts_ns } else { ts };
                    if ts == 0 {
                        self.stats.no_timestamp += 1;
                        continue;
                    }
                    if !matches!(ev, Ev::Other) {
                        self.stats.used += 1;
                    }
                    let host = self.hosts.intern(cap.agent_id, cap.host);
                    return Ok(Some(Input {
                        ts_ns: ts,
                        host,
                        agent_id: cap.agent_id,
                        event_seq: cap.event_seq,
                        clock_source: cap.clock_source,
                        clock_locked: ClockState::is_locked_code(cap.clock_state),
                        ev,
                    }));
                }
                Block::Stats {
                    iface,
                    ifrecv,
                    ifdrop,
                } => {
                    let Some(i) = src
                        .reader
                        .as_ref()
                        .and_then(|r| r.interfaces().get(iface as usize))
                    else {
                        continue;
                    };
                    let (name, agent) = (i.name.clone(), i.agent_id);
                    let Some(agent) = agent else { continue };
                    let host = self.hosts.intern(agent, &name);
                    let t = self.totals.entry(agent).or_insert(AgentTotals {
                        host,
                        ..AgentTotals::default()
                    });
                    t.ifrecv = t.ifrecv.max(ifrecv.unwrap_or(0));
                    t.ifdrop = t.ifdrop.max(ifdrop.unwrap_or(0));
                }
                Block::Undeclared { iface } => {
                    self.stats.events += 1;
                    self.stats.undeclared_interface += 1;
                    if self.stats.undeclared_interface == 1 {
                        tracing::warn!(file = %src.path.display(), iface, "skipping packets of an interface the file never declared");
                    }
                }
                Block::Other => {}
            }
        }
    }
}

/// The trace files named: files as given, directories expanded to the
/// `.pcapng` and `.pcapng.zst` files inside (sorted by name).
pub fn expand_inputs(args: &[PathBuf]) -> Result<Vec<PathBuf>, MatchError> {
    let mut out = Vec::new();
    for a in args {
        if Path::new(a).is_dir() {
            let mut v: Vec<PathBuf> = std::fs::read_dir(a)
                .map_err(|source| MatchError::Open {
                    path: a.clone(),
                    source,
                })?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| is_trace_name(p))
                .collect();
            v.sort();
            out.extend(v);
        } else {
            out.push(a.clone());
        }
    }
    Ok(out)
}

/// Whether a file in a directory is a trace by its name: `.pcapng` or
/// `.pcapng.zst` (a file named explicitly is read whatever its name).
pub fn is_trace_name(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(".pcapng") || n.ends_with(".pcapng.zst"))
}
