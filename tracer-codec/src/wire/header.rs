//! The datagram header: decoded ([`DatagramHeader`]) or read in place
//! ([`DatagramHeaderRef`]), written by the builder, its tag located
//! ([`mac_trailer`]), and the hostname it carries kept within its limit.

use super::format::{
    fixed_len, FLAG_MAC, HEADER_FIXED_LEN, HEADER_FIXED_LEN_V1, HEADER_FIXED_LEN_V2, KNOWN_FLAGS,
    MAC_LEN, MAGIC, MAX_DATAGRAM_LEN, MAX_HOSTNAME_LEN, WIRE_VERSION, WIRE_VERSION_1,
    WIRE_VERSION_2,
};
use crate::error::{DecodeError, HostnameError};

/// The datagram header, decoded. `H` is how the hostname is held: owned
/// (`String`, the default) or borrowed from the datagram
/// ([`DatagramHeaderRef`], what [`DatagramView`](super::DatagramView)
/// yields without allocating).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatagramHeader<H = String> {
    /// Wire version of the datagram.
    pub version: u16,
    /// Random id chosen at agent start (or set by `--agent-id`).
    pub agent_id: u64,
    /// The agent host's boot id (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: [u8; 16],
    /// Per-agent datagram sequence number, from 0, +1 per datagram.
    pub seq: u64,
    /// Cumulative events the agent lost before sending (BPF ring-buffer
    /// reserve failures and agent-side drops).
    pub lost_events: u64,
    /// Per-agent sequence number of this datagram's first event.
    pub first_event_seq: u64,
    /// [`crate::ClockSource`] as its wire value.
    pub clock_source: u8,
    /// [`crate::ClockState`] as its wire value.
    pub clock_state: u8,
    /// Number of records that follow.
    pub event_count: u16,
    /// Flags ([`FLAG_MAC`]); 0 in version 1. The builder sets
    /// [`FLAG_MAC`] itself, from how the datagram is finished.
    pub flags: u8,
    /// Random per agent process start (never 0 from a version-2 agent), so
    /// a restarted agent with a fixed `--agent-id` is a new incarnation
    /// whose sequence numbers start again; 0 in version 1.
    pub incarnation: u64,
    /// The sink instance of the newest acknowledgement the agent took (0:
    /// none yet; 0 in versions 1 and 2): with a key, what binds the
    /// datagram to one sink process (docs/security.md).
    pub sink_instance: u64,
    /// The agent's CLOCK_MONOTONIC when it built the datagram, ns (0 in
    /// versions 1 and 2): tells a sink when a datagram bound to another
    /// instance was sent, relative to the agent's later ones.
    pub sent_mono_ns: u64,
    /// The agent's hostname (at most [`MAX_HOSTNAME_LEN`] bytes of UTF-8).
    pub hostname: H,
}

/// The datagram header read in place, its hostname borrowed.
pub type DatagramHeaderRef<'a> = DatagramHeader<&'a str>;

impl<H: AsRef<str>> DatagramHeader<H> {
    /// Encoded length of this header.
    pub fn encoded_len(&self) -> usize {
        fixed_len(self.version) + self.hostname.as_ref().len()
    }

    /// Whether the datagram carries a tag ([`FLAG_MAC`]).
    pub fn has_mac(&self) -> bool {
        self.flags & FLAG_MAC != 0
    }

    /// The same header with its hostname held as `T`.
    fn map_hostname<'s, T>(&'s self, f: impl FnOnce(&'s str) -> T) -> DatagramHeader<T> {
        DatagramHeader {
            version: self.version,
            agent_id: self.agent_id,
            boot_id: self.boot_id,
            seq: self.seq,
            lost_events: self.lost_events,
            first_event_seq: self.first_event_seq,
            clock_source: self.clock_source,
            clock_state: self.clock_state,
            event_count: self.event_count,
            flags: self.flags,
            incarnation: self.incarnation,
            sink_instance: self.sink_instance,
            sent_mono_ns: self.sent_mono_ns,
            hostname: f(self.hostname.as_ref()),
        }
    }

    /// The header borrowed, as [`DatagramView`](super::DatagramView) yields it.
    pub fn borrowed(&self) -> DatagramHeaderRef<'_> {
        self.map_hostname(|h| h)
    }

    /// An owned copy.
    pub fn to_header(&self) -> DatagramHeader {
        self.map_hostname(str::to_owned)
    }

    /// Write the header into `out[..encoded_len()]` (older versions leave
    /// the fields they do not have out), announcing `header_len` bytes of
    /// header: more than `encoded_len()` when zero padding follows the
    /// host name.
    pub(super) fn write_into(&self, out: &mut [u8], header_len: usize) {
        let hl = self.encoded_len();
        out[0..4].copy_from_slice(&MAGIC);
        out[4..6].copy_from_slice(&self.version.to_le_bytes());
        out[6..8].copy_from_slice(&(header_len as u16).to_le_bytes());
        out[8..16].copy_from_slice(&self.agent_id.to_le_bytes());
        out[16..32].copy_from_slice(&self.boot_id);
        out[32..40].copy_from_slice(&self.seq.to_le_bytes());
        out[40..48].copy_from_slice(&self.lost_events.to_le_bytes());
        out[48..56].copy_from_slice(&self.first_event_seq.to_le_bytes());
        out[56] = self.clock_source;
        out[57] = self.clock_state;
        out[58..60].copy_from_slice(&self.event_count.to_le_bytes());
        let hostname = self.hostname.as_ref();
        out[60] = hostname.len() as u8;
        let fixed = fixed_len(self.version);
        if fixed >= HEADER_FIXED_LEN_V2 {
            out[61] = self.flags;
            out[62..70].copy_from_slice(&self.incarnation.to_le_bytes());
        }
        if fixed >= HEADER_FIXED_LEN {
            out[70..78].copy_from_slice(&self.sink_instance.to_le_bytes());
            out[78..86].copy_from_slice(&self.sent_mono_ns.to_le_bytes());
        }
        out[fixed..hl].copy_from_slice(hostname.as_bytes());
    }
}

impl DatagramHeader {
    /// Decode and validate a header; returns it and the offset of the first record.
    pub fn decode(buf: &[u8]) -> Result<(Self, usize), DecodeError> {
        DatagramHeaderRef::parse(buf).map(|(h, off)| (h.to_header(), off))
    }
}

impl<'a> DatagramHeader<&'a str> {
    /// Validate a header in place; returns it and the offset of the first
    /// record. Offsets are those of [`crate::layout::DATAGRAM_HEADER`]
    /// (a test holds them together).
    pub fn parse(buf: &'a [u8]) -> Result<(Self, usize), DecodeError> {
        if buf.len() > MAX_DATAGRAM_LEN {
            return Err(DecodeError::TooLarge {
                len: buf.len(),
                max: MAX_DATAGRAM_LEN,
            });
        }
        if buf.len() < HEADER_FIXED_LEN_V1 {
            return Err(DecodeError::TooShort {
                len: buf.len(),
                need: HEADER_FIXED_LEN_V1,
            });
        }
        let found: [u8; 4] = [buf[0], buf[1], buf[2], buf[3]];
        if found != MAGIC {
            return Err(DecodeError::BadMagic { found });
        }
        let u16_at = |o: usize| u16::from_le_bytes([buf[o], buf[o + 1]]);
        let u64_at = |o: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&buf[o..o + 8]);
            u64::from_le_bytes(b)
        };
        let version = u16_at(4);
        if !(WIRE_VERSION_1..=WIRE_VERSION).contains(&version) {
            return Err(DecodeError::UnsupportedVersion {
                found: version,
                supported: WIRE_VERSION,
            });
        }
        let fixed = fixed_len(version);
        if buf.len() < fixed {
            return Err(DecodeError::TooShort {
                len: buf.len(),
                need: fixed,
            });
        }
        let (flags, incarnation) = if version >= WIRE_VERSION_2 {
            (buf[61], u64_at(62))
        } else {
            (0, 0)
        };
        let (sink_instance, sent_mono_ns) = if version >= WIRE_VERSION {
            (u64_at(70), u64_at(78))
        } else {
            (0, 0)
        };
        if flags & !KNOWN_FLAGS != 0 {
            return Err(DecodeError::BadFlags { flags });
        }
        // The tag is not part of the records: the header must leave room for it.
        let trailer = if flags & FLAG_MAC != 0 { MAC_LEN } else { 0 };
        let header_len = u16_at(6) as usize;
        let host_len = buf[60] as usize;
        if header_len < fixed + host_len || header_len + trailer > buf.len() {
            return Err(DecodeError::BadHeaderLen {
                header_len,
                len: buf.len(),
            });
        }
        if host_len > MAX_HOSTNAME_LEN {
            return Err(DecodeError::BadHostname(HostnameError::TooLong {
                len: host_len,
                max: MAX_HOSTNAME_LEN,
            }));
        }
        let hostname = std::str::from_utf8(&buf[fixed..fixed + host_len])
            .map_err(|_| DecodeError::BadHostname(HostnameError::NotUtf8))?;
        let mut boot_id = [0u8; 16];
        boot_id.copy_from_slice(&buf[16..32]);
        Ok((
            DatagramHeaderRef {
                version,
                agent_id: u64_at(8),
                boot_id,
                seq: u64_at(32),
                lost_events: u64_at(40),
                first_event_seq: u64_at(48),
                clock_source: buf[56],
                clock_state: buf[57],
                event_count: u16_at(58),
                flags,
                incarnation,
                sink_instance,
                sent_mono_ns,
                hostname,
            },
            header_len,
        ))
    }
}

/// The bytes a tag covers and the tag, for a datagram whose header
/// ([`DatagramHeaderRef::parse`]) says it has one; `None` otherwise.
/// `parse` already checked that the datagram is long enough.
pub fn mac_trailer<'a>(
    buf: &'a [u8],
    header: &DatagramHeaderRef<'_>,
) -> Option<(&'a [u8], &'a [u8])> {
    if !header.has_mac() || buf.len() < MAC_LEN {
        return None;
    }
    Some(buf.split_at(buf.len() - MAC_LEN))
}

/// `s` cut to at most [`MAX_HOSTNAME_LEN`] bytes on a character boundary.
pub fn truncate_hostname(s: &str) -> &str {
    if s.len() <= MAX_HOSTNAME_LEN {
        return s;
    }
    let mut end = MAX_HOSTNAME_LEN;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
