//! zstd form of a trace file (`.pcapng.zst`): the whole file is one zstd
//! frame, flushed at pcapng block boundaries into one zstd block per flush.
//!
//! Why one frame: Wireshark 4.0 (tshark, capinfos, mergecap) reads a file
//! of several concatenated frames only while each next frame happens to
//! start where its read buffer starts (it looks for the next frame's magic
//! at the start of the buffer, not at the read position): a longer file of
//! many frames reads as garbage ("block length too large"). One frame per
//! file is read by every version.
//!
//! Why one block per flush: a decoder hands out a compressed block whole
//! or not at all, and a file cut short ends its frame cleanly for tshark.
//! A flush of less than 128 KiB of pcapng (zstd's block size; at levels
//! -7 to 15 zstd neither pre-splits nor post-splits such a flush) comes out as
//! exactly one block, ending where a pcapng block ends. So a file cut
//! anywhere (a kill -9 in the middle of a write) decodes to whole pcapng
//! blocks: tshark reads it to the last complete flush without an error.
//! The exception is a block zstd stores raw (data it cannot compress,
//! which trace records never are): decoders stream those out as they come.
//! After a failed write (full disk) the file is cut back to the end of its
//! last whole flush and the frame is ended with an empty last block.

use std::io;

use zstd::zstd_safe::{self, CCtx, CParameter, InBuffer, OutBuffer};

use crate::error::SinkError;

use super::epb::{epbs_by_agent, whole_blocks};

/// Most uncompressed bytes in one flush: under zstd's block size (128
/// KiB), below which it does not split a block.
pub(super) const FLUSH_RAW_MAX: usize = 120 << 10;
/// Compressed bytes kept in memory before a write to the file.
pub(super) const ZSTD_WRITE_CHUNK: usize = 256 << 10;
/// zstd window: 128 KiB of history, one flush's worth.
const WINDOW_LOG: u32 = 17;
/// zstd frame magic number (little-endian on disk: 28 B5 2F FD).
pub const ZSTD_MAGIC: u32 = 0xFD2F_B528;
/// An empty last block (raw, size 0): ends a frame cut back after a failed
/// write, so that every reader sees a complete frame.
pub(super) const END_BLOCK: [u8; 3] = [1, 0, 0];

/// One flush in the unwritten buffer.
#[derive(Debug, Clone)]
struct Mark {
    /// End offset of its bytes in [`ZstdFile::out`].
    end: usize,
    /// EPBs in it.
    events: u64,
    /// Uncompressed bytes in it.
    raw: u64,
    /// EPBs per agent index.
    by_agent: Vec<(u32, u64)>,
}

/// The compressor of one file and its compressed bytes not yet written.
pub(super) struct ZstdFile {
    cctx: CCtx<'static>,
    /// Whole flushes not yet written to the file.
    out: Vec<u8>,
    marks: Vec<Mark>,
    /// The frame header is out (the first flush holds it).
    started: bool,
    /// Flushes that did not come out as one block (none expected).
    odd_flushes: u64,
}

fn zstd_err(code: usize) -> SinkError {
    SinkError::Io {
        what: "zstd compression failed".to_owned(),
        source: io::Error::other(zstd_safe::get_error_name(code)),
    }
}

impl ZstdFile {
    /// A compressor at zstd `level` (checked by the configuration).
    pub fn new(level: i32) -> Result<Self, SinkError> {
        let mut cctx = CCtx::try_create().ok_or_else(|| SinkError::Io {
            what: "zstd compression failed".to_owned(),
            source: io::Error::from(io::ErrorKind::OutOfMemory),
        })?;
        // No checksum: a frame cut back after a failed write is ended with
        // an empty block, which a checksum over the lost part would fail.
        for p in [
            CParameter::CompressionLevel(level),
            CParameter::ChecksumFlag(false),
            CParameter::ContentSizeFlag(false),
            CParameter::WindowLog(WINDOW_LOG),
        ] {
            cctx.set_parameter(p).map_err(zstd_err)?;
        }
        Ok(ZstdFile {
            cctx,
            out: Vec::with_capacity(ZSTD_WRITE_CHUNK + FLUSH_RAW_MAX),
            marks: Vec::new(),
            started: false,
            odd_flushes: 0,
        })
    }

    /// Compressed bytes not yet written.
    pub fn out(&self) -> &[u8] {
        &self.out
    }

    /// EPBs in the unwritten flushes.
    pub fn events(&self) -> u64 {
        self.marks.iter().map(|m| m.events).sum()
    }

    /// Uncompressed bytes of the unwritten flushes.
    pub fn raw(&self) -> u64 {
        self.marks.iter().map(|m| m.raw).sum()
    }

    /// Forget the unwritten flushes (written, or given up).
    pub fn clear(&mut self) {
        self.out.clear();
        self.marks.clear();
    }

    /// Compress `raw` (whole pcapng blocks holding `events` EPBs;
    /// `agents[i]` is the agent of interface `i`) and flush it, one zstd
    /// block per [`FLUSH_RAW_MAX`] bytes at most.
    pub fn push(&mut self, raw: &[u8], events: u64, agents: &[u32]) -> Result<(), SinkError> {
        let mut rest = raw;
        let mut counted = 0;
        while !rest.is_empty() {
            let (chunk, tail) = rest.split_at(flush_len(rest));
            // The last piece gets what the caller counted, so the totals
            // agree with its count whatever the walk reads.
            let n = if tail.is_empty() {
                events.saturating_sub(counted)
            } else {
                whole_blocks(chunk, chunk.len()).1
            };
            counted += n;
            self.compress(chunk, zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_flush)?;
            self.marks.push(Mark {
                end: self.out.len(),
                events: n,
                raw: chunk.len() as u64,
                by_agent: epbs_by_agent(agents, chunk),
            });
            rest = tail;
        }
        Ok(())
    }

    /// End the frame (at close): its last block.
    pub fn finish(&mut self) -> Result<(), SinkError> {
        self.compress(&[], zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_end)?;
        self.marks.push(Mark {
            end: self.out.len(),
            events: 0,
            raw: 0,
            by_agent: Vec::new(),
        });
        Ok(())
    }

    /// Feed `chunk` with `directive` until zstd has handed out everything.
    fn compress(
        &mut self,
        chunk: &[u8],
        directive: zstd_safe::zstd_sys::ZSTD_EndDirective,
    ) -> Result<(), SinkError> {
        let start = self.out.len();
        let mut input = InBuffer::around(chunk);
        loop {
            self.out
                .reserve(zstd_safe::compress_bound(chunk.len()) + 64);
            let pos = self.out.len();
            let mut output = OutBuffer::around_pos(&mut self.out, pos);
            let left = self
                .cctx
                .compress_stream2(&mut output, &mut input, directive)
                .map_err(zstd_err)?;
            if left == 0 && input.pos() == chunk.len() {
                break;
            }
        }
        let header = if self.started {
            0
        } else {
            self.started = true;
            frame_header_len(&self.out[start..])
        };
        let is_end = directive == zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_end;
        if !is_end && !chunk.is_empty() && !one_block(&self.out[start + header..]) {
            self.odd_flushes += 1;
            if self.odd_flushes == 1 {
                tracing::warn!(
                    "a zstd flush came out as several blocks: a kill -9 during its write could \
                     leave a partial event at the end of the file (lower --compress-level)"
                );
            }
        }
        Ok(())
    }

    /// What stays of a write that stopped after `done` bytes: the length
    /// of the whole flushes in them, their EPBs, uncompressed bytes and
    /// EPBs per agent index.
    pub fn kept(&self, done: usize) -> (usize, u64, u64, Vec<(u32, u64)>) {
        let (mut keep, mut events, mut raw) = (0, 0, 0);
        let mut by_agent: Vec<(u32, u64)> = Vec::new();
        for m in self.marks.iter().take_while(|m| m.end <= done) {
            (keep, events, raw) = (m.end, events + m.events, raw + m.raw);
            for &(a, n) in &m.by_agent {
                match by_agent.iter_mut().find(|(x, _)| *x == a) {
                    Some((_, t)) => *t += n,
                    None => by_agent.push((a, n)),
                }
            }
        }
        (keep, events, raw, by_agent)
    }
}

/// How many bytes of `raw` (pcapng blocks) the next flush compresses: the
/// whole blocks within [`FLUSH_RAW_MAX`], or a larger first block alone
/// (never the sink's), or all of `raw` if no block in it is whole.
pub fn flush_len(raw: &[u8]) -> usize {
    match whole_blocks(raw, FLUSH_RAW_MAX).0 {
        0 => match first_block_len(raw) {
            0 => raw.len(),
            n => n,
        },
        n => n,
    }
}

/// Length of the first block of `raw` (0 if none is whole).
fn first_block_len(raw: &[u8]) -> usize {
    raw.get(4..8)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .filter(|&l| l >= 12 && l <= raw.len())
        .unwrap_or(0)
}

/// Length of the zstd frame header at the start of `frame` (RFC 8878,
/// 3.1.1.1: magic, descriptor, window descriptor, dictionary id, content
/// size).
fn frame_header_len(frame: &[u8]) -> usize {
    let Some(&fhd) = frame.get(4) else {
        return frame.len();
    };
    let single_segment = fhd & 0x20 != 0;
    let did = [0, 1, 2, 4][usize::from(fhd & 3)];
    let fcs = match fhd >> 6 {
        0 => usize::from(single_segment),
        1 => 2,
        2 => 4,
        _ => 8,
    };
    5 + usize::from(!single_segment) + did + fcs
}

/// Whether `blocks` (a flush's output after any frame header) is exactly
/// one block, not the last, compressed or raw.
fn one_block(blocks: &[u8]) -> bool {
    let Some(b) = blocks.get(..3) else {
        return false;
    };
    let header = u32::from_le_bytes([b[0], b[1], b[2], 0]);
    let (last, kind, size) = (header & 1, (header >> 1) & 3, (header >> 3) as usize);
    let stored = if kind == 1 { 1 } else { size };
    last == 0 && 3 + stored == blocks.len()
}

/// Whether `head` (a file's first bytes) starts a zstd frame.
pub fn is_zstd(head: &[u8]) -> bool {
    head.get(..4)
        .is_some_and(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]) == ZSTD_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// `n` EPB-typed blocks of `len` bytes on interface `i % 2`, with
    /// varied, compressible bodies.
    fn blocks(n: usize, len: usize) -> Vec<u8> {
        let mut v = Vec::new();
        for i in 0..n {
            let start = v.len();
            v.extend_from_slice(&6u32.to_le_bytes());
            v.extend_from_slice(&(len as u32).to_le_bytes());
            v.extend_from_slice(&((i % 2) as u32).to_le_bytes());
            while v.len() < start + len - 4 {
                v.push(((v.len() - start) % 13) as u8 ^ (i % 7) as u8);
            }
            v.extend_from_slice(&(len as u32).to_le_bytes());
        }
        v
    }

    /// Decode what a reader gets of `bytes` before the stream ends (a cut
    /// frame ends in an error, after the whole blocks).
    fn decode_prefix(bytes: &[u8]) -> Vec<u8> {
        let mut d = zstd::stream::read::Decoder::new(bytes).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match d.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        got
    }

    #[test]
    fn every_flush_is_one_block_at_every_level_and_the_frame_decodes() {
        let raw = blocks(3000, 132);
        for level in -7..=15 {
            let mut z = ZstdFile::new(level).unwrap();
            // Flushes of every size up to a whole FLUSH_RAW_MAX.
            let mut at = 0;
            let mut k = 0;
            while at < raw.len() {
                let want = [132 * 7, FLUSH_RAW_MAX, 132 * 300, 5000][k % 4];
                let (n, _) = whole_blocks(&raw[at..], want.max(132));
                z.push(&raw[at..at + n], 0, &[0, 1]).unwrap();
                at += n;
                k += 1;
            }
            z.finish().unwrap();
            assert_eq!(z.odd_flushes, 0, "level {level}");
            assert_eq!(zstd::stream::decode_all(z.out()).unwrap(), raw);
        }
    }

    #[test]
    fn a_chunk_over_the_flush_size_is_flushed_in_pieces_counted_per_agent() {
        let mut z = ZstdFile::new(1).unwrap();
        let raw = blocks(3000, 200);
        z.push(&raw, 3000, &[7, 9]).unwrap();
        assert!(z.marks.len() >= 5, "{} flushes", z.marks.len());
        assert!(z.marks.iter().all(|m| m.raw as usize <= FLUSH_RAW_MAX));
        assert_eq!(z.events(), 3000);
        let (_, events, raw_n, by_agent) = z.kept(z.out().len());
        assert_eq!((events, raw_n), (3000, raw.len() as u64));
        assert_eq!(by_agent, vec![(7, 1500), (9, 1500)]);
        assert_eq!(z.odd_flushes, 0);
    }

    #[test]
    fn a_cut_anywhere_decodes_to_whole_flushes_only() {
        let mut z = ZstdFile::new(3).unwrap();
        let raw = blocks(4000, 100);
        for c in raw.chunks(100 * 700) {
            z.push(c, 700, &[0, 1]).unwrap();
        }
        let ends: Vec<usize> = z.marks.iter().map(|m| m.end).collect();
        for cut in (0..z.out.len()).step_by(7) {
            let got = decode_prefix(&z.out[..cut]);
            let whole = ends.iter().filter(|&&e| e <= cut).count();
            assert_eq!(got.len(), whole * 100 * 700, "cut at {cut}");
            let (keep, events, raw_n, _) = z.kept(cut);
            assert_eq!(keep, if whole == 0 { 0 } else { ends[whole - 1] });
            assert_eq!((events, raw_n), (whole as u64 * 700, whole as u64 * 70_000));
            // Cut back and ended: a complete frame.
            if whole > 0 {
                let mut ended = z.out[..keep].to_vec();
                ended.extend_from_slice(&END_BLOCK);
                assert_eq!(
                    zstd::stream::decode_all(&ended[..]).unwrap(),
                    raw[..whole * 70_000]
                );
            }
        }
    }

    #[test]
    fn incompressible_data_still_decodes() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut raw = blocks(200, 400);
        for b in raw.iter_mut().skip(12).step_by(2) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        let raw = blocks(1, 12).into_iter().chain(raw).collect::<Vec<_>>();
        let mut z = ZstdFile::new(1).unwrap();
        z.push(&raw, 201, &[0, 1]).unwrap();
        z.finish().unwrap();
        assert!(is_zstd(z.out()));
        assert!(!is_zstd(&0x0A0D_0D0Au32.to_le_bytes()));
        assert_eq!(zstd::stream::decode_all(z.out()).unwrap(), raw);
    }
}
