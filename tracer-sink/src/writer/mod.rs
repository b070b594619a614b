//! The writer thread: reorders accepted events, encodes them into pcapng,
//! rotates files, and survives write failures (counting what it loses).
//!
//! [`Writer`] holds the events until their time ([`held`]) and hands each
//! to the [`Output`], which writes it into the current file
//! ([`events`]), opens, rotates and closes files ([`files`]), and tells
//! the agents what was delivered ([`delivery`]).

mod delivery;
mod events;
mod files;
mod held;
mod live;

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc::Receiver;

use crate::agents::ExpiredAgent;
use crate::batch::{AgentInfo, Batch, BatchPool, ToWriter};
use crate::config::SinkConfig;
use crate::live::LiveOutputs;
use crate::pcapng::{IsbInfo, TraceFile};
use crate::reorder::Release;
use crate::stats::{Shared, WriterCounters};
use crate::summary::Summarizer;

use delivery::Delivery;
use held::Held;
use live::{LiveAgent, LiveAgents};

/// How many events ahead of the one written the writer fetches records
/// into the cache (their metadata twice as far ahead).
const PREFETCH_AHEAD: usize = 8;

/// Writer state; lives on its own thread for the whole run.
struct Writer {
    /// Events waiting for their time, and their batches.
    held: Held,
    /// Where written batches go back to the receive task.
    pool: Arc<BatchPool>,
    /// Events taken from the reorder buffer to write now (kept for reuse).
    run: Vec<(u64, held::EventRef)>,
    out: Output,
}

/// Everything that writes: files, counters, agents, acknowledgements.
struct Output {
    cfg: SinkConfig,
    shared: Arc<Shared>,
    /// Live agents by index.
    agents: LiveAgents,
    /// ISBs of the agents that expired while the current file was open
    /// (their interfaces are in it; the next file does not list them).
    retired: Vec<IsbInfo>,
    file: Option<TraceFile>,
    /// Files opened so far: tells an agent's interface id in an earlier
    /// file from one in this file.
    file_gen: u64,
    /// Next file number (NNN of the name).
    file_seq: u32,
    /// When to try again to open a file after a failure.
    retry_at: Option<Instant>,
    counters: WriterCounters,
    /// Bytes committed to files already closed (or abandoned).
    closed_bytes: u64,
    /// Their uncompressed pcapng bytes.
    closed_raw: u64,
    last_ts: u64,
    summarizer: Summarizer,
    delivery: Delivery,
    /// The live interface and stream, if configured.
    live: Option<LiveOutputs>,
}

/// Run the writer until the channel closes; then flush and close the file.
pub(crate) fn run_writer(
    cfg: SinkConfig,
    shared: Arc<Shared>,
    pool: Arc<BatchPool>,
    mut rx: Receiver<ToWriter>,
    ack_socket: Option<std::net::UdpSocket>,
    live: Option<LiveOutputs>,
) {
    let compression = cfg.compression.name();
    let mut w = Writer {
        held: Held::new(cfg.reorder_window, cfg.reorder_max_events),
        pool,
        run: Vec::new(),
        out: Output {
            cfg,
            shared,
            agents: LiveAgents::default(),
            retired: Vec::new(),
            file: None,
            file_gen: 0,
            file_seq: 0,
            retry_at: None,
            counters: WriterCounters {
                compression,
                ..WriterCounters::default()
            },
            closed_bytes: 0,
            closed_raw: 0,
            last_ts: 0,
            summarizer: Summarizer::default(),
            delivery: Delivery::new(ack_socket),
            live,
        },
    };
    w.out.open_file();
    while let Some(msg) = rx.blocking_recv() {
        match msg {
            ToWriter::Agent(a) => w.out.add_agent(a),
            ToWriter::Batch(b) => w.add_batch(b),
            ToWriter::Tick => w.out.tick(),
            ToWriter::Expire(a) => w.out.expire(a),
        }
        w.release_due();
        if let Some(l) = w.out.live.as_mut() {
            l.flush();
        }
        w.out.maybe_rotate();
        w.out.counters.reorder_held = w.held.len() as u64;
        w.out.publish();
    }
    w.finish();
    w.out.counters.reorder_held = w.held.len() as u64;
    w.out.publish();
}

impl Writer {
    fn add_batch(&mut self, b: Batch) {
        let agents = &mut self.out.agents;
        // Events of one datagram come in a run: one lookup per run.
        let mut run: Option<(u32, u64)> = None;
        let mut count = |agent: Option<u32>| {
            if let Some((a, n)) = run {
                if Some(a) == agent {
                    run = Some((a, n + 1));
                    return;
                }
                if let Some(x) = agents.get_mut(a) {
                    x.received += n;
                }
            }
            run = agent.map(|a| (a, 1));
        };
        self.held.add(b, &self.pool, |m| count(Some(m.agent)));
        count(None);
    }

    /// Write every event whose time has come: the due ones a bucket at a
    /// time, then the oldest while the buffer is over its bound.
    fn release_due(&mut self) {
        let wm = self.held.watermark(Instant::now());
        let mut run = std::mem::take(&mut self.run);
        while self.held.pop_due_run(wm, &mut run) > 0 {
            for (k, &(ts, e)) in run.iter().enumerate() {
                // The events were received a reorder window ago and left
                // the cache since: fetch the metadata of one further ahead
                // and the record of a nearer one while this one is written.
                if let Some(&(_, a)) = run.get(k + 2 * PREFETCH_AHEAD) {
                    self.held.prefetch_meta(a);
                }
                if let Some(&(_, a)) = run.get(k + PREFETCH_AHEAD) {
                    self.held.prefetch_record(a);
                }
                if let Some((b, i)) = self.held.get(e) {
                    self.out.write_one(ts, b, i);
                }
                self.held.done(e, &self.pool);
            }
            run.clear();
        }
        self.run = run;
        while let Some((ts, e, why)) = self.held.pop_due(wm) {
            if why == Release::Overflow {
                self.out.counters.reorder_overflow += 1;
            }
            if let Some((b, i)) = self.held.get(e) {
                self.out.write_one(ts, b, i);
            }
            self.held.done(e, &self.pool);
        }
    }

    /// Write everything held (shutdown).
    fn release_all(&mut self) {
        while let Some((ts, e)) = self.held.pop_any() {
            if let Some((b, i)) = self.held.get(e) {
                self.out.write_one(ts, b, i);
            }
            self.held.done(e, &self.pool);
        }
    }

    fn finish(&mut self) {
        if self.out.file.is_none() {
            // One last chance for a fresh file before the buffered events
            // are given up as lost.
            self.out.retry_at = None;
            self.out.open_file();
        }
        self.release_all();
        if let Some(l) = self.out.live.as_mut() {
            l.close();
        }
        self.out.close_file();
    }
}

impl Output {
    fn publish(&mut self) {
        let mut st = self.shared.lock();
        if self.delivery.has_lost() {
            self.delivery.publish_lost(&mut st);
        }
        st.wr.clone_from(&self.counters);
    }

    fn add_agent(&mut self, a: AgentInfo) {
        let idx = a.index;
        self.agents.add(a);
        if let (Some(l), Some(a)) = (self.live.as_mut(), self.agents.get(idx)) {
            l.add_agent(&a.info);
        }
        // Emit the IDB now so every file lists every agent known when it
        // was written, even one whose events have not been written yet.
        self.ensure_interface(idx);
    }

    fn expire(&mut self, a: ExpiredAgent) {
        let ifrecv = self.agents.remove(a.index).map_or(0, |x| x.received);
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

    fn tick(&mut self) {
        if self.file.is_none() {
            self.open_file();
        } else if let Some(f) = self.file.as_mut() {
            // Get a quiet sink's events onto disk within a tick.
            match f.commit() {
                Ok(n) => {
                    self.counters.events_written += n;
                    self.delivery.settle(&self.shared, None);
                }
                Err(fail) => self.on_failure(fail),
            }
            self.sync_bytes();
        }
    }
}
