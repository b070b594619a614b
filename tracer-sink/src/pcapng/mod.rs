//! One pcapng output file: SHB, one IDB per agent, EPBs, ISBs at close.
//!
//! Blocks are encoded into an in-memory buffer that is written to the
//! file in large chunks (the crate's writer does not buffer): SHB, IDBs
//! and ISBs by `pcap-file`, EPBs (one per event, the hot path) by hand in
//! [`encode_epb`], byte for byte what `pcap-file` would write.
//! Because the buffer is only ever written whole, the sink knows the last
//! file offset that ends on a block boundary: after a failed write (full
//! disk) it truncates the file back to it, so the file stays a valid
//! pcapng with every event that made it to disk.

mod blocks;
mod epb;
mod pages;

use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pcap_file::pcapng::blocks::interface_statistics::{
    InterfaceStatisticsBlock, InterfaceStatisticsOption,
};
use pcap_file::pcapng::blocks::opt_common::CommonOption;
use pcap_file::pcapng::PcapNgWriter;

use crate::batch::AgentInfo;
use crate::clock::utc_compact;
use crate::error::SinkError;
use crate::fasthash::IndexMap;

pub use blocks::interface_description;
pub use epb::EPB_PACKETID;
pub use pages::PAD_BLOCK;

// The live stream encodes its blocks as the files do.
pub(crate) use blocks::{interface_block, section_header};
pub(crate) use epb::encode_epb_parts;
use epb::{encode_epb, epbs_by_agent, whole_blocks};

/// Encoded bytes kept in memory before a write to the file.
pub const WRITE_CHUNK: usize = 1 << 20;
/// Written bytes left in the page cache behind the newest write: older
/// ones are written back and dropped (see [`TraceFile::write_behind`]).
pub const WRITE_BEHIND_LAG: u64 = 8 << 20;

/// What an ISB says about one interface.
#[derive(Debug, Clone)]
pub(crate) struct IsbInfo {
    /// Agent index.
    pub agent: u32,
    /// Events received from the agent (cumulative, whole sink run).
    pub ifrecv: u64,
    /// Events lost before the sink (event gaps + agent-side losses).
    pub ifdrop: u64,
    /// Breakdown for the comment.
    pub comment: String,
}

/// A failed write: the file was cut back to its last complete block (or
/// removed, when that left it without any event).
#[derive(Debug)]
pub(crate) struct WriteFailure {
    /// Events that were in the lost part.
    pub lost_events: u64,
    /// Events of the failed write that did reach the file (the whole
    /// blocks that fitted before the error).
    pub written_events: u64,
    /// `written_events` per agent index (what each agent is told was
    /// delivered; the rest of its events in the write are lost).
    pub written_by_agent: Vec<(u32, u64)>,
    /// Bytes the file keeps on disk (0 when it was removed).
    pub file_bytes: u64,
    /// The file held no event and was removed, so that retries on a full
    /// disk do not leave a header-only file each.
    pub removed: bool,
    /// What went wrong.
    pub error: SinkError,
}

struct Span {
    first_ts: u64,
    last_ts: u64,
}

/// An open pcapng file.
pub(crate) struct TraceFile {
    path: PathBuf,
    file: File,
    w: PcapNgWriter<Vec<u8>>,
    /// Bytes on disk, always a block boundary.
    committed: u64,
    /// EPBs on disk.
    committed_events: u64,
    /// Bytes already written back and dropped from the page cache.
    dropped: u64,
    /// EPBs in the memory buffer.
    pending_events: u64,
    /// Agent index -> interface id in this section.
    ifaces: IndexMap<u32>,
    /// Interface id -> (agent index, time span written).
    spans: Vec<(u32, Option<Span>)>,
    opened: Instant,
}

fn pcap_err(what: &str, e: impl std::fmt::Display) -> SinkError {
    SinkError::Encode(format!("{what}: {e}"))
}

impl TraceFile {
    /// Create `<prefix>-<UTC>-<NNN>.pcapng` in `dir` (never overwriting a
    /// file: NNN is raised until the name is free) and write its SHB.
    /// `seq` is the sink's file counter; returns the file and the counter
    /// value actually used.
    pub fn create(
        dir: &Path,
        prefix: &str,
        seq: u32,
        unix_s: u64,
    ) -> Result<(Self, u32), SinkError> {
        let stamp = utc_compact(unix_s);
        let mut n = seq;
        let (path, file) = loop {
            let path = dir.join(format!("{prefix}-{stamp}-{n:03}.pcapng"));
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
            committed_events: 0,
            dropped: 0,
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
        Ok((tf, n))
    }

    /// Path of the file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of the file including what is still buffered.
    pub fn len(&self) -> u64 {
        self.committed + self.w.get_ref().len() as u64
    }

    /// Bytes on disk.
    pub fn committed(&self) -> u64 {
        self.committed
    }

    /// Time since the file was created.
    pub fn age(&self) -> Duration {
        self.opened.elapsed()
    }

    /// Interface id of an agent in this section, if its IDB is written.
    pub fn interface(&self, agent: u32) -> Option<u32> {
        self.ifaces.get(&agent).copied()
    }

    /// Write the IDB of an agent (once per file) and return its interface id.
    pub fn add_interface(&mut self, a: &AgentInfo) -> Result<u32, SinkError> {
        if let Some(id) = self.interface(a.index) {
            return Ok(id);
        }
        let idb = interface_block(a);
        let start = self.w.get_ref().len();
        self.w
            .write_pcapng_block(idb)
            .map_err(|e| pcap_err("interface description", e))?;
        pages::keep_in_page(self.w.get_mut(), self.committed, start);
        let id = self.spans.len() as u32;
        self.ifaces.insert(a.index, id);
        self.spans.push((a.index, None));
        Ok(id)
    }

    /// Encode one EPB into the buffer (`iface` from [`add_interface`](Self::add_interface)).
    #[cfg(test)]
    pub fn write_event(
        &mut self,
        iface: u32,
        ts_ns: u64,
        payload: &[u8],
        packet_id: u64,
        comment: Option<&str>,
    ) -> Result<(), SinkError> {
        self.write_event_with(
            iface,
            ts_ns,
            packet_id,
            |out| out.extend_from_slice(payload),
            |out| {
                if let Some(c) = comment {
                    out.extend_from_slice(c.as_bytes())
                }
            },
        )
    }

    /// An EPB may only name an interface an IDB described.
    fn check_iface(&self, iface: u32) -> Result<(), SinkError> {
        if iface as usize >= self.spans.len() {
            return Err(pcap_err(
                "enhanced packet",
                format_args!("interface {iface} has no IDB"),
            ));
        }
        Ok(())
    }

    /// Encode one EPB straight into the buffer: `payload` and `comment`
    /// append the packet data and the comment text (nothing: no comment).
    pub fn write_event_with(
        &mut self,
        iface: u32,
        ts_ns: u64,
        packet_id: u64,
        payload: impl FnOnce(&mut Vec<u8>),
        comment: impl FnOnce(&mut Vec<u8>),
    ) -> Result<(), SinkError> {
        self.check_iface(iface)?;
        let buf = self.w.get_mut();
        let start = buf.len();
        encode_epb(buf, iface, ts_ns, packet_id, payload, comment);
        self.event_added(start, iface, ts_ns);
        Ok(())
    }

    /// Encode one EPB without a comment whose packet data is `head` then
    /// `data`; `fill` then gets the copy of `head` in the buffer to write
    /// per-event fields into. Cheaper than
    /// [`write_event_with`](Self::write_event_with): all lengths are known
    /// up front.
    pub fn write_event_parts(
        &mut self,
        iface: u32,
        ts_ns: u64,
        packet_id: u64,
        head: &[u8],
        data: &[u8],
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), SinkError> {
        self.check_iface(iface)?;
        let buf = self.w.get_mut();
        let start = buf.len();
        let at = encode_epb_parts(buf, iface, ts_ns, packet_id, head, data);
        fill(&mut buf[at..at + head.len()]);
        self.event_added(start, iface, ts_ns);
        Ok(())
    }

    /// The EPB encoded from `start` of the buffer: kept within its page,
    /// counted, and its time in its interface's span.
    fn event_added(&mut self, start: usize, iface: u32, ts_ns: u64) {
        pages::keep_in_page(self.w.get_mut(), self.committed, start);
        self.pending_events += 1;
        if let Some((_, span)) = self.spans.get_mut(iface as usize) {
            match span {
                Some(s) => {
                    s.first_ts = s.first_ts.min(ts_ns);
                    s.last_ts = s.last_ts.max(ts_ns);
                }
                None => {
                    *span = Some(Span {
                        first_ts: ts_ns,
                        last_ts: ts_ns,
                    })
                }
            }
        }
    }

    /// Write the buffer to disk if it is large. Returns events committed.
    pub fn maybe_commit(&mut self) -> Result<u64, WriteFailure> {
        if self.w.get_ref().len() >= WRITE_CHUNK {
            self.commit()
        } else {
            Ok(0)
        }
    }

    /// Write the whole buffer to disk. Returns the events it held.
    ///
    /// On error (a full disk) the whole blocks that fitted stay: the file
    /// is truncated back to the last block boundary within what the kernel
    /// took, so a disk with less free space than a write chunk still gets
    /// filled. The rest of the buffer is reported lost, and a file left
    /// without any event is removed; either way it should then be dropped.
    pub fn commit(&mut self) -> Result<u64, WriteFailure> {
        let buf = self.w.get_mut();
        if buf.is_empty() {
            return Ok(0);
        }
        let events = self.pending_events;
        let mut done = 0;
        let error = loop {
            if done == buf.len() {
                break None;
            }
            match self.file.write(&buf[done..]) {
                Ok(0) => break Some(std::io::Error::from(std::io::ErrorKind::WriteZero)),
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => break Some(e),
            }
        };
        let Some(e) = error else {
            let start = self.committed;
            self.committed += buf.len() as u64;
            self.committed_events += events;
            buf.clear();
            self.pending_events = 0;
            self.write_behind(start);
            return Ok(events);
        };
        let (keep, kept_events) = whole_blocks(buf, done);
        let agents: Vec<u32> = self.spans.iter().map(|&(a, _)| a).collect();
        let written_by_agent = epbs_by_agent(&agents, &buf[..keep]);
        buf.clear();
        self.pending_events = 0;
        self.committed += keep as u64;
        self.committed_events += kept_events;
        // Cut the partial block away so the file stays readable.
        let _ = self.file.set_len(self.committed);
        let removed = self.committed_events == 0 && std::fs::remove_file(&self.path).is_ok();
        if removed {
            self.committed = 0;
        }
        Err(WriteFailure {
            lost_events: events - kept_events,
            written_events: kept_events,
            written_by_agent,
            file_bytes: self.committed,
            removed,
            error: SinkError::Io {
                what: format!("cannot write {}", self.path.display()),
                source: e,
            },
        })
    }

    /// Streaming write-behind: start writeback of the bytes just written
    /// (from `start`), and once more than [`WRITE_BEHIND_LAG`] bytes are
    /// in the page cache, wait for the oldest to reach the disk and drop
    /// them from the cache. A trace file is written once and not read back
    /// by the sink, so keeping it cached only pushes other data out; and
    /// page-cache pages that are recycled at once are much cheaper to
    /// write into than fresh ones (on this VM a buffered write of fresh
    /// pages costs about 7x the CPU time). Failures here are harmless (the
    /// data is in the page cache; `close` fsyncs) and ignored.
    fn write_behind(&mut self, start: u64) {
        use std::os::fd::AsRawFd;
        let fd = self.file.as_raw_fd();
        let end = self.committed;
        // SAFETY: plain syscalls on the open fd owned by `self.file`; no
        // memory is passed.
        unsafe {
            libc::sync_file_range(
                fd,
                start as libc::off64_t,
                (end - start) as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
        if end.saturating_sub(self.dropped) <= WRITE_BEHIND_LAG {
            return;
        }
        // Page-aligned, so the next range starts on a whole page.
        let upto = (end - WRITE_BEHIND_LAG) & !4095;
        if upto <= self.dropped {
            return;
        }
        let (off, len) = (
            self.dropped as libc::off64_t,
            (upto - self.dropped) as libc::off64_t,
        );
        // SAFETY: as above.
        unsafe {
            libc::sync_file_range(
                fd,
                off,
                len,
                libc::SYNC_FILE_RANGE_WAIT_BEFORE
                    | libc::SYNC_FILE_RANGE_WRITE
                    | libc::SYNC_FILE_RANGE_WAIT_AFTER,
            );
            libc::posix_fadvise(fd, off, len, libc::POSIX_FADV_DONTNEED);
        }
        self.dropped = upto;
    }

    /// Write one ISB per interface, flush, fsync and close. Returns the
    /// events committed by this last write.
    pub fn close(mut self, isbs: &[IsbInfo], now_ns: u64) -> Result<u64, WriteFailure> {
        for isb in isbs {
            let Some(iface) = self.interface(isb.agent) else {
                continue;
            };
            let mut options = Vec::with_capacity(5);
            if let Some((_, Some(span))) = self.spans.get(iface as usize) {
                options.push(InterfaceStatisticsOption::IsbStartTime(
                    Duration::from_nanos(span.first_ts),
                ));
                options.push(InterfaceStatisticsOption::IsbEndTime(Duration::from_nanos(
                    span.last_ts,
                )));
            }
            options.push(InterfaceStatisticsOption::IsbIfRecv(isb.ifrecv));
            options.push(InterfaceStatisticsOption::IsbIfDrop(isb.ifdrop));
            options.push(InterfaceStatisticsOption::Common(CommonOption::Comment(
                Cow::Borrowed(&isb.comment),
            )));
            let block = InterfaceStatisticsBlock {
                interface_id: iface,
                timestamp: Duration::from_nanos(now_ns),
                options,
            };
            // Only a bug can make encoding into memory fail; the file stays
            // valid without this ISB, so log and go on.
            let start = self.w.get_ref().len();
            if let Err(e) = self.w.write_pcapng_block(block) {
                tracing::error!(file = %self.path.display(), error = &e as &dyn std::error::Error, "cannot encode interface statistics");
            }
            pages::keep_in_page(self.w.get_mut(), self.committed, start);
        }
        let n = self.commit()?;
        if let Err(e) = self.file.sync_all() {
            tracing::warn!(file = %self.path.display(), error = &e as &dyn std::error::Error, "fsync failed; the file may be incomplete after a crash");
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
    use pcap_file::pcapng::blocks::opt_common::UnknownOption;
    use pcap_file::pcapng::{Block, PcapNgReader};

    fn agent(index: u32, host: &str) -> AgentInfo {
        AgentInfo {
            index,
            agent_id: 0x1234_5678_9abc_def0 + u64::from(index),
            host: host.to_owned(),
            clock_source: 1,
            incarnation: 7,
            source: "127.0.0.1:9".parse().unwrap(),
        }
    }

    /// The same EPB as `pcap-file` encodes it.
    fn reference_epb(
        w: &mut PcapNgWriter<Vec<u8>>,
        iface: u32,
        ts_ns: u64,
        payload: &[u8],
        packet_id: u64,
        comment: Option<&str>,
    ) {
        let id_bytes = packet_id.to_le_bytes();
        let mut options = vec![EnhancedPacketOption::Common(CommonOption::Unknown(
            UnknownOption {
                code: EPB_PACKETID,
                value: Cow::Borrowed(&id_bytes),
            },
        ))];
        if let Some(c) = comment {
            options.push(EnhancedPacketOption::Common(CommonOption::Comment(
                Cow::Borrowed(c),
            )));
        }
        w.write_pcapng_block(EnhancedPacketBlock {
            interface_id: iface,
            timestamp: Duration::from_nanos(ts_ns),
            original_len: payload.len() as u32,
            data: Cow::Borrowed(payload),
            options,
        })
        .unwrap();
    }

    type Case = (u32, u64, Vec<u8>, u64, Option<String>);

    fn cases() -> Vec<Case> {
        let mut v = Vec::new();
        for len in 0..9usize {
            for clen in [
                None,
                Some(0),
                Some(1),
                Some(2),
                Some(3),
                Some(4),
                Some(5),
                Some(70),
            ] {
                let iface = (len % 2) as u32;
                let ts = 1_700_000_000_123_456_789u64.wrapping_mul(len as u64 + 1);
                let payload: Vec<u8> = (0..len as u8).map(|b| b.wrapping_mul(37)).collect();
                let comment = clen.map(|n| "é-comment-".repeat(8).chars().take(n).collect());
                v.push((iface, ts, payload, len as u64 * 1000 + 7, comment));
            }
        }
        v.push((
            1,
            u64::MAX,
            vec![0xff; 144],
            u64::MAX,
            Some("x".repeat(200)),
        ));
        v.push((0, 0, vec![1; 3], 0, None));
        v
    }

    #[test]
    fn hand_encoded_epbs_match_pcap_file_byte_for_byte_and_parse_back() {
        let dir = tempfile::tempdir().unwrap();
        let (mut tf, _) = TraceFile::create(dir.path(), "t", 0, 0).unwrap();
        tf.add_interface(&agent(0, "host-a")).unwrap();
        tf.add_interface(&agent(1, "host-bb")).unwrap();
        // The reference writer sees the same SHB and IDBs.
        let mut reference =
            PcapNgWriter::with_section_header(Vec::new(), section_header()).unwrap();
        for a in [agent(0, "host-a"), agent(1, "host-bb")] {
            reference.write_pcapng_block(interface_block(&a)).unwrap();
        }
        let header_len = reference.get_ref().len();
        let cases = cases();
        for (iface, ts, payload, id, comment) in &cases {
            let before = reference.get_ref().len();
            reference_epb(
                &mut reference,
                *iface,
                *ts,
                payload,
                *id,
                comment.as_deref(),
            );
            let mut mine = Vec::new();
            encode_epb(
                &mut mine,
                *iface,
                *ts,
                *id,
                |o| o.extend_from_slice(payload),
                |o| {
                    if let Some(c) = comment {
                        o.extend_from_slice(c.as_bytes())
                    }
                },
            );
            // An empty comment is no comment.
            if comment.as_deref() != Some("") {
                assert_eq!(
                    mine,
                    reference.get_ref()[before..],
                    "case {iface} {ts} {payload:?} {comment:?}"
                );
            }
            tf.write_event(*iface, *ts, payload, *id, comment.as_deref())
                .unwrap();
        }
        tf.close(&[], 0).unwrap();
        let path = std::fs::read_dir(dir.path())
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() % 4, 0);
        assert!(bytes.len() > header_len);
        // Parse every block back and compare every field.
        let mut r = PcapNgReader::new(&bytes[..]).unwrap();
        let mut epbs = Vec::new();
        while let Some(b) = r.next_block() {
            if let (Block::EnhancedPacket(e), _) = b.unwrap() {
                epbs.push(e.into_owned());
            }
        }
        assert_eq!(epbs.len(), cases.len());
        for (e, (iface, ts, payload, id, comment)) in epbs.iter().zip(&cases) {
            assert_eq!(e.interface_id, *iface);
            assert_eq!(e.timestamp, Duration::from_nanos(*ts));
            assert_eq!(e.original_len as usize, payload.len());
            assert_eq!(&e.data[..], &payload[..]);
            let mut got_id = None;
            let mut got_comment = None;
            for o in &e.options {
                match o {
                    EnhancedPacketOption::Common(CommonOption::Unknown(u))
                        if u.code == EPB_PACKETID =>
                    {
                        got_id = Some(u64::from_le_bytes(u.value[..].try_into().unwrap()))
                    }
                    EnhancedPacketOption::Common(CommonOption::Comment(c)) => {
                        got_comment = Some(c.to_string())
                    }
                    other => panic!("unexpected option {other:?}"),
                }
            }
            assert_eq!(got_id, Some(*id));
            let want = comment.clone().filter(|c| !c.is_empty());
            assert_eq!(got_comment, want);
        }
    }
}
