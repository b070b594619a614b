//! The payload of one pcapng Enhanced Packet Block: a small capture header
//! naming the agent, then the event record exactly as it came off the wire
//! (so the file keeps kinds the sink does not know).
//!
//! ```text
//! capture = version u16 | header_len u16 | agent_id u64 | event_seq u64
//!         | clock_source u8 | clock_state u8 | host_len u8 | host [host_len]
//!         | record (kind u16 | len u16 | body)
//! ```

use crate::error::{DecodeError, HostnameError};
use crate::wire::{split_records, truncate_hostname, RawRecord, MAX_HOSTNAME_LEN};

/// Version of the capture header.
pub const CAPTURE_VERSION: u16 = 1;
/// Capture header bytes before the hostname.
pub const CAPTURE_FIXED_LEN: usize = 23;
/// EtherType of a live-interface frame (IEEE 802 "local experimental
/// EtherType 1"): an Ethernet header, then one capture record. The
/// dissector registers on it, and the probes ignore skbs of this protocol
/// so that a live interface on a traced host does not trace itself.
pub const LIVE_ETHERTYPE: u16 = 0x88B5;

/// Offset of `event_seq` in the capture header.
const EVENT_SEQ_AT: usize = 12;
/// Offset of `clock_source` (then `clock_state`) in the capture header.
const CLOCK_AT: usize = 20;

/// The capture header of one agent, encoded once: a writer of many
/// events of one agent copies it and fills in the three fields that
/// change per event, instead of encoding it field by field for each
/// (byte for byte what [`CaptureRecord::encode`] writes before the record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureHeader {
    bytes: Vec<u8>,
}

impl CaptureHeader {
    /// The header of agent `agent_id` on `host` (cut as
    /// [`CaptureRecord::encode`] cuts it).
    pub fn new(agent_id: u64, host: &str) -> Self {
        let mut bytes = Vec::new();
        CaptureRecord::encode(&mut bytes, agent_id, 0, 0, 0, host, &[]);
        CaptureHeader { bytes }
    }

    /// Bytes of the header.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false: a header holds at least its fixed part.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The header's bytes as prepared (`event_seq` and the clock fields
    /// 0): copy them, then [`set_event`](Self::set_event) on the copy.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Write the fields that change per event into a copy of
    /// [`bytes`](Self::bytes) (`header` starts with it; too short a slice
    /// is left as it is).
    pub fn set_event(header: &mut [u8], event_seq: u64, clock_source: u8, clock_state: u8) {
        if let Some(h) = header.get_mut(..CAPTURE_FIXED_LEN) {
            h[EVENT_SEQ_AT..EVENT_SEQ_AT + 8].copy_from_slice(&event_seq.to_le_bytes());
            h[CLOCK_AT] = clock_source;
            h[CLOCK_AT + 1] = clock_state;
        }
    }

    /// Append the header of one event, then its record, to `out`.
    pub fn encode(
        &self,
        out: &mut Vec<u8>,
        event_seq: u64,
        clock_source: u8,
        clock_state: u8,
        record_bytes: &[u8],
    ) {
        let at = out.len();
        out.reserve(self.bytes.len() + record_bytes.len());
        out.extend_from_slice(&self.bytes);
        out.extend_from_slice(record_bytes);
        Self::set_event(&mut out[at..], event_seq, clock_source, clock_state);
    }
}

/// The capture header of one pcapng frame, plus its record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureRecord<'a> {
    /// Agent that sent the event.
    pub agent_id: u64,
    /// Per-agent event sequence number (also the EPB packet id).
    pub event_seq: u64,
    /// Clock source of the agent when it sent the event.
    pub clock_source: u8,
    /// Clock state of the agent when it sent the event.
    pub clock_state: u8,
    /// Agent hostname.
    pub host: &'a str,
    /// The event record as on the wire.
    pub record: RawRecord<'a>,
}

impl<'a> CaptureRecord<'a> {
    /// Encode the capture header followed by `record_bytes` into `out`.
    pub fn encode(
        out: &mut Vec<u8>,
        agent_id: u64,
        event_seq: u64,
        clock_source: u8,
        clock_state: u8,
        host: &str,
        record_bytes: &[u8],
    ) {
        let host = truncate_hostname(host);
        let hl = CAPTURE_FIXED_LEN + host.len();
        out.reserve(hl + record_bytes.len());
        out.extend_from_slice(&CAPTURE_VERSION.to_le_bytes());
        out.extend_from_slice(&(hl as u16).to_le_bytes());
        out.extend_from_slice(&agent_id.to_le_bytes());
        out.extend_from_slice(&event_seq.to_le_bytes());
        out.push(clock_source);
        out.push(clock_state);
        out.push(host.len() as u8);
        out.extend_from_slice(host.as_bytes());
        out.extend_from_slice(record_bytes);
    }

    /// Decode a frame payload (used by tests and the analyser).
    pub fn decode(buf: &'a [u8]) -> Result<Self, DecodeError> {
        if buf.len() < CAPTURE_FIXED_LEN {
            return Err(DecodeError::TooShort {
                len: buf.len(),
                need: CAPTURE_FIXED_LEN,
            });
        }
        let version = u16::from_le_bytes([buf[0], buf[1]]);
        if version != CAPTURE_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                found: version,
                supported: CAPTURE_VERSION,
            });
        }
        let hl = u16::from_le_bytes([buf[2], buf[3]]) as usize;
        let host_len = buf[22] as usize;
        if host_len > MAX_HOSTNAME_LEN || hl < CAPTURE_FIXED_LEN + host_len || hl > buf.len() {
            return Err(DecodeError::BadHeaderLen {
                header_len: hl,
                len: buf.len(),
            });
        }
        let host = std::str::from_utf8(&buf[23..23 + host_len])
            .map_err(|_| DecodeError::BadHostname(HostnameError::NotUtf8))?;
        let mut recs = split_records(&buf[hl..])?;
        if recs.len() != 1 {
            return Err(DecodeError::EventCountMismatch {
                expected: 1,
                found: recs.len(),
            });
        }
        let u64_at = |o: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&buf[o..o + 8]);
            u64::from_le_bytes(b)
        };
        Ok(CaptureRecord {
            agent_id: u64_at(4),
            event_seq: u64_at(12),
            clock_source: buf[20],
            clock_state: buf[21],
            host,
            record: recs.remove(0),
        })
    }
}
