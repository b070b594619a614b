//! Bad input: capture records and datagrams that are truncated, carry a
//! bad stage or family, a clock update that is too short or has a bad
//! source or servo state, a bad magic or version, a header length out of
//! range or a record count that does not match. The dissector must flag
//! exactly those frames with the expected expert errors (PI_MALFORMED,
//! PI_ERROR), leave the good frames around them clean, and never raise a
//! Lua error.

mod dissector_common;

use std::path::Path;

use dissector_common::*;
use tracer_codec::layout::field_offset;
use tracer_codec::{ClockEvent, ClockState, TxEvent, RECORD_HEADER_LEN};
use tracer_e2e::tshark::{Query, Tshark};
use tracer_sink::LinkType;

/// Expert infos of the dissector that mark errors, by field name.
const EXPERT_ERRORS: &[&str] = &[
    "nettrace.too_short",
    "nettrace.bad_magic",
    "nettrace.bad_version",
    "nettrace.bad_header_len",
    "nettrace.bad_flags",
    "nettrace.bad_hostname",
    "nettrace.truncated_record",
    "nettrace.event_count_mismatch",
    "nettrace.body_too_short",
    "nettrace.bad_stage",
    "nettrace.bad_family",
    "nettrace.bad_clock_source",
    "nettrace.bad_clock_state",
];

/// PI_ERROR as tshark prints `_ws.expert.severity`.
const PI_ERROR: &str = "8388608";

/// Offset of a TX body field inside a record (after kind and len).
const REC_STAGE: usize = RECORD_HEADER_LEN + field_offset(TxEvent::LAYOUT.fields, "stage");
const REC_FAMILY: usize = RECORD_HEADER_LEN + field_offset(TxEvent::LAYOUT.fields, "family");
/// Offset of a clock body field inside a record.
const REC_CLOCK_SOURCE: usize =
    RECORD_HEADER_LEN + field_offset(ClockEvent::LAYOUT.fields, "source");
const REC_CLOCK_STATE: usize = RECORD_HEADER_LEN + field_offset(ClockEvent::LAYOUT.fields, "state");
/// Record length of a TX / clock update.
const TX_REC: usize = RECORD_HEADER_LEN + TxEvent::BODY_LEN;
const CLOCK_REC: usize = RECORD_HEADER_LEN + ClockEvent::BODY_LEN;

/// Expected expert errors of one frame (empty: a clean frame).
type Flags = &'static [&'static str];

/// A few good events of one skb, and an unknown kind.
fn events() -> Vec<Sent> {
    golden_datagrams().remove(0).1
}

/// The golden clock updates.
fn clock_events() -> Vec<Sent> {
    golden_datagrams()
        .into_iter()
        .flat_map(|(_, evs)| evs)
        .filter(|s| s.record.clock().is_some())
        .collect()
}

fn set_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

/// Decodes `file` allowing expert errors, and checks that frame n (from 1)
/// carries exactly the expert errors `expected[n - 1]` (or none).
fn check_flags(tshark: &Tshark, file: &Path, expected: &[Flags]) {
    let query = Query::default().allow_expert_errors();
    // Fails on any Lua error even though expert errors are allowed.
    let mut fields = vec!["frame.number", "_ws.expert.severity", "_ws.malformed"];
    fields.extend_from_slice(EXPERT_ERRORS);
    let rows = tshark
        .fields(file, &fields, &query)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rows.len(), expected.len());
    for (row, want) in rows.iter().zip(expected) {
        let n = row.one("frame.number");
        let got: Vec<&str> = EXPERT_ERRORS
            .iter()
            .copied()
            .filter(|f| row.has(f))
            .collect();
        assert_eq!(got, *want, "frame {n}: {row:?}");
        assert_eq!(
            row.all("_ws.expert.severity").iter().any(|s| s == PI_ERROR),
            !want.is_empty(),
            "frame {n}: error severity iff malformed: {row:?}"
        );
        // Wireshark adds the hidden _ws.malformed item to every PI_MALFORMED
        // expert info, so it marks exactly the bad frames too.
        assert_eq!(
            row.has("_ws.malformed"),
            !want.is_empty(),
            "frame {n}: _ws.malformed: {row:?}"
        );
    }

    // The same frames through the error filter of the helper.
    let flagged = tshark.flagged_frames(file, &Query::default()).unwrap();
    let numbers: Vec<u32> = flagged.iter().map(|f| f.number).collect();
    let want: Vec<u32> = (1..)
        .zip(expected)
        .filter(|(_, e)| !e.is_empty())
        .map(|(n, _)| n)
        .collect();
    assert_eq!(numbers, want);
    assert!(flagged.iter().all(|f| !f.lua_error), "{flagged:#?}");
    // And a clean decode is refused.
    assert!(tshark.check_clean(file, &Query::default()).is_err());
}

#[test]
fn malformed_capture_records() {
    let Some(tshark) = Tshark::or_skip("malformed_capture_records") else {
        return;
    };
    let ev = events();
    let good = capture_payload(&ev[0]);
    let hl = 23 + ev[0].agent.host.len();
    let mut cases: Vec<(Vec<u8>, Flags)> = vec![(good.clone(), &[])];

    // The record says 110 body bytes, only 60 are there.
    cases.push((good[..hl + 4 + 60].to_vec(), &["nettrace.truncated_record"]));
    // Fewer than 4 bytes where the record header belongs.
    cases.push((good[..hl + 3].to_vec(), &["nettrace.truncated_record"]));
    // A complete record whose body is shorter than the v1 layout.
    let mut short = good[..hl + 4 + 50].to_vec();
    set_u16(&mut short, hl + 2, 50);
    cases.push((short, &["nettrace.body_too_short"]));
    let mut b = good.clone();
    b[hl + REC_STAGE] = 9;
    cases.push((b, &["nettrace.bad_stage"]));
    let mut b = good.clone();
    b[hl + REC_FAMILY] = 5;
    cases.push((b, &["nettrace.bad_family"]));
    let mut b = good.clone();
    set_u16(&mut b, 0, 2);
    cases.push((b, &["nettrace.bad_version"]));
    let mut b = good.clone();
    set_u16(&mut b, 2, 400);
    cases.push((b, &["nettrace.bad_header_len"]));
    let mut b = good.clone();
    set_u16(&mut b, 2, 10);
    cases.push((b, &["nettrace.bad_header_len"]));
    // Two records in one frame (the sink writes exactly one).
    let mut b = good.clone();
    b.extend_from_slice(&good[hl..]);
    cases.push((b, &["nettrace.event_count_mismatch"]));
    cases.push((good[..10].to_vec(), &["nettrace.too_short"]));
    // Good frames after the bad ones are still decoded cleanly: an unknown
    // kind (a note, not an error) and an event with newer fields.
    let unknown = ev.iter().find(|s| s.record.tx().is_none()).unwrap();
    cases.push((capture_payload(unknown), &[]));
    let mut newer = ev[1].clone();
    if let Record::Tx { extra, .. } = &mut newer.record {
        extra.extend_from_slice(&[1, 2, 3]);
    }
    cases.push((capture_payload(&newer), &[]));

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.pcapng");
    let frames: Vec<Frame> = cases
        .iter()
        .enumerate()
        .map(|(i, (data, _))| Frame {
            interface: 0,
            time_ns: T0 + i as u64,
            data: data.clone(),
        })
        .collect();
    write_pcapng(&file, LinkType::User0, &["host-a"], &frames);
    let expected: Vec<Flags> = cases.iter().map(|(_, e)| *e).collect();
    check_flags(&tshark, &file, &expected);
}

#[test]
fn malformed_datagrams() {
    let Some(tshark) = Tshark::or_skip("malformed_datagrams") else {
        return;
    };
    let ev = events();
    let agent = &ev[0].agent;
    let hl = tracer_codec::HEADER_FIXED_LEN + agent.host.len();
    let good = datagram(agent, 0, 0, &ev[..3]);
    let mut cases: Vec<(Vec<u8>, Flags)> = vec![(good.clone(), &[])];

    let mut b = good.clone();
    b[0..4].copy_from_slice(b"NTRX");
    cases.push((b, &["nettrace.bad_magic"]));
    let mut b = good.clone();
    set_u16(&mut b, 4, 4);
    cases.push((b, &["nettrace.bad_version"]));
    let mut b = good.clone();
    b[61] = 0x40; // a flag this build does not know
    cases.push((b, &["nettrace.bad_flags"]));
    // The MAC flag on a datagram too short to hold a MAC after its header.
    let mut b = good[..hl].to_vec();
    set_u16(&mut b, 58, 0);
    b[61] = 1;
    cases.push((b, &["nettrace.bad_header_len"]));
    let mut b = good.clone();
    set_u16(&mut b, 58, 4);
    cases.push((b, &["nettrace.event_count_mismatch"]));
    // The last record cut short.
    cases.push((
        good[..good.len() - 7].to_vec(),
        &["nettrace.truncated_record"],
    ));
    let mut b = good.clone();
    set_u16(&mut b, 6, u16::MAX);
    cases.push((b, &["nettrace.bad_header_len"]));
    let mut b = good.clone();
    set_u16(&mut b, 6, tracer_codec::HEADER_FIXED_LEN as u16);
    cases.push((b, &["nettrace.bad_header_len"]));
    // A 70-byte host name, consistently framed, is still too long.
    let fixed = tracer_codec::HEADER_FIXED_LEN;
    let mut b = good[..fixed].to_vec();
    set_u16(&mut b, 6, (fixed + 70) as u16);
    b[60] = 70;
    b.extend_from_slice(&[b'h'; 70]);
    b.extend_from_slice(&good[hl..]);
    cases.push((b, &["nettrace.bad_hostname"]));
    // One bad record among good ones.
    let mut b = good.clone();
    let second = hl + TX_REC;
    b[second + REC_STAGE] = 5;
    cases.push((b, &["nettrace.bad_stage"]));
    cases.push((good[..20].to_vec(), &["nettrace.too_short"]));
    cases.push((datagram(agent, 1, 0, &ev[3..]), &[]));

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad-live.pcapng");
    let frames: Vec<Frame> = cases
        .iter()
        .enumerate()
        .map(|(i, (data, _))| Frame {
            interface: 0,
            time_ns: T0 + i as u64,
            data: ethernet_udp(data, 7420),
        })
        .collect();
    write_pcapng(&file, LinkType::Ethernet, &["lo"], &frames);
    let expected: Vec<Flags> = cases.iter().map(|(_, e)| *e).collect();
    check_flags(&tshark, &file, &expected);
}

/// Info column of every frame of `file` (expert errors allowed, Lua
/// errors not).
fn infos(tshark: &Tshark, file: &Path) -> Vec<String> {
    tshark
        .fields(
            file,
            &["_ws.col.Info"],
            &Query::default().allow_expert_errors(),
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .iter()
        .map(|r| r.one("_ws.col.Info").to_owned())
        .collect()
}

#[test]
fn malformed_clock_capture_records() {
    let Some(tshark) = Tshark::or_skip("malformed_clock_capture_records") else {
        return;
    };
    let clocks = clock_events();
    let plain = clocks
        .iter()
        .find(|s| matches!(&s.record, Record::Clock { extra, .. } if extra.is_empty()))
        .unwrap();
    let good = capture_payload(plain);
    let hl = 23 + plain.agent.host.len();
    let mut cases: Vec<(Vec<u8>, Flags)> = vec![(good.clone(), &[])];

    // Complete records whose body is shorter than the 66-byte layout.
    let mut short = good[..hl + 4 + 60].to_vec();
    set_u16(&mut short, hl + 2, 60);
    cases.push((short, &["nettrace.body_too_short"]));
    let mut short = good[..hl + 4 + 65].to_vec();
    set_u16(&mut short, hl + 2, 65);
    cases.push((short, &["nettrace.body_too_short"]));
    let mut empty = good[..hl + 4].to_vec();
    set_u16(&mut empty, hl + 2, 0);
    cases.push((empty, &["nettrace.body_too_short"]));
    // The record says 66 body bytes, only 30 are there.
    cases.push((good[..hl + 4 + 30].to_vec(), &["nettrace.truncated_record"]));
    let mut b = good.clone();
    b[hl + REC_CLOCK_SOURCE] = 3;
    cases.push((b, &["nettrace.bad_clock_source"]));
    let mut b = good.clone();
    // The first value past the last state the codec knows (HOLDOVER).
    b[hl + REC_CLOCK_STATE] = ClockState::Holdover as u8 + 1;
    cases.push((b, &["nettrace.bad_clock_state"]));
    let mut b = good.clone();
    b[hl + REC_CLOCK_SOURCE] = 255;
    b[hl + REC_CLOCK_STATE] = 200;
    cases.push((
        b,
        &["nettrace.bad_clock_source", "nettrace.bad_clock_state"],
    ));
    // Good frames after the bad ones: newer fields, a TX event.
    let newer = clocks
        .iter()
        .find(|s| matches!(&s.record, Record::Clock { extra, .. } if !extra.is_empty()))
        .unwrap();
    cases.push((capture_payload(newer), &[]));
    cases.push((capture_payload(&events()[0]), &[]));

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad-clock.pcapng");
    let frames: Vec<Frame> = cases
        .iter()
        .enumerate()
        .map(|(i, (data, _))| Frame {
            interface: 0,
            time_ns: T0 + i as u64,
            data: data.clone(),
        })
        .collect();
    write_pcapng(&file, LinkType::User0, &[plain.agent.host], &frames);
    let expected: Vec<Flags> = cases.iter().map(|(_, e)| *e).collect();
    check_flags(&tshark, &file, &expected);

    let info = infos(&tshark, &file);
    assert_eq!(info[0], plain.record.clock().unwrap().summary());
    assert_eq!(info[1..4], ["CLOCK [body too short]"; 3]);
    assert_eq!(info[4], "[truncated record]");
    assert!(
        info[5].starts_with("CLOCK source 3 LOCKED offset -12 ns")
            && info[5].ends_with("[Malformed]"),
        "{}",
        info[5]
    );
    let unknown_state = format!("CLOCK sink state {} offset", ClockState::Holdover as u8 + 1);
    assert!(
        info[6].starts_with(&unknown_state) && info[6].ends_with("[Malformed]"),
        "{}",
        info[6]
    );
    assert!(
        info[7].starts_with("CLOCK source 255 state 200 ") && info[7].ends_with("[Malformed]"),
        "{}",
        info[7]
    );
    assert_eq!(info[8], newer.record.clock().unwrap().summary());
}

#[test]
fn malformed_clock_datagrams() {
    let Some(tshark) = Tshark::or_skip("malformed_clock_datagrams") else {
        return;
    };
    let tx = events();
    let clocks = clock_events();
    let agent = &tx[0].agent;
    let hl = tracer_codec::HEADER_FIXED_LEN + agent.host.len();
    // TX, CLOCK, TX, CLOCK (the second clock update carries newer fields).
    let mixed = [
        tx[0].clone(),
        clocks[0].clone(),
        tx[1].clone(),
        clocks[2].clone(),
    ];
    assert!(matches!(&mixed[3].record, Record::Clock { extra, .. } if extra.len() == 3));
    let good = datagram(agent, 0, 0, &mixed);
    let first_clock = hl + TX_REC;
    let second_clock = first_clock + CLOCK_REC + TX_REC;
    assert_eq!(good.len(), second_clock + CLOCK_REC + 3);
    let mut cases: Vec<(Vec<u8>, Flags)> = vec![(good.clone(), &[])];

    let mut b = good.clone();
    b[first_clock + REC_CLOCK_STATE] = 7;
    cases.push((b, &["nettrace.bad_clock_state"]));
    let mut b = good.clone();
    b[second_clock + REC_CLOCK_SOURCE] = 3;
    cases.push((b, &["nettrace.bad_clock_source"]));
    // A kind-2 record of 65 bytes between good ones, consistently framed.
    let (_, body) = clocks[0].record.kind_body();
    let short = Sent {
        record: Record::Unknown {
            kind: tracer_codec::EventKind::CLOCK,
            body: body[..65].to_vec(),
        },
        ..clocks[0].clone()
    };
    let with_short = [tx[0].clone(), short, tx[1].clone()];
    cases.push((
        datagram(agent, 1, 0, &with_short),
        &["nettrace.body_too_short"],
    ));
    // The last clock record cut short.
    cases.push((
        good[..good.len() - 10].to_vec(),
        &["nettrace.truncated_record"],
    ));
    cases.push((datagram(agent, 2, 0, &mixed), &[]));

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad-clock-live.pcapng");
    let frames: Vec<Frame> = cases
        .iter()
        .enumerate()
        .map(|(i, (data, _))| Frame {
            interface: 0,
            time_ns: T0 + i as u64,
            data: ethernet_udp(data, 7420),
        })
        .collect();
    write_pcapng(&file, LinkType::Ethernet, &["lo"], &frames);
    let expected: Vec<Flags> = cases.iter().map(|(_, e)| *e).collect();
    check_flags(&tshark, &file, &expected);

    let info = infos(&tshark, &file);
    let c0 = clocks[0].record.clock().unwrap().summary();
    assert!(info[0].contains(&c0), "{}", info[0]);
    assert!(info[1].contains("[Malformed]"), "{}", info[1]);
    assert!(
        info[3].contains("; CLOCK [body too short]; "),
        "{}",
        info[3]
    );
}
