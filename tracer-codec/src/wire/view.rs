//! Reading a whole datagram: [`DatagramView`] validates one in place
//! without allocating (the sink's receive path), [`Datagram`] builds owned
//! events on top of it, with the same rules and errors.

use super::format::MAC_LEN;
use super::header::{DatagramHeader, DatagramHeaderRef};
use super::record::{validated_global_ns, RawRecord, RecordIter, RecordView};
use crate::error::DecodeError;
use crate::event::Event;

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
        Self::parse_after_header_with(buf, header, off, |_, _| {})
    }

    /// [`parse_after_header`](Self::parse_after_header), handing `each`
    /// every record whose body checked good as it is validated, with its
    /// offset in the records (what [`records`](Self::records) would
    /// yield, in one pass instead of two). `each` also sees records of a
    /// datagram that turns out bad: only an `Ok` makes them valid.
    pub fn parse_after_header_with(
        buf: &'a [u8],
        header: DatagramHeaderRef<'a>,
        off: usize,
        mut each: impl FnMut(usize, RecordView<'a>),
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
        let mut at = 0usize;
        for r in RecordIter::new(records) {
            let r = r?;
            match r.check() {
                Ok(global_ns) => each(at, RecordView { raw: r, global_ns }),
                Err(e) => {
                    if first_bad.is_none() {
                        first_bad = Some(e);
                    }
                }
            }
            at += r.bytes.len();
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
