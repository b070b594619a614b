//! Records: the kind-and-length framing of each event in a datagram
//! ([`RawRecord`], [`RecordIter`]), their bodies checked or decoded, and
//! the extent of a datagram read from its framing alone.

use super::format::{MAC_LEN, RECORD_HEADER_LEN};
use super::header::DatagramHeaderRef;
use crate::clock::ClockEvent;
use crate::cpu::CpuEvent;
use crate::drop::DropEvent;
use crate::error::DecodeError;
use crate::event::Event;
use crate::kind::EventKind;
use crate::layout::field::{field_offset, WireValue};
use crate::rx::RxEvent;
use crate::tcp::TcpEvent;
use crate::tx::TxEvent;

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
            EventKind::Cpu => CpuEvent::decode_body(self.body).map(Event::Cpu),
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
            EventKind::Cpu => CpuEvent::decode_body(self.body).map(|e| Some(e.global_ns)),
            EventKind::Unknown(_) => Ok(None),
        }
    }

    /// Global timestamp of a valid known body; `None` for unknown kinds
    /// (and for bodies [`check`](Self::check) rejects).
    pub fn global_ns(&self) -> Option<u64> {
        self.check().ok().flatten()
    }
}

/// One record of a validated datagram
/// ([`DatagramView::records`](super::DatagramView::records)).
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
const CPU_GLOBAL_NS: usize = field_offset(CpuEvent::LAYOUT.fields, "global_ns");

/// `global_ns` of a body already validated for its kind, read in place.
pub(super) fn validated_global_ns(kind: u16, body: &[u8]) -> Option<u64> {
    let at = match EventKind::from_u16(kind) {
        EventKind::Tx => TX_GLOBAL_NS,
        EventKind::Clock => CLOCK_GLOBAL_NS,
        EventKind::Rx => RX_GLOBAL_NS,
        EventKind::Drop => DROP_GLOBAL_NS,
        EventKind::Tcp => TCP_GLOBAL_NS,
        EventKind::Cpu => CPU_GLOBAL_NS,
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
