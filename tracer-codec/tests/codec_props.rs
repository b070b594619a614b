//! Property tests: every encodable datagram round-trips, and no byte string
//! makes the decoder panic or accept a datagram whose framing is broken;
//! a tagged datagram checks with its key and with no other, and no change
//! of one byte leaves it both well-framed and correctly tagged.

use proptest::prelude::*;
use tracer_codec::*;

fn arb_tx() -> impl Strategy<Value = TxEvent> {
    (
        any::<[u64; 5]>(),
        any::<[u32; 6]>(),
        0u8..5,
        prop_oneof![Just(4u8), Just(6u8)],
        any::<(u16, u16)>(),
        any::<([u8; 16], [u8; 16], [u8; 16])>(),
    )
        .prop_map(
            |(w, d, stage, family, (sport, dport), (saddr, daddr, comm))| TxEvent {
                mono_ns: w[0],
                global_ns: w[1],
                hw_ns: w[2],
                cookie: w[3],
                tskey: d[0],
                seq: d[1],
                netns: d[2],
                cpu: d[3],
                pid: d[4],
                tid: d[5],
                stage,
                family,
                sport,
                dport,
                saddr,
                daddr,
                comm,
                end_seq: 0,
                tx_flags: 0,
            },
        )
}

fn arb_rx() -> impl Strategy<Value = RxEvent> {
    (
        any::<[u64; 6]>(),
        any::<[u32; 8]>(),
        0u8..5,
        prop_oneof![Just(4u8), Just(6u8)],
        any::<(u8, u8, u16, u16)>(),
        any::<([u8; 16], [u8; 16], [u8; 16])>(),
    )
        .prop_map(
            |(w, d, stage, family, (protocol, tstamp_type, sport, dport), (saddr, daddr, comm))| {
                RxEvent {
                    mono_ns: w[0],
                    global_ns: w[1],
                    rx_stamp_ns: w[2],
                    rx_stamp_global_ns: w[3],
                    hw_ns: w[4],
                    cookie: w[5],
                    seq: d[0],
                    end_seq: d[1],
                    len: d[2],
                    netns: d[3],
                    ifindex: d[4],
                    cpu: d[5],
                    pid: d[6],
                    tid: d[7],
                    stage,
                    family,
                    protocol,
                    tstamp_type,
                    sport,
                    dport,
                    saddr,
                    daddr,
                    comm,
                }
            },
        )
}

fn arb_cpu() -> impl Strategy<Value = CpuEvent> {
    (any::<[u64; 7]>(), any::<u32>()).prop_map(|(w, cpu)| CpuEvent {
        mono_ns: w[0],
        global_ns: w[1],
        interval_ns: w[2],
        net_rx_ns: w[3],
        net_tx_ns: w[4],
        sock_send_ns: w[5],
        sock_recv_ns: w[6],
        cpu,
    })
}

/// A TX, an RX or a CPU event.
fn arb_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        arb_tx().prop_map(Event::Tx),
        arb_rx().prop_map(Event::Rx),
        arb_cpu().prop_map(Event::Cpu),
    ]
}

/// Push `e` (one of [`arb_event`]'s kinds) into `b`; false when it does
/// not fit.
fn push_event(b: &mut DatagramBuilder, e: &Event) -> bool {
    match e {
        Event::Tx(t) => b.push(t),
        Event::Rx(r) => b.push(r),
        Event::Cpu(c) => b.push(c),
        other => unreachable!("not generated: {other:?}"),
    }
}

fn header(host: &str, seq: u64) -> DatagramHeader {
    DatagramHeader {
        version: WIRE_VERSION,
        agent_id: 0x1234_5678_9abc_def0,
        boot_id: [7; 16],
        seq,
        lost_events: 3,
        first_event_seq: seq.wrapping_mul(10),
        clock_source: 0,
        clock_state: 2,
        event_count: 0,
        flags: 0,
        incarnation: 1,
        sink_instance: 0,
        sent_mono_ns: 0,
        hostname: host.to_owned(),
    }
}

/// What `Datagram::decode` makes of `bytes`, as `DatagramView` sees it.
fn both_agree(bytes: &[u8]) -> Result<(), TestCaseError> {
    let owned = Datagram::decode(bytes);
    let view = DatagramView::parse(bytes);
    // The one-pass walk sees what `records` yields, at their offsets.
    let mut seen = Vec::new();
    let with = DatagramHeaderRef::parse(bytes).and_then(|(h, off)| {
        DatagramView::parse_after_header_with(bytes, h, off, |at, r| seen.push((at, r)))
    });
    prop_assert_eq!(with.is_ok(), view.is_ok());
    match (&owned, &view) {
        (Ok(d), Ok(v)) => {
            prop_assert_eq!(&d.header, &v.header().to_header());
            let recs: Vec<RecordView> = v.records().collect();
            let mut at = 0;
            prop_assert_eq!(seen.len(), recs.len());
            for ((o, r), want) in seen.iter().zip(&recs) {
                prop_assert_eq!(*o, at);
                prop_assert_eq!(r, want);
                at += want.raw.bytes.len();
            }
            prop_assert_eq!(recs.len(), d.records.len());
            for (r, (raw, ev)) in recs.iter().zip(&d.records) {
                prop_assert_eq!(&r.raw, raw);
                prop_assert_eq!(r.global_ns, ev.global_ns());
                prop_assert_eq!(r.raw.global_ns(), ev.global_ns());
            }
        }
        (Err(a), Err(b)) => prop_assert_eq!(a, b),
        _ => prop_assert!(
            false,
            "decode {:?} vs view {:?}",
            owned.is_ok(),
            view.is_ok()
        ),
    }
    Ok(())
}

proptest! {
    #[test]
    fn view_and_owned_decode_agree(events in prop::collection::vec(arb_tx(), 0..12),
                                   flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
                                   cut in 0usize..40, unknown in any::<bool>()) {
        let mut b = DatagramBuilder::new("h", 1472);
        for e in &events {
            b.push_tx(e);
        }
        if unknown {
            b.push_raw(4242, &[0u8; 7]);
        }
        let mut bytes = b.finish(&header("h", 1));
        both_agree(&bytes)?;
        for (i, v) in &flips {
            let at = i.index(bytes.len());
            bytes[at] = *v;
        }
        both_agree(&bytes)?;
        let keep = bytes.len().saturating_sub(cut);
        both_agree(&bytes[..keep])?;
    }

    #[test]
    fn datagram_round_trip(events in prop::collection::vec(arb_tx(), 0..40),
                           host in "[a-z0-9.-]{0,80}", seq in any::<u64>(),
                           max_len in 200usize..70_000) {
        let mut b = DatagramBuilder::new(&host, max_len);
        let mut pushed = Vec::new();
        for e in &events {
            if !b.push_tx(e) { break; }
            pushed.push(*e);
        }
        let bytes = b.finish(&header(&host, seq));
        prop_assert!(bytes.len() <= max_len.max(HEADER_FIXED_LEN + 64 + 4));
        let d = Datagram::decode(&bytes).unwrap();
        prop_assert_eq!(d.header.seq, seq);
        prop_assert_eq!(d.header.event_count as usize, pushed.len());
        prop_assert!(host.starts_with(&d.header.hostname));
        let got: Vec<TxEvent> = d.records.iter().map(|(_, e)| match e {
            Event::Tx(t) => *t, other => panic!("unexpected {other:?}"),
        }).collect();
        prop_assert_eq!(got, pushed);
    }

    #[test]
    fn mixed_tx_rx_cpu_datagrams_round_trip(events in prop::collection::vec(arb_event(), 0..30),
                                        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4)) {
        let mut b = DatagramBuilder::new("rx", 9000);
        let mut pushed = Vec::new();
        for e in &events {
            if !push_event(&mut b, e) { break; }
            pushed.push(e.clone());
        }
        let mut bytes = b.finish(&header("rx", 5));
        let d = Datagram::decode(&bytes).unwrap();
        let got: Vec<Event> = d.records.iter().map(|(_, e)| e.clone()).collect();
        prop_assert_eq!(got, pushed);
        both_agree(&bytes)?;
        for (i, v) in &flips {
            let at = i.index(bytes.len());
            bytes[at] = *v;
        }
        both_agree(&bytes)?;
    }

    #[test]
    fn prepared_capture_header_matches_encode(agent_id in any::<u64>(), seq in any::<u64>(),
                                              src in any::<u8>(), state in any::<u8>(),
                                              host in ".{0,300}",
                                              record in prop::collection::vec(any::<u8>(), 0..64)) {
        let mut want = Vec::new();
        CaptureRecord::encode(&mut want, agent_id, seq, src, state, &host, &record);
        let h = CaptureHeader::new(agent_id, &host);
        let mut got = vec![9u8; 3];
        h.encode(&mut got, seq, src, state, &record);
        prop_assert_eq!(&got[..3], &[9u8; 3][..]);
        prop_assert_eq!(&got[3..], &want[..]);
        prop_assert_eq!(h.len() + record.len(), want.len());
        let mut copy = h.bytes().to_vec();
        copy.extend_from_slice(&record);
        CaptureHeader::set_event(&mut copy, seq, src, state);
        prop_assert_eq!(&copy, &want);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = Datagram::decode(&bytes);
        let _ = CaptureRecord::decode(&bytes);
    }

    #[test]
    fn corrupted_datagrams_never_panic(events in prop::collection::vec(arb_tx(), 1..10),
                                       flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..8),
                                       cut in any::<usize>()) {
        let mut b = DatagramBuilder::new("h", 9000);
        for e in &events { b.push_tx(e); }
        let mut bytes = b.finish(&header("h", 1));
        for (i, v) in flips { let n = bytes.len(); bytes[i % n] = v; }
        let cut = cut % (bytes.len() + 1);
        if let Ok(d) = Datagram::decode(&bytes[..cut]) {
            // Whatever is accepted is self-consistent.
            prop_assert_eq!(d.records.len(), d.header.event_count as usize);
        }
    }

    #[test]
    fn truncation_is_always_rejected(events in prop::collection::vec(arb_tx(), 1..10), cut in 1usize..2000) {
        let mut b = DatagramBuilder::new("host", 9000);
        for e in &events { b.push_tx(e); }
        let bytes = b.finish(&header("host", 1));
        let cut = cut.min(bytes.len());
        prop_assert!(Datagram::decode(&bytes[..bytes.len() - cut]).is_err());
    }
}

#[test]
fn unknown_kinds_are_skipped_by_length() {
    let mut b = DatagramBuilder::new("newer", 9000);
    assert!(b.push_raw(999, &[1, 2, 3, 4, 5]));
    assert!(b.push_tx(&TxEvent::default()));
    let bytes = b.finish(&header("newer", 0));
    let d = Datagram::decode(&bytes).unwrap();
    assert_eq!(d.records.len(), 2);
    assert_eq!(d.records[0].1, Event::Unknown { kind: 999, len: 5 });
    assert!(matches!(d.records[1].1, Event::Tx(_)));
}

#[test]
fn cpu_records_carry_their_global_time_and_a_short_one_rejects_the_datagram() {
    let ev = CpuEvent {
        mono_ns: 11,
        global_ns: 1_763_000_000_000_000_007,
        interval_ns: 1_000_000_000,
        net_rx_ns: 3,
        net_tx_ns: 4,
        sock_send_ns: 5,
        sock_recv_ns: 6,
        cpu: 1,
    };
    let mut b = DatagramBuilder::new("h", 9000);
    assert!(b.push(&ev));
    let good = b.finish(&header("h", 0));
    let v = DatagramView::parse(&good).unwrap();
    let recs: Vec<RecordView> = v.records().collect();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].raw.kind, EventKind::CPU);
    assert_eq!(recs[0].global_ns, Some(ev.global_ns));
    assert_eq!(
        Datagram::decode(&good).unwrap().records[0].1,
        Event::Cpu(ev)
    );
    assert_eq!(EventKind::from_u16(6), EventKind::Cpu);
    assert_eq!(EventKind::Cpu.as_u16(), EventKind::CPU);

    // One byte short of the layout: malformed, the whole datagram refused.
    let mut body = Vec::new();
    ev.encode_body(&mut body);
    body.pop();
    let mut b = DatagramBuilder::new("h", 9000);
    assert!(b.push(&TxEvent::default()));
    assert!(b.push_raw(EventKind::CPU, &body));
    let bad = b.finish(&header("h", 1));
    for e in [
        Datagram::decode(&bad).unwrap_err(),
        DatagramView::parse(&bad).unwrap_err(),
    ] {
        assert_eq!(
            e,
            DecodeError::BodyTooShort {
                kind: EventKind::CPU,
                len: CpuEvent::BODY_LEN - 1,
                need: CpuEvent::BODY_LEN
            }
        );
        assert_eq!(e.reason(), "body_too_short");
    }
}

#[test]
fn newer_tx_body_with_extra_fields_decodes() {
    let mut body = Vec::new();
    TxEvent {
        cookie: 42,
        ..TxEvent::default()
    }
    .encode_body(&mut body);
    body.extend_from_slice(&[0xEE; 12]);
    let mut b = DatagramBuilder::new("h", 9000);
    assert!(b.push_raw(EventKind::TX, &body));
    let bytes = b.finish(&header("h", 0));
    let d = Datagram::decode(&bytes).unwrap();
    assert!(matches!(
        d.records[0].1,
        Event::Tx(TxEvent { cookie: 42, .. })
    ));
}

#[test]
fn rejections_have_specific_reasons() {
    let mut b = DatagramBuilder::new("h", 9000);
    b.push_tx(&TxEvent::default());
    let good = b.finish(&header("h", 0));

    let mut bad_magic = good.clone();
    bad_magic[0] = b'X';
    assert_eq!(
        Datagram::decode(&bad_magic).unwrap_err().reason(),
        "bad_magic"
    );

    let mut v4 = good.clone();
    v4[4] = 4;
    assert_eq!(Datagram::decode(&v4).unwrap_err().reason(), "bad_version");

    assert_eq!(
        Datagram::decode(&good[..10]).unwrap_err().reason(),
        "too_short"
    );
    assert_eq!(
        Datagram::decode(&good[..good.len() - 1])
            .unwrap_err()
            .reason(),
        "truncated_record"
    );
    let mut count = good.clone();
    count[58] = 2;
    assert_eq!(
        Datagram::decode(&count).unwrap_err().reason(),
        "event_count_mismatch"
    );

    let mut stage = good.clone();
    let body_off = HEADER_FIXED_LEN + 1 + RECORD_HEADER_LEN;
    stage[body_off + 56] = 9;
    assert_eq!(Datagram::decode(&stage).unwrap_err().reason(), "bad_field");

    let huge = vec![0u8; MAX_DATAGRAM_LEN + 1];
    assert_eq!(Datagram::decode(&huge).unwrap_err().reason(), "too_large");
    for r in [&bad_magic, &v4, &count, &stage] {
        let reason = Datagram::decode(r).unwrap_err().reason();
        assert!(DecodeError::ALL_REASONS.contains(&reason));
    }
}

#[test]
fn capture_record_round_trip() {
    let mut b = DatagramBuilder::new("h", 9000);
    let ev = TxEvent {
        cookie: 7,
        tskey: 99,
        ..TxEvent::default()
    };
    b.push_tx(&ev);
    let bytes = b.finish(&header("h", 0));
    let d = Datagram::decode(&bytes).unwrap();
    let mut out = Vec::new();
    CaptureRecord::encode(&mut out, 5, 77, 2, 3, "sender", d.records[0].0.bytes);
    let c = CaptureRecord::decode(&out).unwrap();
    assert_eq!(
        (
            c.agent_id,
            c.event_seq,
            c.clock_source,
            c.clock_state,
            c.host
        ),
        (5, 77, 2, 3, "sender")
    );
    assert_eq!(c.record.decode().unwrap(), Event::Tx(ev));
}

fn mac_key(seed: u8) -> tracer_auth::MacKey {
    tracer_auth::SharedKey::from_bytes(&[seed; 32])
        .expect("32 bytes")
        .mac_key(tracer_auth::Purpose::Datagram)
}

/// Whether a receiver holding `key` would take `bytes` as an authentic,
/// well-formed datagram.
fn authentic(bytes: &[u8], key: &tracer_auth::MacKey) -> bool {
    let Ok(view) = DatagramView::parse(bytes) else {
        return false;
    };
    match mac_trailer(bytes, view.header()) {
        Some((signed, tag)) => key.verify(signed, tag),
        None => false,
    }
}

proptest! {
    #[test]
    fn tagged_datagrams_round_trip_and_fit(events in prop::collection::vec(arb_event(), 0..40),
                                           host in "[a-z0-9.-]{0,70}", seq in any::<u64>(),
                                           incarnation in 1u64.., max_len in 200usize..9000) {
        let key = mac_key(1);
        let mut b = DatagramBuilder::new(&host, max_len).with_mac_room();
        let mut pushed = Vec::new();
        for e in &events {
            if !push_event(&mut b, e) { break; }
            pushed.push(e.clone());
        }
        let mut h = header(&host, seq);
        h.incarnation = incarnation;
        let bytes = b.finish_with_mac(&h, |d| key.tag(d));
        prop_assert!(bytes.len() <= max_len.max(HEADER_FIXED_LEN + 64 + 4 + MAC_LEN));
        let d = Datagram::decode(&bytes).unwrap();
        prop_assert_eq!(d.header.flags, FLAG_MAC);
        prop_assert_eq!(d.header.incarnation, incarnation);
        prop_assert_eq!(d.header.version, WIRE_VERSION);
        let got: Vec<Event> = d.records.iter().map(|(_, e)| e.clone()).collect();
        prop_assert_eq!(&got, &pushed);
        prop_assert!(authentic(&bytes, &key));
        prop_assert!(!authentic(&bytes, &mac_key(2)), "another key must not check");
        both_agree(&bytes)?;
        // The same records untagged are not authentic to a keyed reader.
        let mut b = DatagramBuilder::new(&host, max_len);
        for e in &pushed {
            push_event(&mut b, e);
        }
        prop_assert!(!authentic(&b.finish(&h), &key));
    }

    #[test]
    fn no_single_byte_change_keeps_a_datagram_authentic(events in prop::collection::vec(arb_tx(), 0..8),
                                                         at in any::<prop::sample::Index>(),
                                                         xor in 1u8..) {
        let key = mac_key(3);
        let mut b = DatagramBuilder::new("h", 1472).with_mac_room();
        for e in &events { b.push_tx(e); }
        let mut bytes = b.finish_with_mac(&header("h", 9), |d| key.tag(d));
        prop_assert!(authentic(&bytes, &key));
        let i = at.index(bytes.len());
        bytes[i] ^= xor;
        prop_assert!(!authentic(&bytes, &key), "byte {} changed and still authentic", i);
        both_agree(&bytes)?;
        // Cut or extended: never authentic either.
        bytes[i] ^= xor;
        prop_assert!(!authentic(&bytes[..bytes.len() - 1], &key));
        let mut longer = bytes.clone();
        longer.push(0);
        prop_assert!(!authentic(&longer, &key));
    }

    #[test]
    fn version_1_datagrams_still_read(events in prop::collection::vec(arb_tx(), 0..12),
                                      host in "[a-z]{0,20}", seq in any::<u64>()) {
        let mut b = DatagramBuilder::for_version(&host, 1472, WIRE_VERSION_1).with_mac_room();
        for e in &events { b.push_tx(e); }
        let mut h = header(&host, seq);
        h.incarnation = 77;
        // A version-1 builder cannot carry a tag: it finishes without one.
        let bytes = b.finish_with_mac(&h, |_| [0xAA; MAC_LEN]);
        prop_assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), WIRE_VERSION_1);
        prop_assert_eq!(usize::from(u16::from_le_bytes([bytes[6], bytes[7]])), HEADER_FIXED_LEN_V1 + host.len());
        prop_assert_eq!(&bytes[HEADER_FIXED_LEN_V1..HEADER_FIXED_LEN_V1 + host.len()], host.as_bytes());
        let d = Datagram::decode(&bytes).unwrap();
        prop_assert_eq!((d.header.version, d.header.flags, d.header.incarnation), (1, 0, 0));
        prop_assert_eq!(d.header.seq, seq);
        prop_assert_eq!(d.records.len(), events.len().min(d.header.event_count as usize));
        both_agree(&bytes)?;
    }

    #[test]
    fn version_2_datagrams_still_read(events in prop::collection::vec(arb_tx(), 0..12),
                                      host in "[a-z]{0,20}", seq in any::<u64>()) {
        let mut b = DatagramBuilder::for_version(&host, 1472, WIRE_VERSION_2).with_mac_room();
        for e in &events { b.push_tx(e); }
        let mut h = header(&host, seq);
        h.incarnation = 77;
        h.sink_instance = 5;
        h.sent_mono_ns = 6;
        // Version 2 carries a tag, but not the binding to a sink.
        let bytes = b.finish_with_mac(&h, |_| [0xAA; MAC_LEN]);
        prop_assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), WIRE_VERSION_2);
        prop_assert_eq!(usize::from(u16::from_le_bytes([bytes[6], bytes[7]])), HEADER_FIXED_LEN_V2 + host.len());
        prop_assert_eq!(&bytes[HEADER_FIXED_LEN_V2..HEADER_FIXED_LEN_V2 + host.len()], host.as_bytes());
        let d = Datagram::decode(&bytes).unwrap();
        let got = (d.header.version, d.header.flags, d.header.incarnation, d.header.sink_instance, d.header.sent_mono_ns);
        prop_assert_eq!(got, (2, FLAG_MAC, 77, 0, 0));
        prop_assert_eq!(d.header.seq, seq);
        both_agree(&bytes)?;
    }
}

#[test]
fn mac_framing_rejections_have_specific_reasons() {
    let key = mac_key(4);
    let mut b = DatagramBuilder::new("h", 9000).with_mac_room();
    b.push_tx(&TxEvent::default());
    let good = b.finish_with_mac(&header("h", 0), |d| key.tag(d));
    assert!(authentic(&good, &key));
    // The tag is the last 16 bytes and covers everything before it.
    let (signed, tag) = good.split_at(good.len() - MAC_LEN);
    assert_eq!(tag, key.tag(signed));
    assert_eq!(good[61], FLAG_MAC);

    for bit in 1..8 {
        let mut f = good.clone();
        f[61] |= 1 << bit;
        let e = Datagram::decode(&f).unwrap_err();
        assert_eq!(e.reason(), "bad_flags", "bit {bit}");
        assert!(DecodeError::ALL_REASONS.contains(&e.reason()));
    }
    // A tag flag on a datagram too short to hold the tag after its header.
    let mut b = DatagramBuilder::new("h", 9000);
    let empty = b.finish(&header("h", 0));
    let mut flagged = empty.clone();
    flagged[61] = FLAG_MAC;
    assert_eq!(
        Datagram::decode(&flagged).unwrap_err().reason(),
        "bad_header_len"
    );
    // Flag cleared on a tagged datagram: the tag is read as a record.
    let mut unflagged = good.clone();
    unflagged[61] = 0;
    assert!(Datagram::decode(&unflagged).is_err());
    // An untagged datagram has no trailer to check.
    let (h, _) = DatagramHeaderRef::parse(&empty).unwrap();
    assert!(mac_trailer(&empty, &h).is_none());
}

proptest! {
    /// Padded to one size (UDP GSO segments), a datagram of any version,
    /// tagged or not, is exactly that long and reads as the same records
    /// under the same header; the tag covers the padding.
    #[test]
    fn padded_datagrams_have_the_size_asked_and_read_the_same(
        events in prop::collection::vec(arb_event(), 0..40),
        host in "[a-z0-9.-]{0,70}", seq in any::<u64>(),
        version in 1u16..=3, keyed in any::<bool>(), max_len in 300usize..9000,
    ) {
        let key = mac_key(5);
        let build = || {
            let b = DatagramBuilder::for_version(&host, max_len, version);
            if keyed { b.with_mac_room() } else { b }
        };
        let (mut plain, mut padded) = (build(), build());
        for e in &events {
            if !(push_event(&mut plain, e) && push_event(&mut padded, e)) { break; }
        }
        let tag = |d: &[u8]| key.tag(d);
        let h = header(&host, seq);
        let mut want = Vec::new();
        plain.finish_into(&h, None, keyed.then_some(tag), &mut want);
        let mut out = vec![0xEE; 3]; // appended after what is there
        let len = padded.finish_into(&h, Some(max_len), keyed.then_some(tag), &mut out);
        let got = &out[3..];
        prop_assert_eq!(len, got.len());
        prop_assert_eq!(len, max_len.max(want.len()));
        prop_assert!(padded.is_empty());
        let (a, b) = (Datagram::decode(&want).unwrap(), Datagram::decode(got).unwrap());
        let events_of = |d: &Datagram| d.records.iter().map(|(_, e)| e.clone()).collect::<Vec<_>>();
        prop_assert_eq!(events_of(&a), events_of(&b));
        prop_assert_eq!(a.header, b.header);
        if keyed && version > 1 {
            prop_assert!(authentic(got, &key));
        }
        both_agree(got)?;
        // End to end, as a capture sees a GSO batch: each one's extent.
        let mut joined = got.to_vec();
        joined.extend_from_slice(&want);
        prop_assert_eq!(tracer_codec::datagram_extent(&joined), Ok(len));
        prop_assert_eq!(tracer_codec::datagram_extent(&joined[len..]), Ok(want.len()));
        prop_assert!(tracer_codec::datagram_extent(&want[..want.len() - 1]).is_err());
    }
}
