//! One pcapng output file: SHB, one IDB per agent, EPBs, ISBs at close;
//! plain, or one zstd frame flushed block by block ([`frames`]).
//!
//! Blocks are encoded into an in-memory buffer that is written to the
//! file in large chunks (the crate's writer does not buffer): SHB, IDBs
//! and ISBs by `pcap-file`, EPBs (one per event, the hot path) by hand in
//! [`encode_epb`], byte for byte what `pcap-file` would write.
//! Because the buffer is only ever written whole, the sink knows the last
//! file offset that ends on a block boundary: after a failed write (full
//! disk) it truncates the file back to it, so the file stays a valid
//! pcapng with every event that made it to disk. A compressed file is
//! cut back to the end of its last whole flush instead.

mod blocks;
mod epb;
mod frames;
mod open;
mod pages;
mod writeback;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;

use crate::batch::AgentInfo;
use crate::error::SinkError;
use crate::fasthash::IndexMap;

pub use blocks::interface_description;
pub(crate) use blocks::IsbInfo;
pub use epb::EPB_PACKETID;
pub use frames::{flush_len, is_zstd};
pub use pages::PAD_BLOCK;
pub(crate) use writeback::WriteFailure;

// The live stream encodes its blocks as the files do.
use blocks::named_interface_block;
pub(crate) use blocks::{interface_block, section_header};
pub(crate) use epb::encode_epb_parts;
use epb::{encode_epb, epbs_by_agent, whole_blocks};
use frames::{ZstdFile, END_BLOCK, FLUSH_RAW_MAX, ZSTD_WRITE_CHUNK};

/// Encoded bytes kept in memory before a write to the file.
pub const WRITE_CHUNK: usize = 1 << 20;

/// First and last event time written on one interface.
struct Span {
    first_ts: u64,
    last_ts: u64,
}

/// An open pcapng file.
pub(crate) struct TraceFile {
    path: PathBuf,
    file: File,
    w: PcapNgWriter<Vec<u8>>,
    /// Bytes on disk, always a block (or frame) boundary.
    committed: u64,
    /// Uncompressed pcapng bytes of what is on disk.
    committed_raw: u64,
    /// The compressor and its unwritten flushes (`None`: plain pcapng);
    /// `w` then holds the pcapng blocks of the next flush.
    zst: Option<ZstdFile>,
    /// EPBs on disk.
    committed_events: u64,
    /// Bytes already written back and dropped from the page cache.
    dropped: u64,
    /// Written bytes are written back and dropped from the page cache.
    write_behind: bool,
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
    /// Path of the file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of the file including what is still buffered (compressed:
    /// the next flush is not counted until it is compressed, at most
    /// [`FLUSH_RAW_MAX`] uncompressed bytes).
    pub fn len(&self) -> u64 {
        match &self.zst {
            Some(z) => self.committed + z.out().len() as u64,
            None => self.committed + self.w.get_ref().len() as u64,
        }
    }

    /// Uncompressed pcapng bytes on disk (the same as
    /// [`committed`](Self::committed) for a plain file).
    pub fn committed_raw(&self) -> u64 {
        self.committed_raw
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
        self.describe(a.index, interface_block(a))
    }

    /// Write the IDB of an interface that is no agent's, `name` on link
    /// `link` (a capture of the agents' datagrams, say), under agent
    /// index `index`; returns its interface id.
    pub fn add_link_interface(
        &mut self,
        index: u32,
        link: DataLink,
        name: &str,
    ) -> Result<u32, SinkError> {
        if let Some(id) = self.interface(index) {
            return Ok(id);
        }
        self.describe(index, named_interface_block(link, name))
    }

    /// Write `idb` as the interface of agent index `index`.
    fn describe(
        &mut self,
        index: u32,
        idb: InterfaceDescriptionBlock<'_>,
    ) -> Result<u32, SinkError> {
        let start = self.w.get_ref().len();
        self.w
            .write_pcapng_block(idb)
            .map_err(|e| pcap_err("interface description", e))?;
        self.block_added(start, self.pending_events)?;
        let id = self.spans.len() as u32;
        self.ifaces.insert(index, id);
        self.spans.push((index, None));
        Ok(id)
    }

    /// Interfaces described so far.
    pub fn interfaces(&self) -> u32 {
        self.spans.len() as u32
    }

    /// The latest event time written, if any.
    pub fn last_event_ns(&self) -> Option<u64> {
        self.spans
            .iter()
            .filter_map(|(_, s)| s.as_ref().map(|s| s.last_ts))
            .max()
    }

    /// Encode one EPB into the buffer (`iface` from [`add_interface`](Self::add_interface)).
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
        self.event_added(start, iface, ts_ns)
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
        self.event_added(start, iface, ts_ns)
    }

    /// The block appended from `start` of the buffer, behind blocks that
    /// hold `events_before` EPBs: plain, kept within its page; compressed,
    /// the blocks before it are flushed once it takes the buffer past a
    /// flush's size.
    fn block_added(&mut self, start: usize, events_before: u64) -> Result<(), SinkError> {
        let buf = self.w.get_mut();
        match &mut self.zst {
            None => {
                pages::keep_in_page(buf, self.committed, start);
            }
            Some(z) if buf.len() > FLUSH_RAW_MAX && start > 0 => {
                let agents: Vec<u32> = self.spans.iter().map(|&(a, _)| a).collect();
                z.push(&buf[..start], events_before, &agents)?;
                buf.drain(..start);
                self.pending_events -= events_before;
            }
            Some(_) => {}
        }
        Ok(())
    }

    /// The EPB encoded from `start` of the buffer: placed, counted, and
    /// its time in its interface's span.
    fn event_added(&mut self, start: usize, iface: u32, ts_ns: u64) -> Result<(), SinkError> {
        if let Err(e) = self.block_added(start, self.pending_events) {
            // Not written: take it back out.
            self.w.get_mut().truncate(start);
            return Err(e);
        }
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
        Ok(())
    }

    /// Write the buffer to disk if it is large. Returns events committed.
    pub fn maybe_commit(&mut self) -> Result<u64, WriteFailure> {
        let full = match &self.zst {
            Some(z) => z.out().len() >= ZSTD_WRITE_CHUNK,
            None => self.w.get_ref().len() >= WRITE_CHUNK,
        };
        if full {
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
        if let Some(z) = self.zst.as_mut() {
            // A commit flushes: what is on disk then decodes whole.
            let raw = self.w.get_mut();
            let queued = z.events();
            let agents: Vec<u32> = self.spans.iter().map(|&(a, _)| a).collect();
            if let Err(e) = z.push(raw, self.pending_events, &agents) {
                // Only a bug or no memory: give up what is not on disk.
                let lost = queued + self.pending_events;
                raw.clear();
                z.clear();
                self.pending_events = 0;
                return Err(self.failed(lost, 0, Vec::new(), e));
            }
            raw.clear();
            self.pending_events = 0;
        }
        let (buf, events, raw) = match &self.zst {
            Some(z) => (z.out(), z.events(), z.raw()),
            None => {
                let b = self.w.get_ref();
                (&b[..], self.pending_events, b.len() as u64)
            }
        };
        if buf.is_empty() {
            return Ok(0);
        }
        let (done, error) = writeback::write_out(&mut self.file, buf);
        let Some(e) = error else {
            let start = self.committed;
            self.committed += buf.len() as u64;
            self.committed_raw += raw;
            self.committed_events += events;
            self.clear_buffers();
            if self.write_behind {
                writeback::write_behind(&self.file, start, self.committed, &mut self.dropped);
            }
            return Ok(events);
        };
        let (keep, kept_events, kept_raw, written_by_agent) = match &self.zst {
            Some(z) => z.kept(done),
            None => {
                let agents: Vec<u32> = self.spans.iter().map(|&(a, _)| a).collect();
                let (keep, n) = whole_blocks(buf, done);
                (keep, n, keep as u64, epbs_by_agent(&agents, &buf[..keep]))
            }
        };
        self.clear_buffers();
        self.committed += keep as u64;
        self.committed_raw += kept_raw;
        self.committed_events += kept_events;
        // Cut the partial block (or flush) away so the file stays readable,
        // and end the zstd frame there (the cut freed the room it needs).
        let _ = self.file.set_len(self.committed);
        // At the cut: the file's write position is still past it.
        if self.zst.is_some()
            && self.committed > 0
            && std::os::unix::fs::FileExt::write_all_at(&self.file, &END_BLOCK, self.committed)
                .is_ok()
        {
            self.committed += END_BLOCK.len() as u64;
        }
        let error = SinkError::Io {
            what: format!("cannot write {}", self.path.display()),
            source: e,
        };
        Err(self.failed(events - kept_events, kept_events, written_by_agent, error))
    }

    fn clear_buffers(&mut self) {
        self.w.get_mut().clear();
        self.pending_events = 0;
        if let Some(z) = self.zst.as_mut() {
            z.clear();
        }
    }

    /// The failure of a write that kept `kept_events` (a file left without
    /// any event is removed, so that retries on a full disk do not leave a
    /// header-only file each).
    fn failed(
        &mut self,
        lost_events: u64,
        written_events: u64,
        written_by_agent: Vec<(u32, u64)>,
        error: SinkError,
    ) -> WriteFailure {
        let removed = self.committed_events == 0 && std::fs::remove_file(&self.path).is_ok();
        if removed {
            self.committed = 0;
            self.committed_raw = 0;
        }
        WriteFailure {
            lost_events,
            written_events,
            written_by_agent,
            file_bytes: self.committed,
            file_raw_bytes: self.committed_raw,
            removed,
            error,
        }
    }

    /// Write one ISB per interface, flush, fsync and close. Returns the
    /// events committed by this last write, and the file's bytes and
    /// uncompressed bytes.
    pub fn close(mut self, isbs: &[IsbInfo], now_ns: u64) -> Result<(u64, u64, u64), WriteFailure> {
        for isb in isbs {
            let Some(iface) = self.interface(isb.agent) else {
                continue;
            };
            let span = match self.spans.get(iface as usize) {
                Some((_, Some(s))) => Some((s.first_ts, s.last_ts)),
                _ => None,
            };
            let block = blocks::statistics_block(iface, span, isb, now_ns);
            // Only a bug can make encoding into memory fail; the file stays
            // valid without this ISB, so log and go on.
            let start = self.w.get_ref().len();
            if let Err(e) = self.w.write_pcapng_block(block) {
                tracing::error!(file = %self.path.display(), error = &e as &dyn std::error::Error, "cannot encode interface statistics");
            }
            if let Err(e) = self.block_added(start, self.pending_events) {
                tracing::error!(file = %self.path.display(), error = &e as &dyn std::error::Error, "cannot compress interface statistics");
            }
        }
        let mut n = self.commit()?;
        if let Some(z) = self.zst.as_mut() {
            // Every event is on disk; this ends the frame.
            if let Err(e) = z.finish() {
                tracing::error!(file = %self.path.display(), error = &e as &dyn std::error::Error, "cannot end the zstd frame; readers see the file as cut short after its last event");
            }
            n += self.commit()?;
        }
        if let Err(e) = self.file.sync_all() {
            tracing::warn!(file = %self.path.display(), error = &e as &dyn std::error::Error, "fsync failed; the file may be incomplete after a crash");
        }
        Ok((n, self.committed, self.committed_raw))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compression::Compression;
    use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
    use pcap_file::pcapng::blocks::opt_common::CommonOption;
    use pcap_file::pcapng::blocks::opt_common::UnknownOption;
    use pcap_file::pcapng::{Block, PcapNgReader};
    use std::borrow::Cow;

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
        let (mut tf, _) = TraceFile::create(dir.path(), "t", 0, 0, Compression::None).unwrap();
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

#[cfg(test)]
mod zstd_tests {
    use super::*;
    use crate::compression::Compression;
    use pcap_file::pcapng::{Block, PcapNgReader};

    fn agent(index: u32) -> AgentInfo {
        AgentInfo {
            index,
            agent_id: 0x42 + u64::from(index),
            host: format!("host-{index}"),
            clock_source: 1,
            incarnation: 7,
            source: "127.0.0.1:9".parse().unwrap(),
        }
    }

    /// Write `n` events (with commits every `per_commit`) and close;
    /// returns the file's path, its bytes and its uncompressed bytes.
    fn write(dir: &Path, c: Compression, n: u64, per_commit: u64) -> (PathBuf, u64, u64) {
        let (mut tf, _) = TraceFile::create(dir, "z", 0, 0, c).unwrap();
        tf.add_interface(&agent(0)).unwrap();
        tf.add_interface(&agent(1)).unwrap();
        for i in 0..n {
            let payload: Vec<u8> = (0..96u8).map(|b| b ^ (i as u8)).collect();
            tf.write_event((i % 2) as u32, 1_000 + i * 10, &payload, i, None)
                .unwrap();
            tf.maybe_commit().unwrap();
            if i % per_commit == 0 {
                tf.commit().unwrap();
            }
        }
        let path = tf.path().to_owned();
        let isbs = [0, 1].map(|agent| IsbInfo {
            agent,
            ifrecv: n / 2,
            ifdrop: 0,
            comment: "c".into(),
        });
        let (_, bytes, raw) = tf.close(&isbs, 5).unwrap();
        (path, bytes, raw)
    }

    /// (interface, ts, packet data) of every EPB, and the ISB count.
    fn epbs(bytes: &[u8]) -> (Vec<(u32, Duration, Vec<u8>)>, usize) {
        let mut r = PcapNgReader::new(bytes).unwrap();
        let (mut v, mut isbs) = (Vec::new(), 0);
        while let Some(b) = r.next_block() {
            match b.unwrap() {
                (Block::EnhancedPacket(e), _) => {
                    v.push((e.interface_id, e.timestamp, e.data.to_vec()))
                }
                (Block::InterfaceStatistics(_), _) => isbs += 1,
                _ => {}
            }
        }
        (v, isbs)
    }

    #[test]
    fn a_compressed_file_is_one_zstd_frame_holding_the_same_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let (plain, pbytes, praw) = write(dir.path(), Compression::None, 20_000, 3_000);
        let (zst, zbytes, zraw) = write(dir.path(), Compression::Zstd { level: 1 }, 20_000, 3_000);
        assert!(plain.to_string_lossy().ends_with("-000.pcapng"));
        assert!(zst.to_string_lossy().ends_with(".pcapng.zst"));
        let plain_bytes = std::fs::read(&plain).unwrap();
        let zst_bytes = std::fs::read(&zst).unwrap();
        assert_eq!(pbytes, plain_bytes.len() as u64);
        assert_eq!(praw, pbytes);
        assert_eq!(zbytes, zst_bytes.len() as u64);
        assert!(is_zstd(&zst_bytes));
        // One frame: Wireshark 4.0 misreads longer runs of several.
        assert_eq!(
            zstd::zstd_safe::find_frame_compressed_size(&zst_bytes),
            Ok(zst_bytes.len())
        );
        let decoded = zstd::stream::decode_all(&zst_bytes[..]).unwrap();
        assert_eq!(zraw, decoded.len() as u64);
        assert!(zbytes * 5 < zraw, "{zbytes} compressed of {zraw}");
        let (want, want_isbs) = epbs(&plain_bytes);
        let (got, got_isbs) = epbs(&decoded);
        assert_eq!(want.len(), 20_000);
        assert_eq!(got, want);
        assert_eq!((got_isbs, want_isbs), (2, 2));
    }
}
