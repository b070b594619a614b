//! One event into the current file: its interface, its capture record
//! and EPB encoded in place, the commit when the buffer is full, and the
//! size rotation.

use tracer_codec::CaptureHeader;

use crate::batch::Batch;
use crate::pcapng::TraceFile;

use super::{LiveAgent, Output};

/// The interface id of `agent` in `file` (of generation `file_gen`),
/// writing its IDB first if the file has none yet; remembered in the agent.
pub(super) fn interface_of(
    file: &mut TraceFile,
    file_gen: u64,
    agent: &mut LiveAgent,
) -> Option<u32> {
    if let Some((g, id)) = agent.iface {
        if g == file_gen {
            return Some(id);
        }
    }
    let id = match file.interface(agent.info.index) {
        Some(id) => id,
        None => match file.add_interface(&agent.info) {
            Ok(id) => id,
            Err(e) => {
                tracing::error!(
                    error = &e as &dyn std::error::Error,
                    "cannot describe agent interface"
                );
                return None;
            }
        },
    };
    agent.iface = Some((file_gen, id));
    Some(id)
}

impl Output {
    /// The interface id of a live `agent` in the current file, writing its
    /// IDB first if the file has none yet.
    pub(super) fn ensure_interface(&mut self, agent: u32) -> Option<u32> {
        interface_of(
            self.file.as_mut()?,
            self.file_gen,
            self.agents.get_mut(agent)?,
        )
    }

    /// An event of `agent` the sink could not write at all.
    fn lost_one(&mut self, agent: u32) {
        self.counters.sink_write_lost += 1;
        self.delivery.lost_one(agent);
    }

    /// Write event `i` of `b`, stamped `ts`.
    pub(super) fn write_one(&mut self, ts: u64, b: &Batch, i: usize) {
        if ts < self.last_ts {
            self.counters.events_out_of_order += 1;
        } else {
            self.last_ts = ts;
        }
        let m = b.events[i];
        let rec = b.record(i);
        // The live outputs first: they show the event even when no file
        // can take it.
        if let (Some(live), Some(agent)) = (self.live.as_mut(), self.agents.get(m.agent)) {
            live.event(ts, &agent.info, &agent.capture, &m, rec);
        }
        if !self.cfg.files {
            return;
        }
        // One lookup of the agent per event: its IDB's id in this file is
        // kept with it.
        let (Some(agent), Some(file)) = (self.agents.get_mut(m.agent), self.file.as_mut()) else {
            return self.lost_one(m.agent);
        };
        let Some(iface) = interface_of(file, self.file_gen, agent) else {
            return self.lost_one(m.agent);
        };
        let capture = &agent.capture;
        let written = if self.cfg.comments {
            let summarizer = &mut self.summarizer;
            file.write_event_with(
                iface,
                ts,
                m.event_seq,
                |out| capture.encode(out, m.event_seq, m.clock_source, m.clock_state, rec),
                // The receiver validated the record; decode again here so
                // the summary's cost lands on the writer's core, not the
                // receiver's.
                |out| summarizer.summarize_record(rec, out),
            )
        } else {
            file.write_event_parts(iface, ts, m.event_seq, capture.bytes(), rec, |h| {
                CaptureHeader::set_event(h, m.event_seq, m.clock_source, m.clock_state)
            })
        };
        let commit = match written {
            Ok(()) => file.maybe_commit(),
            Err(e) => {
                tracing::error!(error = &e as &dyn std::error::Error, "cannot encode event");
                return self.lost_one(m.agent);
            }
        };
        self.delivery.note_written(m.agent);
        match commit {
            Ok(0) => {}
            Ok(n) => {
                self.counters.events_written += n;
                self.delivery.settle(&self.shared, None);
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
}
