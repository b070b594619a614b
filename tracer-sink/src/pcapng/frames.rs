//! zstd framing of a compressed trace file (`.pcapng.zst`): the pcapng
//! stream is cut at block boundaries into independent zstd frames, and
//! the file is their concatenation, which Wireshark, tshark, capinfos and
//! mergecap (4.0) read as one pcapng stream.
//!
//! Why frames this size: a frame of at most [`FRAME_RAW_MAX`] bytes is a
//! single zstd block, and a decoder gives out nothing of a block it has
//! not read whole. So a file cut anywhere (a `kill -9` in the middle of a
//! write, a copy in progress) decodes to whole frames, hence whole pcapng
//! blocks: tshark reads it to the last complete frame without an error.
//! A frame of several zstd blocks, cut between them, would end inside a
//! pcapng block ("cut short in the middle of a packet"); every frame is
//! checked to be one compressed block and split in two at a block
//! boundary when it is not. The one exception left is a block zstd stores
//! raw (data it cannot compress at all, never the case for trace
//! records): a decoder streams those, so a cut inside one shows a partial
//! last packet.
//!
//! After a failed write the file is cut back to its last whole frame,
//! as the plain path cuts it back to its last whole block.

use std::io;

use crate::error::SinkError;

use super::epb::{epbs_by_agent, whole_blocks};

/// Most uncompressed bytes in one frame: zstd's largest block (128 KiB).
pub(super) const FRAME_RAW_MAX: usize = 128 << 10;
/// Compressed bytes kept in memory before a write to the file.
pub(super) const ZSTD_WRITE_CHUNK: usize = 256 << 10;
/// zstd frame magic number (little-endian on disk: 28 B5 2F FD).
pub const ZSTD_MAGIC: u32 = 0xFD2F_B528;

/// One frame in the unwritten buffer.
#[derive(Debug, Clone, Copy)]
struct Mark {
    /// End offset of the frame in [`Frames::out`].
    end: usize,
    /// EPBs in it.
    events: u64,
    /// Uncompressed bytes in it.
    raw: u64,
}

/// Compressor and the compressed bytes not yet written.
pub(super) struct Frames {
    cctx: zstd::bulk::Compressor<'static>,
    /// One frame's output (compress_to_buffer writes from its start).
    scratch: Vec<u8>,
    /// Whole frames not yet written to the file.
    out: Vec<u8>,
    marks: Vec<Mark>,
}

fn zstd_err(e: io::Error) -> SinkError {
    SinkError::Io {
        what: "zstd compression failed".to_owned(),
        source: e,
    }
}

impl Frames {
    /// A compressor at zstd `level` (checked by the configuration).
    pub fn new(level: i32) -> Result<Self, SinkError> {
        let mut cctx = zstd::bulk::Compressor::new(level).map_err(zstd_err)?;
        // A checksum per frame lets readers tell a damaged frame; the
        // content size lets them size their buffers.
        cctx.include_checksum(true).map_err(zstd_err)?;
        cctx.include_contentsize(true).map_err(zstd_err)?;
        Ok(Frames {
            cctx,
            scratch: Vec::with_capacity(zstd::zstd_safe::compress_bound(FRAME_RAW_MAX)),
            out: Vec::with_capacity(ZSTD_WRITE_CHUNK + FRAME_RAW_MAX),
            marks: Vec::new(),
        })
    }

    /// Compressed bytes not yet written.
    pub fn out(&self) -> &[u8] {
        &self.out
    }

    /// EPBs in the unwritten frames.
    pub fn events(&self) -> u64 {
        self.marks.iter().map(|m| m.events).sum()
    }

    /// Uncompressed bytes of the unwritten frames.
    pub fn raw(&self) -> u64 {
        self.marks.iter().map(|m| m.raw).sum()
    }

    /// Forget the unwritten frames (written, or given up).
    pub fn clear(&mut self) {
        self.out.clear();
        self.marks.clear();
    }

    /// Compress `raw` (whole pcapng blocks holding `events` EPBs) into
    /// frames of one zstd block each, appended to the unwritten ones.
    pub fn push(&mut self, raw: &[u8], events: u64) -> Result<(), SinkError> {
        if raw.is_empty() {
            return Ok(());
        }
        self.scratch.clear();
        self.cctx
            .compress_to_buffer(raw, &mut self.scratch)
            .map_err(zstd_err)?;
        // A raw block stays as it is: splitting cannot make it compress.
        if raw.len() > FRAME_RAW_MAX || shape(&self.scratch) == Shape::Several {
            // Split at the block boundary nearest the middle; one pcapng
            // block cannot be split (the sink's are far below 128 KiB).
            let (half, first_events) = whole_blocks(raw, raw.len() / 2);
            let half = if half == 0 {
                whole_blocks(raw, raw.len()).0.min(first_block_len(raw))
            } else {
                half
            };
            if half > 0 && half < raw.len() {
                self.push(&raw[..half], first_events.min(events))?;
                return self.push(&raw[half..], events - first_events.min(events));
            }
        }
        self.out.extend_from_slice(&self.scratch);
        self.marks.push(Mark {
            end: self.out.len(),
            events,
            raw: raw.len() as u64,
        });
        Ok(())
    }

    /// What stays of a write that stopped after `done` bytes: the length
    /// of the whole frames in them, their EPBs, their uncompressed bytes,
    /// and their EPBs per agent (`agents[i]` is the agent of interface `i`).
    pub fn kept(&self, done: usize, agents: &[u32]) -> (usize, u64, u64, Vec<(u32, u64)>) {
        let whole = self.marks.iter().take_while(|m| m.end <= done);
        let (mut keep, mut events, mut raw) = (0, 0, 0);
        for m in whole {
            (keep, events, raw) = (m.end, events + m.events, raw + m.raw);
        }
        // A failed write is rare: decode the kept frames again to count
        // each agent's events rather than keep counts for every frame.
        let by_agent = match zstd::stream::decode_all(&self.out[..keep]) {
            Ok(blocks) => epbs_by_agent(agents, &blocks),
            Err(e) => {
                tracing::error!(error = &e as &dyn std::error::Error, "cannot decode the frames just written (a bug): agents are told none of them was written");
                Vec::new()
            }
        };
        (keep, events, raw, by_agent)
    }
}

/// Length of the first block of `raw` (0 if none is whole).
fn first_block_len(raw: &[u8]) -> usize {
    raw.get(4..8)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .filter(|&l| l >= 12 && l <= raw.len())
        .unwrap_or(0)
}

/// What a zstd frame is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// One compressed block: a decoder gives out all of it or nothing.
    OneCompressed,
    /// One block stored raw (or RLE): a decoder streams its bytes out.
    OneRaw,
    /// Several blocks (or not a frame this parser knows).
    Several,
}

/// The shape of `frame` (one whole zstd frame).
fn shape(frame: &[u8]) -> Shape {
    let Some(&fhd) = frame.get(4) else {
        return Shape::Several;
    };
    // Frame header (RFC 8878, 3.1.1.1): descriptor, optional window
    // descriptor, dictionary id, content size.
    let single_segment = fhd & 0x20 != 0;
    let did = [0, 1, 2, 4][usize::from(fhd & 3)];
    let fcs = match fhd >> 6 {
        0 => usize::from(single_segment),
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let at = 5 + usize::from(!single_segment) + did + fcs;
    let Some(b) = frame.get(at..at + 3) else {
        return Shape::Several;
    };
    let header = u32::from_le_bytes([b[0], b[1], b[2], 0]);
    let (last, kind, size) = (header & 1, (header >> 1) & 3, (header >> 3) as usize);
    // Compressed (2), last; then only the optional 4-byte checksum.
    let checksum = if fhd & 4 != 0 { 4 } else { 0 };
    // An RLE block's size field is its decoded size: one byte follows.
    let stored = if kind == 1 { 1 } else { size };
    match (last == 1 && at + 3 + stored + checksum == frame.len(), kind) {
        (true, 2) => Shape::OneCompressed,
        (true, _) => Shape::OneRaw,
        (false, _) => Shape::Several,
    }
}

/// Whether `head` (a file's first bytes) starts a zstd frame.
pub fn is_zstd(head: &[u8]) -> bool {
    head.get(..4)
        .is_some_and(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]) == ZSTD_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` EPB-typed blocks of `len` bytes with varied, compressible bodies.
    fn blocks(n: usize, len: usize) -> Vec<u8> {
        let mut v = Vec::new();
        for i in 0..n {
            let start = v.len();
            v.extend_from_slice(&6u32.to_le_bytes());
            v.extend_from_slice(&(len as u32).to_le_bytes());
            v.extend_from_slice(&0u32.to_le_bytes());
            while v.len() < start + len - 4 {
                v.push(((v.len() - start) % 13) as u8 ^ (i % 7) as u8);
            }
            v.extend_from_slice(&(len as u32).to_le_bytes());
        }
        v
    }

    #[test]
    fn frames_are_single_compressed_blocks_and_decode_back() {
        for level in [-5, 1, 3, 9, 19] {
            let mut f = Frames::new(level).unwrap();
            let raw = blocks(1000, 120);
            for chunk in raw.chunks(120 * 1000) {
                f.push(chunk, 1000).unwrap();
            }
            assert!(!f.marks.is_empty());
            let mut start = 0;
            for m in &f.marks {
                assert_eq!(
                    shape(&f.out[start..m.end]),
                    Shape::OneCompressed,
                    "level {level}"
                );
                start = m.end;
            }
            assert_eq!(zstd::stream::decode_all(f.out()).unwrap(), raw);
            assert_eq!(f.events(), 1000);
            assert_eq!(f.raw(), raw.len() as u64);
        }
    }

    #[test]
    fn an_oversized_chunk_is_split_into_single_block_frames() {
        let mut f = Frames::new(1).unwrap();
        let raw = blocks(3000, 200);
        f.push(&raw, 3000).unwrap();
        assert!(f.marks.len() >= 5, "{} frames", f.marks.len());
        let mut start = 0;
        for m in &f.marks {
            assert_eq!(shape(&f.out[start..m.end]), Shape::OneCompressed);
            assert!(m.raw as usize <= FRAME_RAW_MAX);
            start = m.end;
        }
        assert_eq!(f.events(), 3000);
        assert_eq!(zstd::stream::decode_all(f.out()).unwrap(), raw);
    }

    #[test]
    fn a_cut_anywhere_decodes_to_whole_frames_only() {
        let mut f = Frames::new(3).unwrap();
        let raw = blocks(4000, 100);
        for c in raw.chunks(100 * 700) {
            f.push(c, 700).unwrap();
        }
        let ends: Vec<usize> = f.marks.iter().map(|m| m.end).collect();
        for cut in (0..f.out.len()).step_by(7) {
            // A streaming decoder over the cut file: everything it hands
            // out before it stops must be whole frames.
            let mut d = zstd::stream::read::Decoder::new(&f.out[..cut]).unwrap();
            let mut got = Vec::new();
            let _ = std::io::Read::read_to_end(&mut d, &mut got);
            let whole = ends.iter().filter(|&&e| e <= cut).count();
            // A frame cut inside its checksum is decoded whole (the
            // checksum is checked after its block is handed out).
            let in_checksum = ends.get(whole).is_some_and(|&e| cut >= e - 4);
            let frames = whole + usize::from(in_checksum);
            assert_eq!(got.len(), frames * 100 * 700, "cut at {cut}");
            let (keep, events, rawn, _) = f.kept(cut, &[0]);
            assert_eq!(keep, ends.get(whole.wrapping_sub(1)).copied().unwrap_or(0));
            assert_eq!(events, whole as u64 * 700);
            assert_eq!(rawn, whole as u64 * 70_000);
        }
    }

    #[test]
    fn raw_blocks_are_told_apart_and_kept_whole() {
        // Incompressible bytes: zstd stores the block raw.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let frame = zstd::bulk::compress(&noise, 1).unwrap();
        assert_eq!(shape(&frame), Shape::OneRaw);
        let mut f = Frames::new(1).unwrap();
        f.push(&noise, 0).unwrap();
        assert_eq!(f.marks.len(), 1, "a raw frame is not split");
        assert!(is_zstd(&frame));
        assert!(!is_zstd(&0x0A0D_0D0Au32.to_le_bytes()));
    }
}
