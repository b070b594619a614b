//! Opening a trace file: a new name in the sink's output directory
//! (never overwriting a file), or a path the caller chose; the SHB is
//! written at once.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::Instant;

use pcap_file::pcapng::PcapNgWriter;

use crate::clock::utc_compact;
use crate::compression::Compression;
use crate::error::SinkError;
use crate::fasthash::IndexMap;

use super::frames::ZstdFile;
use super::{pcap_err, section_header, TraceFile, WRITE_CHUNK};

impl TraceFile {
    /// Create `<prefix>-<UTC>-<NNN>.pcapng` (`.pcapng.zst` compressed) in
    /// `dir` (never overwriting a file: NNN is raised until the name is
    /// free) and write its SHB. `seq` is the sink's file counter; returns
    /// the file and the counter value actually used.
    pub fn create(
        dir: &Path,
        prefix: &str,
        seq: u32,
        unix_s: u64,
        compression: Compression,
    ) -> Result<(Self, u32), SinkError> {
        let zst = match compression {
            Compression::None => None,
            Compression::Zstd { level } => Some(ZstdFile::new(level)?),
        };
        let stamp = utc_compact(unix_s);
        let ext = compression.extension();
        let mut n = seq;
        let (path, file) = loop {
            let path = dir.join(format!("{prefix}-{stamp}-{n:03}.{ext}"));
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(f) => break (path, f),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < seq + 1000 => n += 1,
                Err(e) => {
                    return Err(SinkError::Io {
                        what: format!("cannot create {}", path.display()),
                        source: e,
                    })
                }
            }
        };
        Ok((Self::start(path, file, zst)?, n))
    }

    /// Create (or truncate) the file at `path` and write its SHB: a file
    /// whose name the caller chose, written outside the sink's rotation.
    pub fn create_at(path: &Path, compression: Compression) -> Result<Self, SinkError> {
        let zst = match compression {
            Compression::None => None,
            Compression::Zstd { level } => Some(ZstdFile::new(level)?),
        };
        let file = File::create(path).map_err(|e| SinkError::Io {
            what: format!("cannot create {}", path.display()),
            source: e,
        })?;
        Self::start(path.to_owned(), file, zst)
    }

    /// The trace file in the just created `file`, its SHB written.
    fn start(path: PathBuf, file: File, zst: Option<ZstdFile>) -> Result<Self, SinkError> {
        let w = PcapNgWriter::with_section_header(
            Vec::with_capacity(WRITE_CHUNK + 64 * 1024),
            section_header(),
        )
        .map_err(|e| pcap_err("section header", e))?;
        let mut tf = TraceFile {
            path,
            file,
            w,
            committed: 0,
            committed_raw: 0,
            zst,
            committed_events: 0,
            dropped: 0,
            write_behind: true,
            pending_events: 0,
            ifaces: IndexMap::default(),
            spans: Vec::new(),
            opened: Instant::now(),
        };
        // Write the SHB at once: a full disk shows up now, not later.
        if let Err(f) = tf.commit() {
            let path = tf.path.clone();
            drop(tf);
            let _ = std::fs::remove_file(&path);
            return Err(f.error);
        }
        Ok(tf)
    }

    /// Leave the written bytes in the page cache: for a file that is read
    /// back soon (a test's or a benchmark's input), not the sink's output.
    pub fn keep_cached(&mut self) {
        self.write_behind = false;
    }
}
