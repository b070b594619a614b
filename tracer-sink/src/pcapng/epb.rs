//! Enhanced Packet Blocks encoded by hand, in place (the hot path: one
//! per event), and the walk over whole blocks that tells what a failed
//! write kept.

/// Option code of `epb_packetid` (pcapng spec; `pcap-file` has no variant).
pub const EPB_PACKETID: u16 = 5;

/// pcapng block type of an Enhanced Packet Block.
pub(super) const EPB_TYPE: u32 = 6;

/// The whole blocks of `buf` (a little-endian run of pcapng blocks) that
/// end within its first `limit` bytes: their length and how many of them
/// are EPBs.
pub(super) fn whole_blocks(buf: &[u8], limit: usize) -> (usize, u64) {
    let (mut off, mut epbs) = (0usize, 0u64);
    while off + 8 <= buf.len() {
        let word = |at: usize| u32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
        let len = word(off + 4) as usize;
        if len < 12 || off + len > limit.min(buf.len()) {
            break;
        }
        epbs += u64::from(word(off) == EPB_TYPE);
        off += len;
    }
    (off, epbs)
}

/// Enhanced packet blocks in `blocks` (whole blocks) per agent index;
/// `agents[i]` is the agent of interface `i`.
pub(super) fn epbs_by_agent(agents: &[u32], blocks: &[u8]) -> Vec<(u32, u64)> {
    let mut out: Vec<(u32, u64)> = Vec::new();
    let mut off = 0usize;
    let word = |at: usize| {
        blocks
            .get(at..at + 4)
            .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    while off + 12 <= blocks.len() {
        let len = word(off + 4) as usize;
        if len < 12 {
            break;
        }
        if word(off) == EPB_TYPE {
            if let Some(&agent) = agents.get(word(off + 8) as usize) {
                match out.iter_mut().find(|(a, _)| *a == agent) {
                    Some((_, n)) => *n += 1,
                    None => out.push((agent, 1)),
                }
            }
        }
        off += len;
    }
    out
}

/// Option code of `opt_comment`.
const OPT_COMMENT: u16 = 1;

fn pad4(buf: &mut Vec<u8>) {
    let pad = (4 - buf.len() % 4) % 4;
    buf.extend_from_slice(&[0u8; 3][..pad]);
}

/// Append one Enhanced Packet Block (little-endian section, interface in
/// nanosecond resolution, no `if_tsoffset`) to `buf`, which must hold
/// whole blocks only (its length a multiple of 4). Byte for byte what
/// `pcap-file` writes for an EPB whose options are `epb_packetid` then
/// `opt_comment` (omitted when `comment` appends nothing), then
/// `opt_endofopt`; but encoded in place, without per-block allocations.
/// A comment longer than an option can hold is cut (on a UTF-8 boundary)
/// to 65535 bytes.
pub(crate) fn encode_epb(
    buf: &mut Vec<u8>,
    iface: u32,
    ts_ns: u64,
    packet_id: u64,
    payload: impl FnOnce(&mut Vec<u8>),
    comment: impl FnOnce(&mut Vec<u8>),
) {
    debug_assert_eq!(buf.len() % 4, 0);
    let start = buf.len();
    buf.reserve(512);
    // The fixed part in one piece (captured and original length patched
    // below): a dozen small appends, each checking the capacity, cost
    // more than the record's copy.
    let mut head = [0u8; 28];
    head[0..4].copy_from_slice(&EPB_TYPE.to_le_bytes());
    head[8..12].copy_from_slice(&iface.to_le_bytes());
    head[12..16].copy_from_slice(&((ts_ns >> 32) as u32).to_le_bytes());
    head[16..20].copy_from_slice(&(ts_ns as u32).to_le_bytes());
    buf.extend_from_slice(&head);
    let data = buf.len();
    payload(buf);
    let cap = buf.len() - data;
    buf[data - 8..data - 4].copy_from_slice(&(cap as u32).to_le_bytes());
    buf[data - 4..data].copy_from_slice(&(cap as u32).to_le_bytes());
    // Padding, then epb_packetid.
    let pad = (4 - cap % 4) % 4;
    let mut id = [0u8; 15];
    id[pad..pad + 2].copy_from_slice(&EPB_PACKETID.to_le_bytes());
    id[pad + 2..pad + 4].copy_from_slice(&8u16.to_le_bytes());
    id[pad + 4..pad + 12].copy_from_slice(&packet_id.to_le_bytes());
    buf.extend_from_slice(&id[..pad + 12]);
    // opt_comment
    let opt = buf.len();
    buf.extend_from_slice(&OPT_COMMENT.to_le_bytes());
    buf.extend_from_slice(&[0u8; 2]);
    comment(buf);
    let mut clen = buf.len() - opt - 4;
    if clen == 0 {
        buf.truncate(opt);
    } else {
        if clen > usize::from(u16::MAX) {
            clen = usize::from(u16::MAX);
            let text = &buf[opt + 4..];
            // Back up to a character boundary (never more than 3 bytes).
            while clen > 0 && (text[clen] & 0xc0) == 0x80 {
                clen -= 1;
            }
            buf.truncate(opt + 4 + clen);
        }
        buf[opt + 2..opt + 4].copy_from_slice(&(clen as u16).to_le_bytes());
        pad4(buf);
    }
    // opt_endofopt, then the total length (here and at the start).
    let total = ((buf.len() - start + 8) as u32).to_le_bytes();
    let mut end = [0u8; 8];
    end[4..8].copy_from_slice(&total);
    buf.extend_from_slice(&end);
    buf[start + 4..start + 8].copy_from_slice(&total);
}

/// Append one Enhanced Packet Block without a comment whose packet data
/// is `head` then `data`, and return where the copy of `head` starts in
/// `buf` (for the caller to fill in per-event fields). Byte for byte what
/// [`encode_epb`] writes for that payload and an empty comment, but with
/// every length known up front: one reservation and four copies.
pub(crate) fn encode_epb_parts(
    buf: &mut Vec<u8>,
    iface: u32,
    ts_ns: u64,
    packet_id: u64,
    head: &[u8],
    data: &[u8],
) -> usize {
    debug_assert_eq!(buf.len() % 4, 0);
    let cap = head.len() + data.len();
    let pad = (4 - cap % 4) % 4;
    // Block head, data, padding, epb_packetid (12), opt_endofopt (4),
    // total length (4).
    let total = 28 + cap + pad + 20;
    buf.reserve(total);
    let mut block = [0u8; 28];
    block[0..4].copy_from_slice(&EPB_TYPE.to_le_bytes());
    block[4..8].copy_from_slice(&(total as u32).to_le_bytes());
    block[8..12].copy_from_slice(&iface.to_le_bytes());
    block[12..16].copy_from_slice(&((ts_ns >> 32) as u32).to_le_bytes());
    block[16..20].copy_from_slice(&(ts_ns as u32).to_le_bytes());
    block[20..24].copy_from_slice(&(cap as u32).to_le_bytes());
    block[24..28].copy_from_slice(&(cap as u32).to_le_bytes());
    buf.extend_from_slice(&block);
    let at = buf.len();
    buf.extend_from_slice(head);
    buf.extend_from_slice(data);
    let mut tail = [0u8; 23];
    let t = &mut tail[pad..pad + 20];
    t[0..2].copy_from_slice(&EPB_PACKETID.to_le_bytes());
    t[2..4].copy_from_slice(&8u16.to_le_bytes());
    t[4..12].copy_from_slice(&packet_id.to_le_bytes());
    t[16..20].copy_from_slice(&(total as u32).to_le_bytes());
    buf.extend_from_slice(&tail[..pad + 20]);
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_blocks_stop_at_the_last_boundary_within_the_limit() {
        let mut buf = Vec::new();
        let mut ends = Vec::new();
        for i in 0..5u64 {
            encode_epb(&mut buf, 0, i, i, |o| o.push(1), |_| {});
            ends.push(buf.len());
        }
        assert_eq!(whole_blocks(&buf, buf.len()), (buf.len(), 5));
        assert_eq!(whole_blocks(&buf, ends[2]), (ends[2], 3));
        assert_eq!(whole_blocks(&buf, ends[2] + 7), (ends[2], 3));
        assert_eq!(whole_blocks(&buf, ends[0] - 1), (0, 0));
    }

    #[test]
    fn kept_events_are_counted_per_agent() {
        // Interfaces 0, 1, 2 are agents 7, 3, 9.
        let agents = [7, 3, 9];
        let mut buf = Vec::new();
        for iface in [0, 1, 0, 2, 1, 0] {
            encode_epb(&mut buf, iface, 1, 1, |o| o.push(1), |_| {});
        }
        assert_eq!(epbs_by_agent(&agents, &buf), [(7, 3), (3, 2), (9, 1)]);
        let (keep, n) = whole_blocks(&buf, buf.len() / 2 + 3);
        assert_eq!(n, 3);
        assert_eq!(epbs_by_agent(&agents, &buf[..keep]), [(7, 2), (3, 1)]);
    }

    #[test]
    fn parts_encode_like_a_payload_without_comment() {
        for (hl, dl) in [(0, 0), (23, 0), (23, 1), (30, 125), (31, 2), (5, 64)] {
            let head: Vec<u8> = (0..hl).map(|i| i as u8).collect();
            let data: Vec<u8> = (0..dl).map(|i| 200 - i as u8).collect();
            let mut want = vec![7u8; 8];
            encode_epb(
                &mut want,
                3,
                0x1234_5678_9abc,
                42,
                |o| {
                    o.extend_from_slice(&head);
                    o.extend_from_slice(&data);
                },
                |_| {},
            );
            let mut got = vec![7u8; 8];
            let at = encode_epb_parts(&mut got, 3, 0x1234_5678_9abc, 42, &head, &data);
            assert_eq!(got, want, "head {hl}, data {dl}");
            assert_eq!(&got[at..at + hl], &head[..]);
        }
    }

    #[test]
    fn oversized_comment_is_cut_on_a_char_boundary() {
        let mut buf = Vec::new();
        let text = "é".repeat(40_000); // 80 000 bytes
        encode_epb(
            &mut buf,
            0,
            5,
            9,
            |o| o.push(1),
            |o| o.extend_from_slice(text.as_bytes()),
        );
        assert_eq!(buf.len() % 4, 0);
        let total = u32::from_le_bytes(buf[4..8].try_into().unwrap()) as usize;
        assert_eq!(total, buf.len());
        assert_eq!(&buf[total - 4..], &buf[4..8]);
        let copt = 28 + 4 + 12;
        let clen = u16::from_le_bytes(buf[copt + 2..copt + 4].try_into().unwrap()) as usize;
        assert_eq!(clen, 65_534);
        assert!(std::str::from_utf8(&buf[copt + 4..copt + 4 + clen]).is_ok());
    }
}
