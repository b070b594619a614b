//! Writing synthetic events into files laid out as one sink or one sink
//! per host would lay them out, through the sink's own writer
//! ([`TraceWriter`]): SHB, one IDB per host, one EPB per event whose
//! payload is the codec's capture record, ISBs with cumulative totals at
//! the end of each file.

use std::path::{Path, PathBuf};

use tracer_codec::WireEvent;
use tracer_match::input::Ev;
use tracer_sink::{Compression, InterfaceTotals, TraceAgent, TraceWriter};

use super::config::SynthConfig;
use super::sim::SynthEvent;

/// How synthetic events are laid out in files.
#[derive(Debug, Clone, Default)]
pub struct FileLayout {
    /// Start a new file after this many events (the sink's rotation).
    pub events_per_file: Option<u64>,
    /// One file series per host, as if each host had its own sink.
    pub per_host: bool,
}

/// The record bytes (kind, len, body) of an event.
pub fn record_bytes(ev: &Ev, out: &mut Vec<u8>) {
    fn put<E: WireEvent>(e: &E, out: &mut Vec<u8>) {
        out.extend_from_slice(&E::KIND.to_le_bytes());
        out.extend_from_slice(&(E::BODY_LEN as u16).to_le_bytes());
        e.encode_body(out);
    }
    match ev {
        Ev::Tx(e) => put(e, out),
        Ev::Rx(e) => put(e, out),
        Ev::Tcp(e) => put(e, out),
        Ev::Clock(e) => put(e, out),
        Ev::Cpu(e) => put(e, out),
        Ev::Other => {
            // An unknown kind, skipped by readers by its length.
            out.extend_from_slice(&999u16.to_le_bytes());
            out.extend_from_slice(&0u16.to_le_bytes());
        }
    }
}

struct OpenFile {
    w: TraceWriter,
    events: u64,
}

/// Writes synthetic events as the sink writes its files.
pub struct SynthWriter {
    dir: PathBuf,
    layout: FileLayout,
    names: [String; 2],
    agent_ids: [u64; 2],
    /// Open file per series (one series, or one per host).
    files: [Option<OpenFile>; 2],
    counters: [u32; 2],
    /// Cumulative events per host written and lost (the ISB totals).
    recv: [u64; 2],
    drop: [u64; 2],
    /// Files written, in creation order.
    pub paths: Vec<PathBuf>,
    /// The record of the event being written (kept to reuse its memory).
    rec: Vec<u8>,
}

fn io(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// The clock source every synthetic event claims (the sink's clock).
const CLOCK_SOURCE: u8 = 2;
/// Servo states of a locked and an unlocked clock.
const LOCKED_STABLE: u8 = 3;
const UNLOCKED: u8 = 0;

impl SynthWriter {
    /// Files go into `dir`.
    pub fn new(dir: &Path, cfg: &SynthConfig, layout: FileLayout) -> Self {
        SynthWriter {
            dir: dir.to_owned(),
            layout,
            names: cfg.names.clone(),
            agent_ids: cfg.agent_ids,
            files: [None, None],
            counters: [0, 0],
            recv: [0, 0],
            drop: [0, 0],
            paths: Vec::new(),
            rec: Vec::with_capacity(256),
        }
    }

    /// The hosts whose events go into file series `series`.
    fn hosts(&self, series: usize) -> impl Iterator<Item = usize> {
        let per_host = self.layout.per_host;
        (0..2).filter(move |&h| !per_host || h == series)
    }

    fn open(&mut self, series: usize) -> std::io::Result<()> {
        let name = if self.layout.per_host {
            format!("sink{series}-{:03}.pcapng", self.counters[series])
        } else {
            format!("trace-{:03}.pcapng", self.counters[series])
        };
        self.counters[series] += 1;
        let path = self.dir.join(name);
        let mut w = TraceWriter::create(&path, Compression::None).map_err(io)?;
        for h in self.hosts(series) {
            let agent = TraceAgent {
                clock_source: CLOCK_SOURCE,
                ..TraceAgent::new(self.agent_ids[h], &self.names[h])
            };
            w.add_agent(&agent).map_err(io)?;
        }
        self.paths.push(path);
        self.files[series] = Some(OpenFile { w, events: 0 });
        Ok(())
    }

    fn close(&mut self, series: usize) -> std::io::Result<()> {
        let Some(f) = self.files[series].take() else {
            return Ok(());
        };
        // Interfaces are the series' hosts, in order.
        let totals: Vec<InterfaceTotals> = self
            .hosts(series)
            .enumerate()
            .map(|(iface, h)| InterfaceTotals::new(iface as u32, self.recv[h], self.drop[h]))
            .collect();
        f.w.finish(&totals).map_err(io)?;
        Ok(())
    }

    /// Write one event; `dropped` is the host's cumulative lost events.
    pub fn write(&mut self, e: &SynthEvent, dropped: u64) -> std::io::Result<()> {
        let series = if self.layout.per_host { e.host } else { 0 };
        if self.files[series]
            .as_ref()
            .is_some_and(|f| self.layout.events_per_file.is_some_and(|n| f.events >= n))
        {
            self.close(series)?;
        }
        if self.files[series].is_none() {
            self.open(series)?;
        }
        self.recv[e.host] += 1;
        self.drop[e.host] = dropped;
        let iface = if self.layout.per_host {
            0
        } else {
            e.host as u32
        };
        self.rec.clear();
        record_bytes(&e.ev, &mut self.rec);
        let Some(f) = self.files[series].as_mut() else {
            return Err(io("no open file"));
        };
        let state = if e.locked { LOCKED_STABLE } else { UNLOCKED };
        f.w.write_event(iface, e.ts_ns, e.event_seq, CLOCK_SOURCE, state, &self.rec)
            .map_err(io)?;
        f.events += 1;
        Ok(())
    }

    /// Close every file (writing its ISBs).
    pub fn finish(mut self) -> std::io::Result<Vec<PathBuf>> {
        self.close(0)?;
        self.close(1)?;
        Ok(self.paths)
    }
}
