//! The writer's files: open (after a failure only once the retry delay
//! has passed), rotate by size or age, close with one ISB per interface,
//! and what a failed write costs.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::pcapng::{IsbInfo, TraceFile, WriteFailure};

use super::Output;

fn unix_now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Output {
    /// Close the current file and open the next one. The reorder buffer is
    /// deliberately not flushed: the file boundary is just a cut in the
    /// time-ordered stream, so the concatenation of all files stays in
    /// order and a file does not overshoot the size limit by a whole
    /// window of events.
    pub(super) fn rotate(&mut self) {
        self.close_file();
        self.open_file();
    }

    pub(super) fn sync_bytes(&mut self) {
        if let Some(f) = &self.file {
            if self.counters.current_file.is_none() {
                self.counters.current_file = Some(f.path().display().to_string());
            }
            // bytes_written = closed files + this file's committed bytes.
            self.counters.bytes_written = self.closed_bytes + f.committed();
            self.counters.bytes_uncompressed = self.closed_raw + f.committed_raw();
        }
    }

    pub(super) fn on_failure(&mut self, fail: WriteFailure) {
        self.counters.sink_write_lost += fail.lost_events;
        self.counters.events_written += fail.written_events;
        self.delivery
            .settle(&self.shared, Some(&fail.written_by_agent));
        let path = self
            .file
            .as_ref()
            .map(|f| f.path().display().to_string())
            .unwrap_or_default();
        if self.file.take().is_some() {
            self.closed_bytes += fail.file_bytes;
            self.closed_raw += fail.file_raw_bytes;
        }
        self.counters.bytes_written = self.closed_bytes;
        self.counters.bytes_uncompressed = self.closed_raw;
        self.counters.current_file = None;
        self.retry_at = Some(Instant::now() + self.cfg.retry_interval);
        let what = if fail.removed {
            "write failed; the file held no event and was removed"
        } else {
            "write failed; the file keeps every whole block (or zstd flush) that fitted and was closed"
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
    pub(super) fn open_file(&mut self) {
        if !self.cfg.files {
            return;
        }
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
            self.cfg.compression,
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
                self.file_gen += 1;
                for i in self.agents.indices() {
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

    pub(super) fn maybe_rotate(&mut self) {
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
            ifrecv: self.agents.get(a.index).map_or(0, |x| x.received),
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

    pub(super) fn close_file(&mut self) {
        let Some(f) = self.file.take() else { return };
        let isbs = self.isbs();
        let path = f.path().display().to_string();
        match f.close(&isbs, self.cfg.clock.now_ns()) {
            Ok((n, len, raw)) => {
                self.counters.events_written += n;
                self.delivery.settle(&self.shared, None);
                self.closed_bytes += len;
                self.closed_raw += raw;
                tracing::info!(file = %path, bytes = len, uncompressed_bytes = raw, "closed trace file");
            }
            Err(fail) => {
                self.file = None;
                self.closed_bytes += fail.file_bytes;
                self.closed_raw += fail.file_raw_bytes;
                self.counters.sink_write_lost += fail.lost_events;
                self.counters.events_written += fail.written_events;
                self.delivery
                    .settle(&self.shared, Some(&fail.written_by_agent));
                self.retry_at = Some(Instant::now() + self.cfg.retry_interval);
                tracing::error!(file = %path, error = &fail.error as &dyn std::error::Error, lost_events = fail.lost_events,
                    removed = fail.removed,
                    "could not finish the trace file; it was cut back to its last complete block \
                     (or zstd flush; removed if it held no event). Free space on the output file system");
            }
        }
        self.counters.bytes_written = self.closed_bytes;
        self.counters.bytes_uncompressed = self.closed_raw;
        self.counters.current_file = None;
    }
}
