//! Writing datagrams: [`DatagramBuilder`] fills one with records up to a
//! size limit, then frames it (with or without a tag, optionally padded
//! for UDP GSO).

use super::format::{
    fixed_len, FLAG_MAC, MAC_LEN, MAX_DATAGRAM_LEN, RECORD_HEADER_LEN, WIRE_VERSION,
    WIRE_VERSION_1, WIRE_VERSION_2,
};
use super::header::{truncate_hostname, DatagramHeader};
use crate::body::WireEvent;
use crate::clock::ClockEvent;
use crate::tx::TxEvent;

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
    /// [`MAX_HOSTNAME_LEN`](super::MAX_HOSTNAME_LEN) bytes on a character
    /// boundary), in the current wire version, without a tag.
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
