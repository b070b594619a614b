//! Datagram framing, wire format version 3 (see docs/wire-format.md).
//!
//! ```text
//! datagram = header record* [mac]
//! header   = magic "NTRC" | version u16 | header_len u16 | agent_id u64
//!          | boot_id [16] | seq u64 | lost_events u64 | first_event_seq u64
//!          | clock_source u8 | clock_state u8 | event_count u16
//!          | hostname_len u8 | flags u8 | incarnation u64
//!          | sink_instance u64 | sent_mono_ns u64 | hostname [hostname_len]
//! record   = kind u16 | len u16 | body [len]        (body: bincode fixint LE)
//! mac      = [16]      (present iff flags bit 0: a tag over everything before it)
//! ```
//! All integers little-endian. `header_len` lets a later version append
//! header fields; `len` lets a decoder skip kinds it does not know. The
//! offsets are described as data in [`crate::layout`].
//!
//! Older agents send shorter headers, which readers of this build accept:
//! version 2 has no `sink_instance` and `sent_mono_ns` (hostname at offset
//! 70; they read as 0), version 1 not `flags` and `incarnation` either
//! (hostname at 61, never a tag; they read as 0 too).
//!
//! The codec frames the tag but does not compute it (it stays free of
//! keys and I/O): [`DatagramBuilder::finish_with_mac`] takes the tagging
//! function, and [`DatagramHeaderRef::parse`] with [`mac_trailer`] hands a
//! receiver the signed bytes and the tag to check.
//!
//! Two readers with one set of rules: [`DatagramView::parse`] validates a
//! datagram in place without allocating (the sink's receive path), and
//! [`Datagram::decode`] builds owned events on top of it.

use crate::body::WireEvent;
use crate::clock::ClockEvent;
use crate::drop::DropEvent;
use crate::error::{DecodeError, HostnameError};
use crate::event::Event;
use crate::kind::EventKind;
use crate::layout::field::{field_offset, WireValue};
use crate::rx::RxEvent;
use crate::tcp::TcpEvent;
use crate::tx::TxEvent;

/// First four bytes of every datagram.
pub const MAGIC: [u8; 4] = *b"NTRC";
/// The wire version this build writes (it reads this one,
/// [`WIRE_VERSION_2`] and [`WIRE_VERSION_1`]).
pub const WIRE_VERSION: u16 = 3;
/// The second wire version, still read (agents of older builds send it).
pub const WIRE_VERSION_2: u16 = 2;
/// The first wire version, still read (agents of older builds send it).
pub const WIRE_VERSION_1: u16 = 1;
/// Header bytes before the hostname (version 3).
pub const HEADER_FIXED_LEN: usize = 86;
/// Header bytes before the hostname in version 2.
pub const HEADER_FIXED_LEN_V2: usize = 70;
/// Header bytes before the hostname in version 1.
pub const HEADER_FIXED_LEN_V1: usize = 61;
/// `flags` bit 0: the datagram ends with a [`MAC_LEN`]-byte tag.
pub const FLAG_MAC: u8 = 1;
/// Every `flags` bit this build knows; a datagram with another is rejected.
pub const KNOWN_FLAGS: u8 = FLAG_MAC;
/// Bytes of the tag that ends an authenticated datagram.
pub const MAC_LEN: usize = 16;
/// Longest hostname carried (bytes).
pub const MAX_HOSTNAME_LEN: usize = 64;
/// Bytes of a record's kind + length prefix.
pub const RECORD_HEADER_LEN: usize = 4;
/// Largest UDP payload over IPv4; nothing larger is ever valid.
pub const MAX_DATAGRAM_LEN: usize = 65_507;

/// The datagram header, decoded. `H` is how the hostname is held: owned
/// (`String`, the default) or borrowed from the datagram
/// ([`DatagramHeaderRef`], what [`DatagramView`] yields without allocating).
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

    /// The header borrowed, as [`DatagramView`] yields it.
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
    fn write_into(&self, out: &mut [u8], header_len: usize) {
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

/// Header bytes before the hostname in `version` (1, 2 or 3).
pub const fn fixed_len(version: u16) -> usize {
    match version {
        WIRE_VERSION_1 => HEADER_FIXED_LEN_V1,
        WIRE_VERSION_2 => HEADER_FIXED_LEN_V2,
        _ => HEADER_FIXED_LEN,
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

/// Length of the datagram at the start of `buf`, read from its own header
/// and records (`header_len`, `event_count` records, the tag if flagged),
/// without validating bodies. What tells the datagrams of a UDP GSO batch
/// apart where a capture sees the batch before the device cut it (veth,
/// loopback): they lie end to end, each padded to the segment size but
/// the last.
pub fn datagram_extent(buf: &[u8]) -> Result<usize, DecodeError> {
    let (header, mut off) = DatagramHeaderRef::parse(buf)?;
    for index in 0..usize::from(header.event_count) {
        let have = buf.len().saturating_sub(off);
        let len = match buf.get(off + 2..off + RECORD_HEADER_LEN) {
            Some(l) => usize::from(u16::from_le_bytes([l[0], l[1]])),
            None => {
                return Err(DecodeError::TruncatedRecord {
                    index,
                    need: RECORD_HEADER_LEN,
                    have,
                })
            }
        };
        if have < RECORD_HEADER_LEN + len {
            return Err(DecodeError::TruncatedRecord {
                index,
                need: RECORD_HEADER_LEN + len,
                have,
            });
        }
        off += RECORD_HEADER_LEN + len;
    }
    let end = off + if header.has_mac() { MAC_LEN } else { 0 };
    if end > buf.len() {
        return Err(DecodeError::TooShort {
            len: buf.len(),
            need: end,
        });
    }
    Ok(end)
}

/// One framed record, borrowed from a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawRecord<'a> {
    /// Kind number.
    pub kind: u16,
    /// The body bytes.
    pub body: &'a [u8],
    /// The whole record: kind, length and body, as on the wire.
    pub bytes: &'a [u8],
}

impl RawRecord<'_> {
    /// Decode the body; unknown kinds decode to [`Event::Unknown`].
    pub fn decode(&self) -> Result<Event, DecodeError> {
        match EventKind::from_u16(self.kind) {
            EventKind::Tx => TxEvent::decode_body(self.body).map(Event::Tx),
            EventKind::Clock => ClockEvent::decode_body(self.body).map(Event::Clock),
            EventKind::Rx => RxEvent::decode_body(self.body).map(Event::Rx),
            EventKind::Drop => DropEvent::decode_body(self.body).map(Event::Drop),
            EventKind::Tcp => TcpEvent::decode_body(self.body).map(Event::Tcp),
            EventKind::Unknown(kind) => Ok(Event::Unknown {
                kind,
                len: self.body.len(),
            }),
        }
    }

    /// Validate the body of a known kind (unknown kinds pass) and return
    /// its global timestamp, if the kind has one. Allocates nothing.
    #[inline]
    pub fn check(&self) -> Result<Option<u64>, DecodeError> {
        match EventKind::from_u16(self.kind) {
            EventKind::Tx => TxEvent::decode_body(self.body).map(|e| Some(e.global_ns)),
            EventKind::Clock => ClockEvent::decode_body(self.body).map(|e| Some(e.global_ns)),
            EventKind::Rx => RxEvent::decode_body(self.body).map(|e| Some(e.global_ns)),
            EventKind::Drop => DropEvent::decode_body(self.body).map(|e| Some(e.global_ns)),
            EventKind::Tcp => TcpEvent::decode_body(self.body).map(|e| Some(e.global_ns)),
            EventKind::Unknown(_) => Ok(None),
        }
    }

    /// Global timestamp of a valid known body; `None` for unknown kinds
    /// (and for bodies [`check`](Self::check) rejects).
    pub fn global_ns(&self) -> Option<u64> {
        self.check().ok().flatten()
    }
}

/// One record of a validated datagram ([`DatagramView::records`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// The framed record: kind, body and whole bytes.
    pub raw: RawRecord<'a>,
    /// Its global timestamp when the kind has one.
    pub global_ns: Option<u64>,
}

/// Offset of `global_ns` in the bodies of the kinds that have one.
const TX_GLOBAL_NS: usize = field_offset(TxEvent::LAYOUT.fields, "global_ns");
const CLOCK_GLOBAL_NS: usize = field_offset(ClockEvent::LAYOUT.fields, "global_ns");
const RX_GLOBAL_NS: usize = field_offset(RxEvent::LAYOUT.fields, "global_ns");
const DROP_GLOBAL_NS: usize = field_offset(DropEvent::LAYOUT.fields, "global_ns");
const TCP_GLOBAL_NS: usize = field_offset(TcpEvent::LAYOUT.fields, "global_ns");

/// `global_ns` of a body already validated for its kind, read in place.
fn validated_global_ns(kind: u16, body: &[u8]) -> Option<u64> {
    let at = match EventKind::from_u16(kind) {
        EventKind::Tx => TX_GLOBAL_NS,
        EventKind::Clock => CLOCK_GLOBAL_NS,
        EventKind::Rx => RX_GLOBAL_NS,
        EventKind::Drop => DROP_GLOBAL_NS,
        EventKind::Tcp => TCP_GLOBAL_NS,
        EventKind::Unknown(_) => return None,
    };
    body.get(at..at + 8).map(<u64 as WireValue>::read)
}

/// Walks the records of a datagram's payload, checking framing only. It
/// yields one `Err` (a truncated record) and then stops.
#[derive(Debug, Clone)]
pub struct RecordIter<'a> {
    buf: &'a [u8],
    off: usize,
    index: usize,
    failed: bool,
}

impl<'a> RecordIter<'a> {
    /// Records of `buf` (everything after the header).
    pub fn new(buf: &'a [u8]) -> Self {
        RecordIter {
            buf,
            off: 0,
            index: 0,
            failed: false,
        }
    }
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<RawRecord<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.off >= self.buf.len() {
            return None;
        }
        let (buf, off) = (self.buf, self.off);
        let have = buf.len() - off;
        if have < RECORD_HEADER_LEN {
            self.failed = true;
            return Some(Err(DecodeError::TruncatedRecord {
                index: self.index,
                need: RECORD_HEADER_LEN,
                have,
            }));
        }
        let kind = u16::from_le_bytes([buf[off], buf[off + 1]]);
        let len = u16::from_le_bytes([buf[off + 2], buf[off + 3]]) as usize;
        let need = RECORD_HEADER_LEN + len;
        if have < need {
            self.failed = true;
            return Some(Err(DecodeError::TruncatedRecord {
                index: self.index,
                need,
                have,
            }));
        }
        self.off += need;
        self.index += 1;
        Some(Ok(RawRecord {
            kind,
            body: &buf[off + RECORD_HEADER_LEN..off + need],
            bytes: &buf[off..off + need],
        }))
    }
}

/// Split `buf` into records, validating framing only.
pub fn split_records(buf: &[u8]) -> Result<Vec<RawRecord<'_>>, DecodeError> {
    let mut out = Vec::new();
    for r in RecordIter::new(buf) {
        out.push(r?);
    }
    Ok(out)
}

/// A validated datagram, read in place: [`parse`](Self::parse) checks
/// everything [`Datagram::decode`] checks (same errors for the same bytes)
/// without allocating, and [`records`](Self::records) walks the records.
#[derive(Debug, Clone, Copy)]
pub struct DatagramView<'a> {
    header: DatagramHeaderRef<'a>,
    records: &'a [u8],
}

impl<'a> DatagramView<'a> {
    /// Validate a whole datagram: header, framing, event count, every known
    /// body. Either all of it is good or it is rejected, so a receiver never
    /// half-writes a datagram. Errors come in this order: the header, a
    /// truncated record, the event count, the first bad body.
    pub fn parse(buf: &'a [u8]) -> Result<Self, DecodeError> {
        let (header, off) = DatagramHeaderRef::parse(buf)?;
        Self::parse_after_header(buf, header, off)
    }

    /// [`parse`](Self::parse) for a reader that has already parsed the
    /// header of `buf` (`header` and `off` as [`DatagramHeaderRef::parse`]
    /// returned them, e.g. to check its tag first): checks the rest, so
    /// the header is read once. Same errors as `parse` for the same bytes.
    pub fn parse_after_header(
        buf: &'a [u8],
        header: DatagramHeaderRef<'a>,
        off: usize,
    ) -> Result<Self, DecodeError> {
        let end = buf
            .len()
            .saturating_sub(if header.has_mac() { MAC_LEN } else { 0 });
        let Some(records) = buf.get(off..end) else {
            return Err(DecodeError::BadHeaderLen {
                header_len: off,
                len: buf.len(),
            });
        };
        let mut found = 0usize;
        let mut first_bad = None;
        for r in RecordIter::new(records) {
            let r = r?;
            if first_bad.is_none() {
                first_bad = r.check().err();
            }
            found += 1;
        }
        if found != header.event_count as usize {
            return Err(DecodeError::EventCountMismatch {
                expected: header.event_count as usize,
                found,
            });
        }
        match first_bad {
            Some(e) => Err(e),
            None => Ok(DatagramView { header, records }),
        }
    }

    /// The header.
    pub fn header(&self) -> &DatagramHeaderRef<'a> {
        &self.header
    }

    /// The records in order (all framed and valid: [`parse`](Self::parse)
    /// checked them), each with its global timestamp read in place.
    pub fn records(&self) -> impl Iterator<Item = RecordView<'a>> + 'a {
        RecordIter::new(self.records)
            .map_while(Result::ok)
            .map(|raw| RecordView {
                raw,
                global_ns: validated_global_ns(raw.kind, raw.body),
            })
    }
}

/// A validated datagram: its header, its records and their decoded events.
#[derive(Debug, Clone)]
pub struct Datagram<'a> {
    /// The header.
    pub header: DatagramHeader,
    /// Records in order, with the decoded event of each.
    pub records: Vec<(RawRecord<'a>, Event)>,
}

impl<'a> Datagram<'a> {
    /// Validate a whole datagram: header, framing, event count, every known
    /// body. Either all of it is good or it is rejected, so a receiver never
    /// half-writes a datagram.
    pub fn decode(buf: &'a [u8]) -> Result<Self, DecodeError> {
        let view = DatagramView::parse(buf)?;
        let records = view
            .records()
            .map(|r| r.raw.decode().map(|ev| (r.raw, ev)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Datagram {
            header: view.header().to_header(),
            records,
        })
    }
}

/// Fills one datagram with records up to a size limit, then frames it.
#[derive(Debug)]
pub struct DatagramBuilder {
    max_len: usize,
    header_len: usize,
    version: u16,
    /// Bytes kept free at the end for a tag.
    trailer: usize,
    buf: Vec<u8>,
    count: u16,
}

impl DatagramBuilder {
    /// A builder for datagrams of at most `max_len` bytes (clamped to
    /// [`MAX_DATAGRAM_LEN`]) from an agent named `hostname` (truncated to
    /// [`MAX_HOSTNAME_LEN`] bytes on a character boundary), in the current
    /// wire version, without a tag.
    pub fn new(hostname: &str, max_len: usize) -> Self {
        Self::for_version(hostname, max_len, WIRE_VERSION)
    }

    /// A builder for `version` ([`WIRE_VERSION`], or [`WIRE_VERSION_2`] or
    /// [`WIRE_VERSION_1`], what agents of older builds send; anything else
    /// is taken as the current version).
    pub fn for_version(hostname: &str, max_len: usize, version: u16) -> Self {
        let version = match version {
            WIRE_VERSION_1 | WIRE_VERSION_2 => version,
            _ => WIRE_VERSION,
        };
        let header_len = fixed_len(version) + truncate_hostname(hostname).len();
        let max_len = max_len.clamp(header_len + RECORD_HEADER_LEN, MAX_DATAGRAM_LEN);
        let mut buf = Vec::with_capacity(max_len);
        buf.resize(header_len, 0);
        DatagramBuilder {
            max_len,
            header_len,
            version,
            trailer: 0,
            buf,
            count: 0,
        }
    }

    /// Keep room for a tag: datagrams will be finished with
    /// [`finish_with_mac`](Self::finish_with_mac) and still fit `max_len`.
    /// A version-1 builder cannot carry one and is left as it is.
    pub fn with_mac_room(mut self) -> Self {
        if self.version >= WIRE_VERSION_2 {
            self.trailer = MAC_LEN;
            self.max_len = self
                .max_len
                .max(self.header_len + RECORD_HEADER_LEN + MAC_LEN);
        }
        self
    }

    /// Records in the pending datagram.
    pub fn count(&self) -> u16 {
        self.count
    }

    /// True when no record is pending.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes the pending datagram would have.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Append an event of any kind; `false` (and nothing appended) when it
    /// does not fit.
    pub fn push<E: WireEvent>(&mut self, ev: &E) -> bool {
        let need = RECORD_HEADER_LEN + E::BODY_LEN + self.trailer;
        if self.buf.len() + need > self.max_len || self.count == u16::MAX {
            return false;
        }
        self.buf.extend_from_slice(&E::KIND.to_le_bytes());
        self.buf
            .extend_from_slice(&(E::BODY_LEN as u16).to_le_bytes());
        ev.encode_body(&mut self.buf);
        self.count += 1;
        true
    }

    /// Append a TX event ([`Self::push`]).
    pub fn push_tx(&mut self, ev: &TxEvent) -> bool {
        self.push(ev)
    }

    /// Append a clock event ([`Self::push`]).
    pub fn push_clock(&mut self, ev: &ClockEvent) -> bool {
        self.push(ev)
    }

    /// Append an already-encoded body of any kind; `false` when it does not fit.
    pub fn push_raw(&mut self, kind: u16, body: &[u8]) -> bool {
        let need = RECORD_HEADER_LEN + body.len() + self.trailer;
        if body.len() > u16::MAX as usize
            || self.buf.len() + need > self.max_len
            || self.count == u16::MAX
        {
            return false;
        }
        self.buf.extend_from_slice(&kind.to_le_bytes());
        self.buf
            .extend_from_slice(&(body.len() as u16).to_le_bytes());
        self.buf.extend_from_slice(body);
        self.count += 1;
        true
    }

    /// Frame the pending records with `header` (its `version`,
    /// `event_count` and hostname are set from the builder, [`FLAG_MAC`]
    /// cleared) and return the datagram bytes. The builder is empty again
    /// afterwards.
    pub fn finish(&mut self, header: &DatagramHeader) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.max_len);
        self.finish_into(header, None, None::<fn(&[u8]) -> [u8; MAC_LEN]>, &mut out);
        out
    }

    /// [`finish`](Self::finish), then append `tag(datagram so far)` and set
    /// [`FLAG_MAC`] (which the tag covers). A version-1 builder cannot carry
    /// a tag: it finishes without one.
    pub fn finish_with_mac(
        &mut self,
        header: &DatagramHeader,
        tag: impl FnOnce(&[u8]) -> [u8; MAC_LEN],
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.max_len);
        self.finish_into(header, None, Some(tag), &mut out);
        out
    }

    /// Frame the pending records with `header` (as [`finish`](Self::finish)
    /// does) and append the datagram to `out`, tagged when `tag` is given
    /// (not in version 1). With `pad_to`, a shorter datagram is padded to
    /// that many bytes (at most [`MAX_DATAGRAM_LEN`]) with zero bytes
    /// between the host name and the first record, inside `header_len`,
    /// where every reader of every version skips them: how datagrams of one
    /// size are made for UDP GSO. Returns the datagram's length; the
    /// builder is empty again afterwards.
    pub fn finish_into(
        &mut self,
        header: &DatagramHeader,
        pad_to: Option<usize>,
        tag: Option<impl FnOnce(&[u8]) -> [u8; MAC_LEN]>,
        out: &mut Vec<u8>,
    ) -> usize {
        let tag = tag.filter(|_| self.version != WIRE_VERSION_1);
        let trailer = if tag.is_some() { MAC_LEN } else { 0 };
        let records = &self.buf[self.header_len..];
        let natural = self.header_len + records.len() + trailer;
        let pad = pad_to
            .map_or(0, |len| len.min(MAX_DATAGRAM_LEN).saturating_sub(natural))
            .min(usize::from(u16::MAX) - self.header_len);
        let mut h = header.borrowed();
        h.version = self.version;
        h.event_count = self.count;
        h.flags = (header.flags & !FLAG_MAC) | if tag.is_some() { FLAG_MAC } else { 0 };
        h.hostname = truncate_hostname(&header.hostname);
        debug_assert_eq!(h.encoded_len(), self.header_len, "hostname changed");
        let start = out.len();
        // resize zero-fills: the padding is zeros.
        out.resize(start + self.header_len + pad, 0);
        h.write_into(&mut out[start..], self.header_len + pad);
        out.extend_from_slice(records);
        if let Some(tag) = tag {
            let t = tag(&out[start..]);
            out.extend_from_slice(&t);
        }
        self.buf.truncate(self.header_len);
        self.count = 0;
        out.len() - start
    }
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
