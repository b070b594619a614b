//! The sink's acknowledgement to an agent (sink → agent, UDP, from the
//! sink's listening port to the datagram's source address), version 1.
//!
//! ```text
//! ack = magic "NTRA" | version u16 | ack_len u16 | flags u8 | reserved [7]
//!     | sink_instance u64 | ack_seq u64 | agent_id u64 | boot_id [16]
//!     | incarnation u64 | preceding_events u64 | delivered_events u64
//!     | lost_events u64 | received_events u64
//!     [ | mac [16] ]          (iff flags bit 0: a tag over the ack_len bytes before it)
//! ```
//! All counts are cumulative for one agent incarnation as seen by one sink
//! process (`sink_instance`, random per sink start), so a lost or reordered
//! ack is harmless: the agent keeps the one with the highest `ack_seq` per
//! sink instance. `ack_len` lets a later version append fields (a reader
//! skips them).

use crate::error::DecodeError;
use crate::wire::{FLAG_MAC, KNOWN_FLAGS, MAC_LEN};

/// First four bytes of every acknowledgement.
pub const ACK_MAGIC: [u8; 4] = *b"NTRA";
/// The acknowledgement version this build writes and reads.
pub const ACK_VERSION: u16 = 1;
/// Bytes of a version-1 acknowledgement before its tag.
pub const ACK_LEN: usize = 96;

/// The bytes a tag covers and the tag.
pub type Tagged<'a> = (&'a [u8], &'a [u8]);

/// What one sink holds of one agent incarnation's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ack {
    /// Random per sink process: counts of different instances add up.
    pub sink_instance: u64,
    /// Increases with every ack the sink instance sends.
    pub ack_seq: u64,
    /// The agent's id.
    pub agent_id: u64,
    /// The agent host's boot id.
    pub boot_id: [u8; 16],
    /// The agent's incarnation (0 for a version-1 agent).
    pub incarnation: u64,
    /// Events numbered before the first one this sink received (sent
    /// before it started, or while no sink listened): not this sink's to
    /// account for.
    pub preceding_events: u64,
    /// Events written to this sink's files (the write returned).
    pub delivered_events: u64,
    /// Events this sink counted lost: sequence gaps (net of late arrivals)
    /// and events it could not write.
    pub lost_events: u64,
    /// Events this sink accepted (delivered, or still on their way to the file).
    pub received_events: u64,
}

impl Ack {
    /// The untagged encoding (`flags` 0).
    pub fn encode(&self) -> [u8; ACK_LEN] {
        let mut b = [0u8; ACK_LEN];
        b[0..4].copy_from_slice(&ACK_MAGIC);
        b[4..6].copy_from_slice(&ACK_VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&(ACK_LEN as u16).to_le_bytes());
        let words = [
            (16, self.sink_instance),
            (24, self.ack_seq),
            (32, self.agent_id),
            (56, self.incarnation),
            (64, self.preceding_events),
            (72, self.delivered_events),
            (80, self.lost_events),
            (88, self.received_events),
        ];
        for (at, v) in words {
            b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        b[40..56].copy_from_slice(&self.boot_id);
        b
    }

    /// The encoding with [`FLAG_MAC`] set and `tag(ack)` appended.
    pub fn encode_with_mac(&self, tag: impl FnOnce(&[u8]) -> [u8; MAC_LEN]) -> Vec<u8> {
        let mut b = self.encode().to_vec();
        b[8] = FLAG_MAC;
        let t = tag(&b);
        b.extend_from_slice(&t);
        b
    }

    /// Decode an acknowledgement; also returns, when it is tagged, the
    /// bytes the tag covers and the tag (for the caller to check).
    pub fn parse(buf: &[u8]) -> Result<(Ack, Option<Tagged<'_>>), DecodeError> {
        if buf.len() < ACK_LEN {
            return Err(DecodeError::TooShort {
                len: buf.len(),
                need: ACK_LEN,
            });
        }
        let found = [buf[0], buf[1], buf[2], buf[3]];
        if found != ACK_MAGIC {
            return Err(DecodeError::BadMagic { found });
        }
        let version = u16::from_le_bytes([buf[4], buf[5]]);
        if version != ACK_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                found: version,
                supported: ACK_VERSION,
            });
        }
        let flags = buf[8];
        if flags & !KNOWN_FLAGS != 0 {
            return Err(DecodeError::BadFlags { flags });
        }
        let len = usize::from(u16::from_le_bytes([buf[6], buf[7]]));
        let trailer = if flags & FLAG_MAC != 0 { MAC_LEN } else { 0 };
        if len < ACK_LEN || len + trailer != buf.len() {
            return Err(DecodeError::BadHeaderLen {
                header_len: len,
                len: buf.len(),
            });
        }
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&buf[o..o + 8]);
            u64::from_le_bytes(a)
        };
        let mut boot_id = [0u8; 16];
        boot_id.copy_from_slice(&buf[40..56]);
        let ack = Ack {
            sink_instance: u64_at(16),
            ack_seq: u64_at(24),
            agent_id: u64_at(32),
            boot_id,
            incarnation: u64_at(56),
            preceding_events: u64_at(64),
            delivered_events: u64_at(72),
            lost_events: u64_at(80),
            received_events: u64_at(88),
        };
        let tagged = (trailer > 0).then(|| buf.split_at(len));
        Ok((ack, tagged))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Ack {
        Ack {
            sink_instance: 0x0102_0304_0506_0708,
            ack_seq: 9,
            agent_id: 0x1112_1314_1516_1718,
            boot_id: *b"ABCDEFGHIJKLMNOP",
            incarnation: 0x2122_2324_2526_2728,
            preceding_events: 100,
            delivered_events: 200,
            lost_events: 3,
            received_events: 250,
        }
    }

    #[test]
    fn round_trip_untagged_and_tagged() {
        let a = sample();
        let b = a.encode();
        assert_eq!(&b[0..4], b"NTRA");
        assert_eq!(Ack::parse(&b).unwrap(), (a, None));
        let t = a.encode_with_mac(|d| {
            let mut t = [0u8; MAC_LEN];
            t[0] = d.len() as u8;
            t
        });
        let (got, tagged) = Ack::parse(&t).unwrap();
        assert_eq!(got, a);
        let (signed, tag) = tagged.unwrap();
        assert_eq!(signed.len(), ACK_LEN);
        assert_eq!(tag[0] as usize, ACK_LEN);
        assert_eq!(signed[8], FLAG_MAC, "the tag covers the flag");
    }

    #[test]
    fn rejects_bad_framing() {
        let b = sample().encode();
        let reason = |b: &[u8]| Ack::parse(b).unwrap_err().reason();
        assert_eq!(reason(&b[..95]), "too_short");
        let mut x = b;
        x[0] = b'X';
        assert_eq!(reason(&x), "bad_magic");
        let mut x = b;
        x[4] = 2;
        assert_eq!(reason(&x), "bad_version");
        let mut x = b;
        x[8] = 2;
        assert_eq!(reason(&x), "bad_flags");
        let mut x = b;
        x[8] = FLAG_MAC; // says tagged, carries no tag
        assert_eq!(reason(&x), "bad_header_len");
        let mut long = b.to_vec();
        long.push(0);
        assert_eq!(reason(&long), "bad_header_len");
        // A later version's longer ack: its ack_len covers the new fields.
        let mut newer = b.to_vec();
        newer.extend_from_slice(&[0; 8]);
        newer[6..8].copy_from_slice(&104u16.to_le_bytes());
        assert_eq!(Ack::parse(&newer).unwrap().0, sample());
    }
}
