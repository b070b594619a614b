//! The Ethernet framing of one capture record on a live interface (pure):
//! fixed locally administered unicast addresses, EtherType
//! [`LIVE_ETHERTYPE`], then the record. No padding: a TAP takes frames
//! shorter than 60 bytes, and the dissector gets exactly the record.

pub use tracer_codec::LIVE_ETHERTYPE;

/// Bytes of the Ethernet header.
pub const ETH_HEADER_LEN: usize = 14;

/// Destination address: locally administered (bit 1 of the first byte),
/// unicast, "nt" in the next two bytes. Not broadcast: Wireshark's default
/// colouring greys out every broadcast frame, and a packet socket (what
/// dumpcap and tcpdump read) gets the frame whatever its destination; the
/// stack drops it either way, no handler knowing the EtherType.
pub const DST_MAC: [u8; 6] = [0x02, b'n', b't', 0x00, 0x00, 0x00];

/// Source address: as [`DST_MAC`], ending in 1.
pub const SRC_MAC: [u8; 6] = [0x02, b'n', b't', 0x00, 0x00, 0x01];

/// The Ethernet header of every frame.
pub const fn eth_header() -> [u8; ETH_HEADER_LEN] {
    let mut h = [0u8; ETH_HEADER_LEN];
    let mut i = 0;
    while i < 6 {
        h[i] = DST_MAC[i];
        h[6 + i] = SRC_MAC[i];
        i += 1;
    }
    let t = LIVE_ETHERTYPE.to_be_bytes();
    h[12] = t[0];
    h[13] = t[1];
    h
}

/// Append one frame to `out`: the header, then `head` and `data` (a
/// capture header and its record); `fill` gets the copy of `head` to
/// write per-event fields into. Returns the frame's length.
pub fn append_frame(
    out: &mut Vec<u8>,
    head: &[u8],
    data: &[u8],
    fill: impl FnOnce(&mut [u8]),
) -> usize {
    let start = out.len();
    out.reserve(ETH_HEADER_LEN + head.len() + data.len());
    out.extend_from_slice(&eth_header());
    let at = out.len();
    out.extend_from_slice(head);
    out.extend_from_slice(data);
    fill(&mut out[at..at + head.len()]);
    out.len() - start
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_is_header_then_record() {
        let mut out = vec![9u8];
        let n = append_frame(&mut out, &[1, 2, 3], &[4, 5], |h| h[1] = 7);
        assert_eq!(n, ETH_HEADER_LEN + 5);
        assert_eq!(&out[1..7], &DST_MAC);
        assert_eq!(&out[7..13], &SRC_MAC);
        // EtherType in network order.
        assert_eq!(&out[13..15], &[0x88, 0xB5]);
        assert_eq!(&out[15..], &[1, 7, 3, 4, 5]);
        // Locally administered, unicast addresses.
        assert_eq!(SRC_MAC[0] & 0b11, 0b10);
        assert_eq!(DST_MAC[0] & 0b11, 0b10);
    }
}
