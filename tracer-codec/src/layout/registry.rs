//! Every layout this build knows: the datagram header, the record
//! framing, the sink's acknowledgement, the capture header, each event
//! kind's body and every enum name table the layouts use. The top of the
//! codec's types (it names them all); the renderers read from here.

use super::field::{
    field_offset, fields_len, place, EventLayout, Field, FieldType, HeaderLayout, NameTable, FAMILY,
};
use crate::ack::ACK_LEN;
use crate::capture::CAPTURE_FIXED_LEN;
use crate::clock::{ClockEvent, ClockSource, ClockState};
use crate::cpu::CpuEvent;
use crate::drop::{DropEvent, FLOW_FAMILY};
use crate::rx::{RxEvent, RxStage};
use crate::tcp::{TcpAnomaly, TcpEvent};
use crate::tx::{TxEvent, TxStage};
use crate::wire::{HEADER_FIXED_LEN, HEADER_FIXED_LEN_V1, HEADER_FIXED_LEN_V2, RECORD_HEADER_LEN};

/// Datagram header, wire version 3 (see [`crate::wire`]); version 2 is
/// its first 70 bytes (through `incarnation`) followed by the hostname,
/// version 1 its first 61 (through `hostname_len`).
pub const DATAGRAM_HEADER: HeaderLayout = HeaderLayout {
    name: "dgram",
    fixed_len: HEADER_FIXED_LEN,
    fields: &place([
        Field::new("magic", FieldType::Text, 4, None, "`NTRC`"),
        Field::new(
            "version",
            FieldType::U16,
            2,
            None,
            "3 (from agents of older builds: 2, without `sink_instance` and `sent_mono_ns`, hostname at offset 70; 1, also without `flags` and `incarnation`, hostname at offset 61, never a tag). A sink rejects any other version (counted as `bad_version`); a sink with a key takes only version 3 (`auth_old_version`).",
        ),
        Field::new(
            "header_len",
            FieldType::U16,
            2,
            None,
            "bytes from offset 0 to the first record (86 + hostname_len in v3, 70 + in v2, 61 + in v1; a later version may append header fields, which a reader skips; an agent sending UDP GSO batches pads a datagram to the segment size with zero bytes here, after the hostname)",
        ),
        Field::new(
            "agent_id",
            FieldType::U64,
            8,
            None,
            "random per agent process unless `--agent-id` sets it",
        ),
        Field::new(
            "boot_id",
            FieldType::Guid,
            16,
            None,
            "the agent host's `/proc/sys/kernel/random/boot_id`",
        ),
        Field::new(
            "seq",
            FieldType::U64,
            8,
            None,
            "per-agent datagram sequence number: 0, 1, 2, ... A gap is a lost datagram.",
        ),
        Field::new(
            "lost_events",
            FieldType::U64,
            8,
            None,
            "cumulative events the agent lost before sending (probe records overwritten before the agent read them, records it could not place or decode)",
        ),
        Field::new(
            "first_event_seq",
            FieldType::U64,
            8,
            None,
            "per-agent sequence number of the first event in this datagram; events are numbered consecutively, so a gap tells how many events a lost datagram held",
        ),
        Field::new(
            "clock_source",
            FieldType::U8,
            1,
            Some(&ClockSource::NAMES),
            "the agent's clock source",
        ),
        Field::new(
            "clock_state",
            FieldType::U8,
            1,
            Some(&ClockState::NAMES),
            "the agent's servo state",
        ),
        Field::new(
            "event_count",
            FieldType::U16,
            2,
            None,
            "records that follow",
        ),
        Field::new(
            "hostname_len",
            FieldType::U8,
            1,
            None,
            "at most 64",
        ),
        Field::new(
            "flags",
            FieldType::U8,
            1,
            None,
            "bit 0: the datagram ends with a 16-byte tag (HMAC-SHA256-128 of every byte before it, with the deployment key); other bits are reserved, and a reader rejects a datagram with one set (`bad_flags`)",
        ),
        Field::new(
            "incarnation",
            FieldType::U64,
            8,
            None,
            "random per agent process start, never 0: a restarted agent (same `agent_id` and boot) is a new incarnation whose `seq` and event numbers start at 0 again",
        ),
        Field::new(
            "sink_instance",
            FieldType::U64,
            8,
            None,
            "the `sink_instance` of the newest acknowledgement the agent took, 0 before the first: a sink with a key holds a datagram bound to another instance until the agent has bound itself to this one, and takes it only if it was sent after this sink started (docs/security.md)",
        ),
        Field::new(
            "sent_mono_ns",
            FieldType::U64,
            8,
            None,
            "the agent's CLOCK_MONOTONIC when it built the datagram, ns: against the agent's datagrams bound to this sink, tells when one bound elsewhere was sent",
        ),
    ]),
    tail: ("hostname", "UTF-8"),
};

/// Capture header of one pcapng frame (see [`crate::capture`]).
pub const CAPTURE_HEADER: HeaderLayout = HeaderLayout {
    name: "capture",
    fixed_len: CAPTURE_FIXED_LEN,
    fields: &place([
        Field::new("version", FieldType::U16, 2, None, "capture version (1)"),
        Field::new(
            "header_len",
            FieldType::U16,
            2,
            None,
            "23 + host_len; the record starts here",
        ),
        Field::new(
            "agent_id",
            FieldType::U64,
            8,
            None,
            "agent that sent the event",
        ),
        Field::new(
            "event_seq",
            FieldType::U64,
            8,
            None,
            "per-agent event sequence number (also the EPB packet id)",
        ),
        Field::new(
            "clock_source",
            FieldType::U8,
            1,
            Some(&ClockSource::NAMES),
            "the agent's clock source when it sent the event",
        ),
        Field::new(
            "clock_state",
            FieldType::U8,
            1,
            Some(&ClockState::NAMES),
            "the agent's servo state when it sent the event",
        ),
        Field::new("host_len", FieldType::U8, 1, None, "at most 64"),
    ]),
    tail: ("host", "UTF-8"),
};

/// The sink's acknowledgement, version 1 (see [`crate::ack`]); the tail is
/// the tag, present when `flags` bit 0 is set.
pub const ACK_LAYOUT: HeaderLayout = HeaderLayout {
    name: "ack",
    fixed_len: ACK_LEN,
    fields: &place([
        Field::new("magic", FieldType::Text, 4, None, "`NTRA`"),
        Field::new("version", FieldType::U16, 2, None, "1"),
        Field::new(
            "ack_len",
            FieldType::U16,
            2,
            None,
            "bytes before the tag (96 in version 1; a later version may append fields, which a reader skips)",
        ),
        Field::new(
            "flags",
            FieldType::U8,
            1,
            None,
            "bit 0: a 16-byte tag follows (HMAC-SHA256-128 of the `ack_len` bytes before it, with the ack key)",
        ),
        Field::new("reserved", FieldType::Bytes, 7, None, "0"),
        Field::new(
            "sink_instance",
            FieldType::U64,
            8,
            None,
            "random per sink process: a restarted sink starts its counts under a new id",
        ),
        Field::new(
            "ack_seq",
            FieldType::U64,
            8,
            None,
            "increases with every ack of this sink process; the agent keeps the newest per instance",
        ),
        Field::new("agent_id", FieldType::U64, 8, None, "the agent's"),
        Field::new("boot_id", FieldType::Guid, 16, None, "the agent's"),
        Field::new("incarnation", FieldType::U64, 8, None, "the agent's"),
        Field::new(
            "preceding_events",
            FieldType::U64,
            8,
            None,
            "events numbered before the first one this sink received (sent before it started, or while no sink listened)",
        ),
        Field::new(
            "delivered_events",
            FieldType::U64,
            8,
            None,
            "events written to this sink's files (the write returned)",
        ),
        Field::new(
            "lost_events",
            FieldType::U64,
            8,
            None,
            "events this sink counted lost: sequence gaps (net of late arrivals) and events it could not write",
        ),
        Field::new(
            "received_events",
            FieldType::U64,
            8,
            None,
            "events this sink accepted (delivered or on their way to the file)",
        ),
    ]),
    tail: ("mac", "the 16-byte tag, when `flags` bit 0 is set"),
};

/// Record framing: kind and body length before every body.
pub const RECORD_HEADER: [Field; 2] = place([
    Field::new("kind", FieldType::U16, 2, None, "event kind"),
    Field::new("len", FieldType::U16, 2, None, "body bytes"),
]);

/// Every event kind this build knows, in kind order.
pub const EVENTS: &[EventLayout] = &[
    TxEvent::LAYOUT,
    ClockEvent::LAYOUT,
    RxEvent::LAYOUT,
    DropEvent::LAYOUT,
    TcpEvent::LAYOUT,
    CpuEvent::LAYOUT,
];

/// Every enum name table the layouts use.
pub const NAME_TABLES: &[&NameTable] = &[
    &TxStage::NAMES,
    &ClockSource::NAMES,
    &ClockState::NAMES,
    &RxStage::NAMES,
    &FAMILY,
    &FLOW_FAMILY,
    &TcpAnomaly::NAMES,
];

const _: () = assert!(fields_len(DATAGRAM_HEADER.fields) == HEADER_FIXED_LEN);
// Version 1 is the prefix before `flags`, version 2 the one before
// `sink_instance`.
const _: () = assert!(field_offset(DATAGRAM_HEADER.fields, "flags") == HEADER_FIXED_LEN_V1);
const _: () = assert!(field_offset(DATAGRAM_HEADER.fields, "sink_instance") == HEADER_FIXED_LEN_V2);
const _: () = assert!(fields_len(CAPTURE_HEADER.fields) == CAPTURE_FIXED_LEN);
const _: () = assert!(fields_len(ACK_LAYOUT.fields) == ACK_LEN);
const _: () = assert!(fields_len(&RECORD_HEADER) == RECORD_HEADER_LEN);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ack::Ack;
    use crate::body::bincode_config;
    use crate::capture::{CaptureRecord, CAPTURE_VERSION};
    use crate::error::DecodeError;
    use crate::wire::{DatagramBuilder, DatagramHeader, FLAG_MAC, MAC_LEN, MAGIC, WIRE_VERSION};

    /// A body whose every byte differs from every other (all bodies are
    /// shorter than 255 bytes), so a field read at a wrong offset shows.
    fn distinct_body(len: usize) -> Vec<u8> {
        assert!(len < 255);
        (0..len).map(|i| i as u8 + 1).collect()
    }

    fn check_against_bincode<T>(
        layout: &EventLayout,
        field_bytes: impl Fn(&T) -> Vec<(&'static str, Vec<u8>)>,
    ) where
        T: bincode::Decode<()> + bincode::Encode + crate::body::WireEvent,
    {
        let body = distinct_body(layout.body_len);
        let (v, used): (T, usize) =
            bincode::decode_from_slice(&body, bincode_config()).expect("bincode decodes");
        let mut direct = vec![0xAA];
        v.encode_body(&mut direct);
        assert_eq!(
            &direct[1..],
            &body[..],
            "{}: encode_body writes what bincode does",
            layout.name
        );
        assert_eq!(
            used, layout.body_len,
            "{}: bincode reads BODY_LEN bytes",
            layout.name
        );
        let again = bincode::encode_to_vec(&v, bincode_config()).expect("encodes");
        assert_eq!(again, body, "{}: bincode round trip", layout.name);
        let fields = field_bytes(&v);
        assert_eq!(
            fields.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            layout.fields.iter().map(|f| f.name).collect::<Vec<_>>(),
            "{}: table order is the struct order",
            layout.name
        );
        for (name, bytes) in fields {
            let f = layout.field(name).expect("described");
            assert_eq!(f.size, bytes.len(), "{}.{name}: size", layout.name);
            assert_eq!(
                &body[f.range()],
                &bytes[..],
                "{}.{name}: offset {}",
                layout.name,
                f.offset
            );
        }
    }

    #[test]
    fn event_tables_match_what_bincode_encodes() {
        check_against_bincode::<TxEvent>(&TxEvent::LAYOUT, TxEvent::field_bytes);
        check_against_bincode::<ClockEvent>(&ClockEvent::LAYOUT, ClockEvent::field_bytes);
        check_against_bincode::<RxEvent>(&RxEvent::LAYOUT, RxEvent::field_bytes);
        check_against_bincode::<DropEvent>(&DropEvent::LAYOUT, DropEvent::field_bytes);
        check_against_bincode::<TcpEvent>(&TcpEvent::LAYOUT, TcpEvent::field_bytes);
        check_against_bincode::<CpuEvent>(&CpuEvent::LAYOUT, CpuEvent::field_bytes);
        let mut b = Vec::new();
        TxEvent::default().encode_body(&mut b);
        assert_eq!(b.len(), TxEvent::BODY_LEN);
        assert_eq!(EVENTS.len(), 6);
        for (i, e) in EVENTS.iter().enumerate() {
            assert_eq!(fields_len(e.fields), e.body_len);
            assert!(i == 0 || EVENTS[i - 1].kind < e.kind, "kind order");
        }
    }

    /// The generated fixed-offset decoder gives what bincode gives, and
    /// rejects exactly the bodies whose enum fields are outside their tables.
    fn check_decoder<T>(layout: &EventLayout, decode: impl Fn(&[u8]) -> Result<T, DecodeError>)
    where
        T: bincode::Decode<()> + PartialEq + std::fmt::Debug,
    {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..3000usize {
            let mut body = vec![0u8; layout.body_len + i % 3];
            for b in body.iter_mut() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *b = seed as u8;
            }
            // Mostly valid enum values, sometimes not.
            let enums: Vec<&Field> = layout.fields.iter().filter(|f| f.names.is_some()).collect();
            if i % 4 != 0 {
                for f in &enums {
                    let t = f.names.expect("enum");
                    body[f.offset] = t.entries[i % t.entries.len()].0 as u8;
                }
            }
            let valid = enums.iter().all(|f| {
                let t = f.names.expect("enum");
                t.contains(u64::from(body[f.offset]))
            });
            let (want, _): (T, usize) =
                bincode::decode_from_slice(&body[..layout.body_len], bincode_config())
                    .expect("bincode decodes");
            match decode(&body) {
                Ok(got) => {
                    assert!(valid, "{}: accepted a bad enum value", layout.name);
                    assert_eq!(got, want);
                }
                Err(e) => {
                    assert!(!valid, "{}: rejected a good body: {e}", layout.name);
                    assert_eq!(e.reason(), "bad_field");
                }
            }
            // A version-1 body (an older agent's) reads its appended
            // fields as 0; one byte less is malformed.
            if valid && layout.v1_body_len < layout.body_len {
                let mut zeroed = body[..layout.body_len].to_vec();
                zeroed[layout.v1_body_len..].fill(0);
                let (want, _): (T, usize) =
                    bincode::decode_from_slice(&zeroed, bincode_config()).expect("bincode decodes");
                let got = decode(&body[..layout.v1_body_len]).expect("a version-1 body");
                assert_eq!(got, want, "{}: version-1 body", layout.name);
            }
            let short = decode(&body[..layout.v1_body_len - 1]).expect_err("short body");
            assert_eq!(short.reason(), "body_too_short");
        }
    }

    #[test]
    fn fixed_offset_decoder_matches_bincode() {
        check_decoder(&TxEvent::LAYOUT, TxEvent::decode_body);
        check_decoder(&ClockEvent::LAYOUT, ClockEvent::decode_body);
        check_decoder(&DropEvent::LAYOUT, DropEvent::decode_body);
        check_decoder(&TcpEvent::LAYOUT, TcpEvent::decode_body);
        check_decoder(&CpuEvent::LAYOUT, CpuEvent::decode_body);
    }

    #[test]
    fn name_tables_match_the_enums() {
        for v in 0..=255u8 {
            assert_eq!(
                TxStage::NAMES.name_of(v.into()),
                TxStage::from_u8(v).map(TxStage::name)
            );
            assert_eq!(
                ClockSource::NAMES.name_of(v.into()),
                ClockSource::from_u8(v).map(ClockSource::name)
            );
            assert_eq!(
                ClockState::NAMES.name_of(v.into()),
                ClockState::from_u8(v).map(ClockState::name)
            );
        }
        for (i, s) in TxStage::ALL.iter().enumerate() {
            assert_eq!(*s as usize, i);
        }
    }

    /// Checks the bytes at each described offset of `bytes` against the
    /// value the test put in that field.
    fn check_header(layout: &HeaderLayout, bytes: &[u8], want: &[(&str, Vec<u8>)]) {
        assert_eq!(
            layout.fields.iter().map(|f| f.name).collect::<Vec<_>>(),
            want.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            "{}: every field checked",
            layout.name
        );
        for (name, v) in want {
            let f = layout.field(name).expect("described");
            assert_eq!(
                &bytes[f.range()],
                &v[..],
                "{}.{name} at {}",
                layout.name,
                f.offset
            );
        }
    }

    #[test]
    fn header_tables_match_the_header_codecs() {
        let h = DatagramHeader {
            version: WIRE_VERSION,
            agent_id: 0x0102_0304_0506_0708,
            boot_id: *b"ABCDEFGHIJKLMNOP",
            seq: 0x1112_1314_1516_1718,
            lost_events: 0x2122_2324_2526_2728,
            first_event_seq: 0x3132_3334_3536_3738,
            clock_source: 2,
            clock_state: 3,
            event_count: 0,
            flags: 0,
            incarnation: 0x4142_4344_4546_4748,
            sink_instance: 0x5152_5354_5556_5758,
            sent_mono_ns: 0x6162_6364_6566_6768,
            hostname: "host-x".to_owned(),
        };
        let mut b = DatagramBuilder::new(&h.hostname, 1500);
        assert!(b.push_raw(77, &[9, 9, 9]));
        let d = b.finish(&h);
        let le = |v: &[u8]| v.to_vec();
        check_header(
            &DATAGRAM_HEADER,
            &d,
            &[
                ("magic", le(&MAGIC)),
                ("version", le(&WIRE_VERSION.to_le_bytes())),
                ("header_len", le(&(86u16 + 6).to_le_bytes())),
                ("agent_id", le(&h.agent_id.to_le_bytes())),
                ("boot_id", le(&h.boot_id)),
                ("seq", le(&h.seq.to_le_bytes())),
                ("lost_events", le(&h.lost_events.to_le_bytes())),
                ("first_event_seq", le(&h.first_event_seq.to_le_bytes())),
                ("clock_source", vec![2]),
                ("clock_state", vec![3]),
                ("event_count", le(&1u16.to_le_bytes())),
                ("hostname_len", vec![6]),
                ("flags", vec![0]),
                ("incarnation", le(&h.incarnation.to_le_bytes())),
                ("sink_instance", le(&h.sink_instance.to_le_bytes())),
                ("sent_mono_ns", le(&h.sent_mono_ns.to_le_bytes())),
            ],
        );
        assert_eq!(
            &d[DATAGRAM_HEADER.fixed_len..DATAGRAM_HEADER.fixed_len + 6],
            b"host-x"
        );
        let rec = &d[DATAGRAM_HEADER.fixed_len + 6..];
        assert_eq!(&rec[RECORD_HEADER[0].range()], &77u16.to_le_bytes());
        assert_eq!(&rec[RECORD_HEADER[1].range()], &3u16.to_le_bytes());

        let mut c = Vec::new();
        CaptureRecord::encode(
            &mut c,
            0x4142_4344_4546_4748,
            0x5152_5354_5556_5758,
            1,
            2,
            "hh",
            rec,
        );
        check_header(
            &CAPTURE_HEADER,
            &c,
            &[
                ("version", le(&CAPTURE_VERSION.to_le_bytes())),
                ("header_len", le(&(23u16 + 2).to_le_bytes())),
                ("agent_id", le(&0x4142_4344_4546_4748u64.to_le_bytes())),
                ("event_seq", le(&0x5152_5354_5556_5758u64.to_le_bytes())),
                ("clock_source", vec![1]),
                ("clock_state", vec![2]),
                ("host_len", vec![2]),
            ],
        );
        assert_eq!(
            &c[CAPTURE_HEADER.fixed_len..CAPTURE_HEADER.fixed_len + 2],
            b"hh"
        );
    }

    #[test]
    fn ack_table_matches_the_ack_codec() {
        let a = Ack {
            sink_instance: 0x0102_0304_0506_0708,
            ack_seq: 0x1112_1314_1516_1718,
            agent_id: 0x2122_2324_2526_2728,
            boot_id: *b"ABCDEFGHIJKLMNOP",
            incarnation: 0x3132_3334_3536_3738,
            preceding_events: 0x4142_4344_4546_4748,
            delivered_events: 0x5152_5354_5556_5758,
            lost_events: 0x6162_6364_6566_6768,
            received_events: 0x7172_7374_7576_7778,
        };
        let b = a.encode_with_mac(|_| [0xEE; MAC_LEN]);
        let le = |v: &[u8]| v.to_vec();
        check_header(
            &ACK_LAYOUT,
            &b,
            &[
                ("magic", le(b"NTRA")),
                ("version", le(&1u16.to_le_bytes())),
                ("ack_len", le(&96u16.to_le_bytes())),
                ("flags", vec![FLAG_MAC]),
                ("reserved", vec![0; 7]),
                ("sink_instance", le(&a.sink_instance.to_le_bytes())),
                ("ack_seq", le(&a.ack_seq.to_le_bytes())),
                ("agent_id", le(&a.agent_id.to_le_bytes())),
                ("boot_id", le(&a.boot_id)),
                ("incarnation", le(&a.incarnation.to_le_bytes())),
                ("preceding_events", le(&a.preceding_events.to_le_bytes())),
                ("delivered_events", le(&a.delivered_events.to_le_bytes())),
                ("lost_events", le(&a.lost_events.to_le_bytes())),
                ("received_events", le(&a.received_events.to_le_bytes())),
            ],
        );
        assert_eq!(&b[ACK_LAYOUT.fixed_len..], &[0xEE; MAC_LEN]);
    }
}
