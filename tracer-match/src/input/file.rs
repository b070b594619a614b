//! An input file as a pcapng byte stream: plain, or zstd-compressed
//! (`.pcapng.zst`, told by its magic bytes, not its name), decoded as it
//! is read.
//!
//! A compressed file cut short (a sink killed while writing) ends inside
//! a zstd frame; the decoder's error there is kept as the file's damage
//! and the stream ends at the last whole frame, as a plain file cut
//! inside a block is used up to that block.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// zstd frame magic number, as it starts a file.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// The decoded bytes of one input file.
pub struct TraceInput {
    inner: Inner,
    /// Why a compressed stream stopped early, if it did.
    damage: Option<String>,
}

enum Inner {
    Plain(BufReader<File>),
    Zstd(Box<zstd::Decoder<'static, BufReader<File>>>),
}

impl TraceInput {
    /// Open `path`, reading through `buf` bytes of buffer.
    pub fn open(path: &Path, buf: usize) -> std::io::Result<Self> {
        let mut r = BufReader::with_capacity(buf, File::open(path)?);
        let inner = if r.fill_buf()?.starts_with(&ZSTD_MAGIC) {
            Inner::Zstd(Box::new(zstd::Decoder::with_buffer(r)?))
        } else {
            Inner::Plain(r)
        };
        Ok(TraceInput {
            inner,
            damage: None,
        })
    }

    /// Whether the file is zstd-compressed.
    pub fn compressed(&self) -> bool {
        matches!(self.inner, Inner::Zstd(_))
    }

    /// Why a compressed stream ended before its end (a frame cut short or
    /// damaged), once it has.
    pub fn damage(&self) -> Option<&str> {
        self.damage.as_deref()
    }
}

impl Read for TraceInput {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match &mut self.inner {
            Inner::Plain(r) => r.read(buf),
            Inner::Zstd(_) if self.damage.is_some() => Ok(0),
            Inner::Zstd(d) => match d.read(buf) {
                Err(e) if e.kind() != std::io::ErrorKind::Interrupted => {
                    self.damage = Some(match e.kind() {
                        std::io::ErrorKind::UnexpectedEof => {
                            "the file ends inside its zstd frame (cut while it was written); \
                             everything before the cut was read"
                                .to_owned()
                        }
                        _ => format!("damaged zstd data ({e}); what came before it was read"),
                    });
                    Ok(0)
                }
                other => other,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(bytes: &[u8]) -> (Vec<u8>, Option<String>, bool) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        std::fs::write(&p, bytes).unwrap();
        let mut t = TraceInput::open(&p, 4096).unwrap();
        let mut out = Vec::new();
        t.read_to_end(&mut out).unwrap();
        (out, t.damage().map(str::to_owned), t.compressed())
    }

    #[test]
    fn plain_and_multi_frame_zstd_read_alike_and_a_cut_frame_is_damage() {
        let a: Vec<u8> = (0..5000u32).flat_map(|i| i.to_le_bytes()).collect();
        let b: Vec<u8> = (0..3000u32).flat_map(|i| (i * 7).to_le_bytes()).collect();
        let mut z = zstd::bulk::compress(&a, 1).unwrap();
        let first = z.len();
        z.extend(zstd::bulk::compress(&b, 1).unwrap());
        let both = [a.clone(), b].concat();
        assert_eq!(read_all(&both), (both.clone(), None, false));
        assert_eq!(read_all(&z), (both, None, true));
        // Cut inside the second frame: the first one, and the damage noted.
        let (got, damage, _) = read_all(&z[..first + 10]);
        assert_eq!(got, a);
        assert!(damage.unwrap().contains("inside its zstd frame"));
        // Garbage after a good frame.
        let mut bad = z[..first].to_vec();
        bad.extend_from_slice(&ZSTD_MAGIC);
        bad.extend_from_slice(&[0xff; 64]);
        let (got, damage, _) = read_all(&bad);
        assert_eq!(got, a);
        assert!(damage.is_some());
    }
}
