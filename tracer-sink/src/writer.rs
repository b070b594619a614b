//! The writer thread: reorders accepted events, encodes them into pcapng,
//! rotates files, and survives write failures (counting what it loses).

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc::Receiver;
use tracer_codec::CaptureRecord;

use crate::agents::ExpiredAgent;
use crate::batch::{AgentInfo, Batch, BatchPool, ToWriter};
use crate::config::SinkConfig;
use crate::pcapng::{IsbInfo, TraceFile, WriteFailure};
use crate::reorder::{Release, ReorderBuffer};
use crate::stats::{Shared, WriterCounters};
use crate::summary::Summarizer;

/// Writer state; lives on its own thread for the whole run.
pub(crate) struct Writer {
    cfg: SinkConfig,
    shared: Arc<Shared>,
    /// Live agents by index.
    agents: HashMap<u32, AgentInfo>,
    /// Events handed to the writer per live agent (the ISB `isb_ifrecv`).
    received: HashMap<u32, u64>,
    /// ISBs of the agents that expired while the current file was open
    /// (their interfaces are in it; the next file does not list them).
    retired: Vec<IsbInfo>,
    reorder: ReorderBuffer<(Rc<Batch>, u32)>,
    file: Option<TraceFile>,
    /// Next file number (NNN of the name).
    file_seq: u32,
    /// When to try again to open a file after a failure.
    retry_at: Option<Instant>,
    counters: WriterCounters,
    /// Bytes committed to files already closed (or abandoned).
    closed_bytes: u64,
    last_ts: u64,
    summarizer: Summarizer,
    /// Where written batches go back to the receive task.
    pool: Arc<BatchPool>,
    /// Per agent: events encoded into the file's buffer, not yet written
    /// (they become delivered or lost at the next commit).
    uncommitted: HashMap<u32, u64>,
    /// Agents with `uncommitted` events.
    dirty: Vec<u32>,
    /// Where acknowledgements go right after a commit.
    ack_socket: Option<std::net::UdpSocket>,
    /// Per agent: events it could not write at all since the last publish
    /// (a full disk loses them at the arrival rate: counted here, handed to
    /// the shared state once per message, not once per event).
    lost_pending: Vec<(u32, u64)>,
}

/// Run the writer until the channel closes; then flush and close the file.
pub(crate) fn run_writer(
    cfg: SinkConfig,
    shared: Arc<Shared>,
    pool: Arc<BatchPool>,
    mut rx: Receiver<ToWriter>,
    ack_socket: Option<std::net::UdpSocket>,
) {
    let mut w = Writer {
        pool,
        reorder: ReorderBuffer::new(cfg.reorder_window, cfg.reorder_max_events),
        cfg,
        shared,
        agents: HashMap::new(),
        received: HashMap::new(),
        retired: Vec::new(),
        file: None,
        file_seq: 0,
        retry_at: None,
        counters: WriterCounters::default(),
        closed_bytes: 0,
        last_ts: 0,
        summarizer: Summarizer::default(),
        uncommitted: HashMap::new(),
        dirty: Vec::new(),
        ack_socket,
        lost_pending: Vec::new(),
    };
    w.open_file();
    while let Some(msg) = rx.blocking_recv() {
        match msg {
            ToWriter::Agent(a) => w.add_agent(a),
            ToWriter::Batch(b) => w.add_batch(b),
            ToWriter::Tick => w.tick(),
            ToWriter::Expire(a) => w.expire(a),
        }
        w.release_due();
        w.maybe_rotate();
        w.publish();
    }
    w.finish();
    w.publish();
}

fn unix_now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Writer {
    /// One more event of `agent` in the file's buffer.
    fn note_written(&mut self, agent: u32) {
        let n = self.uncommitted.entry(agent).or_insert(0);
        if *n == 0 {
            self.dirty.push(agent);
        }
        *n += 1;
    }

    /// The buffer was written (`failed`: `None`) or its write failed
    /// (`failed`: the events per agent that still reached the file): the
    /// events of every agent in it are now delivered or lost, which is
    /// what the acknowledgements tell the agents.
    fn settle(&mut self, failed: Option<&[(u32, u64)]>) {
        if self.dirty.is_empty() {
            return;
        }
        let acks = {
            let mut st = self.shared.lock();
            for &a in &self.dirty {
                let n = self.uncommitted.remove(&a).unwrap_or(0);
                let delivered = match failed {
                    None => n,
                    Some(w) => w
                        .iter()
                        .find(|(i, _)| *i == a)
                        .map_or(0, |&(_, k)| k.min(n)),
                };
                st.peers.add_delivery(a, delivered, n - delivered);
            }
            let crate::stats::SharedState { agents, peers, .. } = &mut *st;
            peers.due_acks_for(self.dirty.iter().copied(), |i| {
                agents.agents.get(&i).map_or(0, |a| a.seq.event_gaps)
            })
        };
        self.dirty.clear();
        if let Some(sock) = &self.ack_socket {
            let mut sent = 0;
            for (to, bytes) in acks {
                // The socket is non-blocking (tokio's): an ack that does
                // not fit now goes out with a later one.
                if sock.send_to(&bytes, to).is_ok() {
                    sent += 1;
                }
            }
            self.shared.lock().rx.acks_sent += sent;
        }
    }

    /// An event of `agent` the sink could not write at all.
    fn lost_one(&mut self, agent: u32) {
        self.counters.sink_write_lost += 1;
        match self.lost_pending.last_mut() {
            Some((a, n)) if *a == agent => *n += 1,
            _ => self.lost_pending.push((agent, 1)),
        }
    }

    fn publish(&mut self) {
        if !self.lost_pending.is_empty() {
            let mut st = self.shared.lock();
            for (a, n) in self.lost_pending.drain(..) {
                st.peers.add_delivery(a, 0, n);
            }
        }
        self.shared.lock().wr = self.counters.clone();
    }

    fn add_agent(&mut self, a: AgentInfo) {
        let idx = a.index;
        self.agents.insert(idx, a);
        self.received.entry(idx).or_insert(0);
        // Emit the IDB now so every file lists every agent known when it
        // was written, even one whose events have not been written yet.
        self.ensure_interface(idx);
    }

    fn expire(&mut self, a: ExpiredAgent) {
        self.agents.remove(&a.index);
        let ifrecv = self.received.remove(&a.index).unwrap_or(0);
        if self
            .file
            .as_ref()
            .and_then(|f| f.interface(a.index))
            .is_some()
        {
            self.retired.push(IsbInfo {
                agent: a.index,
                ifrecv,
                ifdrop: a.ifdrop,
                comment: a.comment,
            });
        }
    }

    fn ensure_interface(&mut self, agent: u32) -> Option<u32> {
        let file = self.file.as_mut()?;
        if let Some(id) = file.interface(agent) {
            return Some(id);
        }
        let info = self.agents.get(&agent)?;
        match file.add_interface(info) {
            Ok(id) => Some(id),
            Err(e) => {
                tracing::error!(
                    error = &e as &dyn std::error::Error,
                    "cannot describe agent interface"
                );
                None
            }
        }
    }

    fn add_batch(&mut self, b: Batch) {
        let arrived = b.arrived;
        let max_ts = b.max_ts;
        let b = Rc::new(b);
        for (i, m) in b.events.iter().enumerate() {
            if let Some(n) = self.received.get_mut(&m.agent) {
                *n += 1;
            }
            self.reorder.push(m.ts_ns, (Rc::clone(&b), i as u32));
        }
        self.reorder.note_arrival(arrived, max_ts);
    }

    fn tick(&mut self) {
        if self.file.is_none() {
            self.open_file();
        } else if let Some(f) = self.file.as_mut() {
            // Get a quiet sink's events onto disk within a tick.
            match f.commit() {
                Ok(n) => {
                    self.counters.events_written += n;
                    self.settle(None);
                }
                Err(fail) => self.on_failure(fail),
            }
            self.sync_bytes();
        }
    }

    /// Write every event whose time has come.
    fn release_due(&mut self) {
        let wm = self.reorder.watermark(Instant::now());
        while let Some((ts, (b, i), why)) = self.reorder.pop_due(wm) {
            if why == Release::Overflow {
                self.counters.reorder_overflow += 1;
            }
            self.write_one(ts, &b, i as usize);
            self.recycle(b);
        }
    }

    /// Hand a batch back to the receive task once its last event is written.
    fn recycle(&self, b: Rc<Batch>) {
        if let Ok(b) = Rc::try_unwrap(b) {
            self.pool.give(b);
        }
    }

    /// Write everything held (rotation, shutdown).
    fn release_all(&mut self) {
        while let Some((ts, (b, i))) = self.reorder.pop_any() {
            self.write_one(ts, &b, i as usize);
            self.recycle(b);
        }
    }

    fn write_one(&mut self, ts: u64, b: &Batch, i: usize) {
        if ts < self.last_ts {
            self.counters.events_out_of_order += 1;
        } else {
            self.last_ts = ts;
        }
        let m = b.events[i];
        let Some(iface) = self.ensure_interface(m.agent) else {
            return self.lost_one(m.agent);
        };
        let rec = b.record(i);
        let Some(agent) = self.agents.get(&m.agent) else {
            return self.lost_one(m.agent);
        };
        let Some(file) = self.file.as_mut() else {
            return self.lost_one(m.agent);
        };
        let comments = self.cfg.comments;
        let summarizer = &mut self.summarizer;
        let written = file.write_event_with(
            iface,
            ts,
            m.event_seq,
            |out| {
                CaptureRecord::encode(
                    out,
                    agent.agent_id,
                    m.event_seq,
                    m.clock_source,
                    m.clock_state,
                    &agent.host,
                    rec,
                )
            },
            |out| {
                if comments {
                    // The receiver validated the record; decode again here
                    // so the summary's cost lands on the writer's core, not
                    // the receiver's.
                    summarizer.summarize_record(rec, out);
                }
            },
        );
        let commit = match written {
            Ok(()) => file.maybe_commit(),
            Err(e) => {
                tracing::error!(error = &e as &dyn std::error::Error, "cannot encode event");
                return self.lost_one(m.agent);
            }
        };
        self.note_written(m.agent);
        match commit {
            Ok(0) => {}
            Ok(n) => {
                self.counters.events_written += n;
                self.settle(None);
                self.sync_bytes();
            }
            Err(fail) => return self.on_failure(fail),
        }
        // Size rotation per event, so files stay close to the limit even
        // when a large batch is released at once.
        if self
            .cfg
            .rotate_size_bytes
            .is_some_and(|s| self.file.as_ref().is_some_and(|f| f.len() >= s))
        {
            self.rotate();
        }
    }

    /// Close the current file and open the next one. The reorder buffer is
    /// deliberately not flushed: the file boundary is just a cut in the
    /// time-ordered stream, so the concatenation of all files stays in
    /// order and a file does not overshoot the size limit by a whole
    /// window of events.
    fn rotate(&mut self) {
        self.close_file();
        self.open_file();
    }

    fn sync_bytes(&mut self) {
        if let Some(f) = &self.file {
            if self.counters.current_file.is_none() {
                self.counters.current_file = Some(f.path().display().to_string());
            }
            // bytes_written = closed files + this file's committed bytes.
            self.counters.bytes_written = self.closed_bytes + f.committed();
        }
    }

    fn on_failure(&mut self, fail: WriteFailure) {
        self.counters.sink_write_lost += fail.lost_events;
        self.counters.events_written += fail.written_events;
        self.settle(Some(&fail.written_by_agent));
        let path = self
            .file
            .as_ref()
            .map(|f| f.path().display().to_string())
            .unwrap_or_default();
        if self.file.take().is_some() {
            self.closed_bytes += fail.file_bytes;
        }
        self.counters.bytes_written = self.closed_bytes;
        self.counters.current_file = None;
        self.retry_at = Some(Instant::now() + self.cfg.retry_interval);
        let what = if fail.removed {
            "write failed; the file held no event and was removed"
        } else {
            "write failed; the file keeps every whole block that fitted and was closed"
        };
        tracing::error!(
            file = %path,
            error = &fail.error as &dyn std::error::Error,
            lost_events = fail.lost_events,
            written_events = fail.written_events,
            "{what}. Free space on the output file system (or fix its permissions); the sink keeps \
             receiving, counts unwritten events as sink_write_lost and tries a new file every {:?}",
            self.cfg.retry_interval
        );
    }

    /// Open a new file (respecting the retry delay after a failure).
    fn open_file(&mut self) {
        if let Some(at) = self.retry_at {
            if Instant::now() < at {
                return;
            }
        }
        match TraceFile::create(
            &self.cfg.output_dir,
            &self.cfg.file_prefix,
            self.file_seq,
            unix_now_s(),
        ) {
            Ok((f, used)) => {
                self.file_seq = used + 1;
                self.counters.files += 1;
                if self.retry_at.take().is_some() {
                    tracing::info!(file = %f.path().display(), "writing again after a failure");
                } else {
                    tracing::info!(file = %f.path().display(), "new trace file");
                }
                self.file = Some(f);
                let mut live: Vec<u32> = self.agents.keys().copied().collect();
                live.sort_unstable();
                for i in live {
                    self.ensure_interface(i);
                }
                self.sync_bytes();
            }
            Err(e) => {
                self.retry_at = Some(Instant::now() + self.cfg.retry_interval);
                tracing::error!(
                    dir = %self.cfg.output_dir.display(),
                    error = &e as &dyn std::error::Error,
                    "cannot open a trace file; check that the --output directory is writable and \
                     its file system has space. Events are counted as sink_write_lost until a file \
                     opens; retrying every {:?}",
                    self.cfg.retry_interval
                );
            }
        }
    }

    fn maybe_rotate(&mut self) {
        let Some(f) = &self.file else { return };
        let by_size = self.cfg.rotate_size_bytes.is_some_and(|s| f.len() >= s);
        let by_time = self.cfg.rotate_interval.is_some_and(|t| f.age() >= t);
        if by_size || by_time {
            self.rotate();
        }
    }

    fn isbs(&mut self) -> Vec<IsbInfo> {
        let mut v = std::mem::take(&mut self.retired);
        let s = self.shared.lock();
        v.extend(s.agents.agents.values().map(|a| IsbInfo {
            agent: a.index,
            ifrecv: self.received.get(&a.index).copied().unwrap_or(0),
            ifdrop: a.ifdrop(),
            // The peer's part: preceding_events, incarnation, sources,
            // conflicts (see `Peer::isb_comment`).
            comment: match s.peers.get(a.index) {
                Some(p) => a.isb_comment() + &p.isb_comment(),
                None => a.isb_comment(),
            },
        }));
        v
    }

    fn close_file(&mut self) {
        let Some(f) = self.file.take() else { return };
        let isbs = self.isbs();
        let path = f.path().display().to_string();
        let len = f.len();
        match f.close(&isbs, self.cfg.clock.now_ns()) {
            Ok(n) => {
                self.counters.events_written += n;
                self.settle(None);
                self.closed_bytes += len;
                tracing::info!(file = %path, bytes = len, "closed trace file");
            }
            Err(fail) => {
                self.file = None;
                self.closed_bytes += fail.file_bytes;
                self.counters.sink_write_lost += fail.lost_events;
                self.counters.events_written += fail.written_events;
                self.settle(Some(&fail.written_by_agent));
                self.retry_at = Some(Instant::now() + self.cfg.retry_interval);
                tracing::error!(file = %path, error = &fail.error as &dyn std::error::Error, lost_events = fail.lost_events,
                    removed = fail.removed,
                    "could not finish the trace file; it was cut back to its last complete block \
                     (removed if it held no event). Free space on the output file system");
            }
        }
        self.counters.bytes_written = self.closed_bytes;
        self.counters.current_file = None;
    }

    fn finish(&mut self) {
        if self.file.is_none() {
            // One last chance for a fresh file before the buffered events
            // are given up as lost.
            self.retry_at = None;
            self.open_file();
        }
        self.release_all();
        self.close_file();
    }
}
