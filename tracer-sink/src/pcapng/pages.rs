//! Every block within one page of the file. A process killed while it
//! writes stops at a page boundary (the kernel checks for a fatal signal
//! between the pages of a write, `generic_perform_write`), so after a
//! `kill -9` the file would end inside a block wherever a block crosses a
//! page. A block that would cross one is moved to start on it instead,
//! behind a padding block: then every page boundary is a block boundary
//! and a killed sink leaves only whole blocks. The padding is a block of a
//! type reserved for local use (bit 31 set, pcapng section 3.1), which
//! readers skip; Wireshark 4.0 shows a Custom Block (0x00000BAD) as a
//! frame, so that is not used.

/// Page size the kernel cuts writes at (folios are whole pages).
pub(super) const PAGE: u64 = 4096;
/// Block type of the padding: local use (bit 31), "NT".
pub const PAD_BLOCK: u32 = 0x8000_4E54;
/// Smallest block: type, length, length.
const MIN_PAD: usize = 12;

/// The block appended to `buf` from `start` (file offset `base + start`)
/// moved to the next page boundary, behind a padding block, if it would
/// cross it and fits in a page. Returns the padding's length (0: none).
pub(super) fn keep_in_page(buf: &mut Vec<u8>, base: u64, start: usize) -> usize {
    let len = buf.len() - start;
    let at = base + start as u64;
    let room = (PAGE - at % PAGE) as usize;
    if len <= room || len as u64 > PAGE {
        return 0;
    }
    // Blocks are multiples of 4 bytes at offsets multiple of 4, so room is
    // too; too little room for a padding block pads on to the next page.
    let pad = if room < MIN_PAD {
        room + PAGE as usize
    } else {
        room
    };
    buf.resize(buf.len() + pad, 0);
    buf.copy_within(start..start + len, start + pad);
    let p = &mut buf[start..start + pad];
    p.fill(0);
    p[0..4].copy_from_slice(&PAD_BLOCK.to_le_bytes());
    p[4..8].copy_from_slice(&(pad as u32).to_le_bytes());
    p[pad - 4..].copy_from_slice(&(pad as u32).to_le_bytes());
    pad
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Walk whole blocks: (offset, length, type).
    fn blocks(buf: &[u8]) -> Vec<(usize, usize, u32)> {
        let word = |at: usize| u32::from_le_bytes(buf[at..at + 4].try_into().unwrap());
        let mut out = Vec::new();
        let mut off = 0;
        while off < buf.len() {
            let len = word(off + 4) as usize;
            assert_eq!(word(off + len - 4) as usize, len, "trailing length");
            out.push((off, len, word(off)));
            off += len;
        }
        out
    }

    #[test]
    fn no_block_crosses_a_page_and_padding_ends_on_the_boundary() {
        for base in [0u64, 4, 12, 4084, 4092, 8000] {
            let mut buf = Vec::new();
            let mut sizes = Vec::new();
            for i in 0..2000usize {
                let len = 12 + 4 * ((i * 37) % 90);
                let start = buf.len();
                buf.extend_from_slice(&6u32.to_le_bytes());
                buf.extend_from_slice(&(len as u32).to_le_bytes());
                buf.resize(start + len - 4, i as u8);
                buf.extend_from_slice(&(len as u32).to_le_bytes());
                keep_in_page(&mut buf, base, start);
                sizes.push(len);
            }
            let all = blocks(&buf);
            let data: Vec<usize> = all.iter().filter(|b| b.2 == 6).map(|b| b.1).collect();
            assert_eq!(data, sizes, "every block kept, in order");
            for &(off, len, ty) in &all {
                let (first, last) = (base + off as u64, base + (off + len) as u64 - 1);
                if ty == 6 {
                    assert_eq!(first / PAGE, last / PAGE, "block at {first} crosses a page");
                } else {
                    assert_eq!(ty, PAD_BLOCK);
                    assert!(len >= MIN_PAD);
                    assert_eq!((last + 1) % PAGE, 0, "padding ends on a page boundary");
                }
            }
            let padding: usize = all.iter().filter(|b| b.2 != 6).map(|b| b.1).sum();
            assert!(
                padding * 20 < buf.len(),
                "padding {padding} of {}",
                buf.len()
            );
        }
    }

    #[test]
    fn a_block_larger_than_a_page_is_left_where_it_is() {
        let mut buf = vec![0u8; 100];
        let start = buf.len();
        buf.resize(start + 5000, 1);
        assert_eq!(keep_in_page(&mut buf, 0, start), 0);
        assert_eq!(buf.len(), 5100);
    }
}
