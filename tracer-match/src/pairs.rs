//! `--pairs FILE`: every matched pair as one JSON line, for tools that
//! check or plot pairs one by one (the witness test compares each with
//! packet captures of both ends). Pairs are kept until the end, where host
//! names are known, so memory grows with the matches: an export, not the
//! streaming report.

use std::io::Write;

use crate::input::HostId;
use crate::lifetime::Life;

/// Collects matched pairs and writes them as JSON lines.
#[derive(Debug, Default)]
pub struct PairWriter {
    lives: Vec<Life>,
}

impl PairWriter {
    /// An empty writer.
    pub fn new() -> Self {
        PairWriter::default()
    }

    /// One matched pair.
    pub fn push(&mut self, life: &Life) {
        self.lives.push(life.clone());
    }

    /// Pairs collected.
    pub fn len(&self) -> usize {
        self.lives.len()
    }

    /// True when no pair was collected.
    pub fn is_empty(&self) -> bool {
        self.lives.is_empty()
    }

    /// Write each pair as a JSON object on its own line: the life's
    /// report (stages, both ranges, one-way).
    pub fn write_to(
        &self,
        out: &mut dyn Write,
        name: impl Fn(HostId) -> String,
    ) -> std::io::Result<()> {
        for l in &self.lives {
            serde_json::to_writer(&mut *out, &l.report(&name)).map_err(std::io::Error::other)?;
            out.write_all(b"\n")?;
        }
        out.flush()
    }
}
