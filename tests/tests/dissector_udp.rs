//! Live-capture decoding: agent datagrams (built with the real
//! `DatagramBuilder`) inside Ethernet/IPv4/UDP frames are decoded by the
//! dissector through its `udp.port` registration, on the default port, on
//! a port set with `-o nettrace.udp_port:N`, and through "Decode As".

mod dissector_common;

use std::path::Path;

use dissector_common::*;
use tracer_e2e::tshark::{Query, Row, Tshark};
use tracer_sink::LinkType;

const DEFAULT_PORT: u16 = 7420;
const OTHER_PORT: u16 = 9999;

/// Datagram-header fields, for `-e`.
const DGRAM_FIELDS: &[&str] = &[
    "frame.number",
    "_ws.col.Protocol",
    "_ws.col.Info",
    "nettrace.magic",
    "nettrace.dgram.version",
    "nettrace.dgram.header_len",
    "nettrace.agent_id",
    "nettrace.dgram.boot_id",
    "nettrace.dgram.seq",
    "nettrace.dgram.lost_events",
    "nettrace.dgram.first_event_seq",
    "nettrace.clock_source",
    "nettrace.clock_state",
    "nettrace.dgram.event_count",
    "nettrace.host_len",
    "nettrace.host",
    "nettrace.dgram.flags",
    "nettrace.dgram.flags.mac",
    "nettrace.dgram.incarnation",
    "nettrace.dgram.sink_instance",
    "nettrace.dgram.sent_mono_ns",
    "nettrace.dgram.mac",
    "nettrace.kind",
    "nettrace.len",
    "nettrace.event_seq",
    "nettrace.unknown",
];

/// One datagram of the test file.
struct Dgram {
    agent: Agent,
    seq: u64,
    lost_events: u64,
    events: Vec<Sent>,
}

/// The golden events as four datagrams (lost_events differs per datagram).
fn dgrams() -> Vec<Dgram> {
    golden_datagrams()
        .into_iter()
        .enumerate()
        .map(|(i, (agent, events))| Dgram {
            agent,
            // Datagram sequence numbers per agent: A 0, B 0, A 1, B 1.
            seq: i as u64 / 2,
            lost_events: i as u64 * 1000 + 7,
            events,
        })
        .collect()
}

/// Writes the datagrams to `dport`, then the first one again to `extra_port`.
fn write_file(path: &Path, dgrams: &[Dgram], dport: u16, extra_port: u16) {
    let mut frames: Vec<Frame> = dgrams
        .iter()
        .enumerate()
        .map(|(i, d)| Frame {
            interface: 0,
            time_ns: T0 + i as u64 * 1000,
            data: ethernet_udp(&datagram(&d.agent, d.seq, d.lost_events, &d.events), dport),
        })
        .collect();
    let first = &dgrams[0];
    frames.push(Frame {
        interface: 0,
        time_ns: T0 + 1_000_000,
        data: ethernet_udp(
            &datagram(&first.agent, first.seq, first.lost_events, &first.events),
            extra_port,
        ),
    });
    write_pcapng(path, LinkType::Ethernet, &["lo"], &frames);
}

fn boot_id_text(b: &[u8; 16]) -> String {
    let h = hex(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Every field of one decoded datagram against what was sent; latencies
/// continue `model` (file order).
fn check_dgram(row: &Row, d: &Dgram, model: &mut LatencyModel) {
    let what = format!("datagram {} seq {}", d.agent.host, d.seq);
    let eq = |field: &str, want: String| {
        assert_eq!(row.one(field), want, "{what}: {field}");
    };
    eq("_ws.col.Protocol", "NETTRACE".into());
    eq("nettrace.magic", "NTRC".into());
    eq("nettrace.dgram.version", "3".into());
    eq(
        "nettrace.dgram.header_len",
        (tracer_codec::HEADER_FIXED_LEN + d.agent.host.len()).to_string(),
    );
    eq("nettrace.dgram.flags", "0x00".into());
    eq(
        "nettrace.dgram.incarnation",
        format!("0x{INCARNATION:016x}"),
    );
    eq(
        "nettrace.dgram.sink_instance",
        format!("0x{BOUND_SINK:016x}"),
    );
    eq("nettrace.dgram.sent_mono_ns", SENT_MONO_NS.to_string());
    assert!(!row.has("nettrace.dgram.mac"), "{what}: untagged");
    eq("nettrace.agent_id", format!("0x{:016x}", d.agent.agent_id));
    eq("nettrace.dgram.boot_id", boot_id_text(&d.agent.boot_id));
    eq("nettrace.dgram.seq", d.seq.to_string());
    eq("nettrace.dgram.lost_events", d.lost_events.to_string());
    eq(
        "nettrace.dgram.first_event_seq",
        d.events[0].event_seq.to_string(),
    );
    eq("nettrace.clock_source", d.agent.clock_source.to_string());
    eq("nettrace.clock_state", d.agent.clock_state.to_string());
    eq("nettrace.dgram.event_count", d.events.len().to_string());
    eq("nettrace.host_len", d.agent.host.len().to_string());
    eq("nettrace.host", d.agent.host.into());
    let info = row.one("_ws.col.Info");
    assert!(
        info.starts_with(&format!("{} seq={}: ", d.agent.host, d.seq)),
        "{what}: info {info:?}"
    );

    // Per record, in order: kind, len, event_seq (first_event_seq + index).
    let kinds: Vec<String> = d
        .events
        .iter()
        .map(|s| s.record.kind_body().0.to_string())
        .collect();
    let lens: Vec<String> = d
        .events
        .iter()
        .map(|s| s.record.kind_body().1.len().to_string())
        .collect();
    let seqs: Vec<String> = d.events.iter().map(|s| s.event_seq.to_string()).collect();
    assert_eq!(row.all("nettrace.kind"), kinds, "{what}: kinds");
    assert_eq!(row.all("nettrace.len"), lens, "{what}: lens");
    assert_eq!(row.all("nettrace.event_seq"), seqs, "{what}: event seqs");

    // TX fields occur once per TX record, in record order; latency and
    // extra fields only where they apply.
    let mut extras = Vec::new();
    let mut unknown = Vec::new();
    let mut lat: [Vec<String>; 5] = Default::default();
    let mut tx_index = 0;
    let mut clock_index = 0;
    let (mut v4_index, mut v6_index) = (0, 0);
    for s in &d.events {
        match &s.record {
            Record::Tx { ev, extra } => {
                let addr_index = if ev.family == 6 {
                    &mut v6_index
                } else {
                    &mut v4_index
                };
                let what = format!("{what} event {}", s.event_seq);
                check_tx(row, tx_index, *addr_index, ev, &what);
                *addr_index += 1;
                tx_index += 1;
                if !extra.is_empty() {
                    extras.push(hex(extra));
                }
                let l = model.next(d.agent.agent_id, ev);
                let values = [l.sched_ns, l.snd_sw_ns, l.snd_hw_ns, l.ack_ns, l.total_ns];
                for (list, v) in lat.iter_mut().zip(values) {
                    list.extend(v.map(|v| v.to_string()));
                }
            }
            Record::Clock { ev, extra } => {
                let what = format!("{what} event {}", s.event_seq);
                check_clock(row, clock_index, ev, &what);
                clock_index += 1;
                if !extra.is_empty() {
                    extras.push(hex(extra));
                }
                // Each record's summary is in the Info column, phc2sys style.
                assert!(info.contains(&ev.summary()), "{what}: info {info:?}");
            }
            Record::Unknown { body, .. } => unknown.push(hex(body)),
        }
    }
    for f in CLOCK_FIELDS {
        assert_eq!(
            row.all(f).len(),
            clock_index,
            "{what}: {f} once per clock update"
        );
    }
    assert_eq!(
        row.all("nettrace.stage").len(),
        tx_index,
        "{what}: TX count"
    );
    assert_eq!(row.all("nettrace.extra"), extras, "{what}: extra");
    assert_eq!(row.all("nettrace.unknown"), unknown, "{what}: unknown");
    for (field, want) in LAT_FIELDS.iter().zip(&lat) {
        assert_eq!(row.all(field), want.as_slice(), "{what}: {field}");
    }
}

/// One Ethernet/IPv4/UDP frame to the default port per payload, 1 µs apart.
fn write_payloads<'a>(file: &Path, payloads: impl IntoIterator<Item = &'a Vec<u8>>) {
    let frames: Vec<Frame> = payloads
        .into_iter()
        .enumerate()
        .map(|(i, d)| Frame {
            interface: 0,
            time_ns: T0 + i as u64 * 1000,
            data: ethernet_udp(d, DEFAULT_PORT),
        })
        .collect();
    write_pcapng(file, LinkType::Ethernet, &["lo"], &frames);
}

fn decode(tshark: &Tshark, file: &Path, query: &Query) -> Vec<Row> {
    let fields = field_list(&[DGRAM_FIELDS, TX_FIELDS, LAT_FIELDS, CLOCK_FIELDS]);
    tshark
        .fields(file, &fields, query)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Checks that frames 1..=n are the datagrams and the last frame is
/// decoded only when `last_decoded`.
fn check_file(rows: &[Row], dgrams: &[Dgram], last_decoded: bool) {
    assert_eq!(rows.len(), dgrams.len() + 1);
    let mut model = LatencyModel::default();
    for (row, d) in rows.iter().zip(dgrams) {
        check_dgram(row, d, &mut model);
    }
    let last = rows.last().unwrap();
    if last_decoded {
        // The same datagram again: fields equal, latencies go on from the
        // state of the whole file.
        check_dgram(last, &dgrams[0], &mut model);
    } else {
        assert!(!last.has("nettrace.magic"), "not decoded: {last:?}");
        assert_eq!(last.one("_ws.col.Protocol"), "UDP");
    }
}

#[test]
fn udp_default_port() {
    let Some(tshark) = Tshark::or_skip("udp_default_port") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("live.pcapng");
    let dgrams = dgrams();
    write_file(&file, &dgrams, DEFAULT_PORT, OTHER_PORT);

    check_file(&decode(&tshark, &file, &Query::default()), &dgrams, false);
    let two_pass = decode(&tshark, &file, &Query::default().two_pass());
    assert_eq!(two_pass, decode(&tshark, &file, &Query::default()));
}

#[test]
fn udp_port_preference() {
    let Some(tshark) = Tshark::or_skip("udp_port_preference") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("live-9999.pcapng");
    let dgrams = dgrams();
    // The datagrams on 9999, one stray copy on 7420.
    write_file(&file, &dgrams, OTHER_PORT, DEFAULT_PORT);

    let q = Query::default().pref("nettrace.udp_port", &OTHER_PORT.to_string());
    check_file(&decode(&tshark, &file, &q), &dgrams, false);

    // Without the preference only the copy on the default port is decoded.
    let rows = decode(&tshark, &file, &Query::default());
    let decoded: Vec<&str> = rows
        .iter()
        .filter(|r| r.has("nettrace.magic"))
        .map(|r| r.one("frame.number"))
        .collect();
    assert_eq!(decoded, ["5"]);
}

#[test]
fn udp_decode_as() {
    let Some(tshark) = Tshark::or_skip("udp_decode_as") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("live-decode-as.pcapng");
    let dgrams = dgrams();
    write_file(&file, &dgrams, DEFAULT_PORT, OTHER_PORT);

    // Decode As on the other port: every frame is decoded.
    let q = Query::default().decode_as(&format!("udp.port=={OTHER_PORT},nettrace"));
    check_file(&decode(&tshark, &file, &q), &dgrams, true);
}

/// A tagged datagram shows its MAC and decodes its records as an untagged
/// one does; a version-1 datagram (an agent of an older build) decodes
/// without flags, incarnation or MAC, a version-2 one without the sink
/// binding.
#[test]
fn udp_tagged_and_version_1_datagrams() {
    let Some(tshark) = Tshark::or_skip("udp_tagged_and_version_1_datagrams") else {
        return;
    };
    let key = tracer_auth::SharedKey::from_bytes(&[9; 32])
        .unwrap()
        .mac_key(tracer_auth::Purpose::Datagram);
    let dg = &dgrams()[0];
    let plain = datagram(&dg.agent, dg.seq, dg.lost_events, &dg.events);
    let tagged = datagram_with(
        &dg.agent,
        dg.seq,
        dg.lost_events,
        &dg.events,
        tracer_codec::WIRE_VERSION,
        Some(&key),
    );
    let v1 = datagram_with(
        &dg.agent,
        dg.seq,
        dg.lost_events,
        &dg.events,
        tracer_codec::WIRE_VERSION_1,
        None,
    );
    let v2 = datagram_with(
        &dg.agent,
        dg.seq,
        dg.lost_events,
        &dg.events,
        tracer_codec::WIRE_VERSION_2,
        Some(&key),
    );
    assert_eq!(tagged.len(), plain.len() + tracer_codec::MAC_LEN);
    // The sink's acknowledgement to the agent comes from the same port.
    let ack = tracer_codec::Ack {
        sink_instance: 0xabcd,
        ack_seq: 3,
        agent_id: dg.agent.agent_id,
        boot_id: dg.agent.boot_id,
        incarnation: INCARNATION,
        preceding_events: 1000,
        delivered_events: 250,
        lost_events: 7,
        received_events: 260,
    }
    .encode_with_mac(|d| key.tag(d));
    let tag = &tagged[tagged.len() - tracer_codec::MAC_LEN..];
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tagged.pcapng");
    write_payloads(&file, [&plain, &tagged, &v1, &ack, &v2]);
    let rows = decode(&tshark, &file, &Query::default());
    assert_eq!(rows.len(), 5);
    let (plain_row, tagged_row, v1_row) = (&rows[0], &rows[1], &rows[2]);
    let v2_row = &rows[4];
    assert_eq!(v2_row.one("nettrace.dgram.version"), "2");
    assert_eq!(
        v2_row.one("nettrace.dgram.header_len"),
        (tracer_codec::HEADER_FIXED_LEN_V2 + dg.agent.host.len()).to_string()
    );
    assert_eq!(
        v2_row.one("nettrace.dgram.incarnation"),
        format!("0x{INCARNATION:016x}")
    );
    assert!(!v2_row.has("nettrace.dgram.sink_instance"));
    assert_eq!(v2_row.one("nettrace.dgram.flags.mac"), "1");
    assert_eq!(v2_row.all("nettrace.kind"), plain_row.all("nettrace.kind"));
    assert_eq!(v2_row.one("nettrace.host"), dg.agent.host);
    assert_eq!(
        tagged_row.one("nettrace.dgram.sink_instance"),
        format!("0x{BOUND_SINK:016x}")
    );
    assert_eq!(tagged_row.one("nettrace.dgram.flags"), "0x01");
    assert_eq!(tagged_row.one("nettrace.dgram.flags.mac"), "1");
    assert_eq!(tagged_row.one("nettrace.dgram.mac"), hex(tag));
    // The records read the same with and without the MAC after them.
    for f in [
        "nettrace.kind",
        "nettrace.len",
        "nettrace.event_seq",
        "_ws.col.Info",
    ] {
        assert_eq!(tagged_row.all(f), plain_row.all(f), "{f}");
    }
    assert_eq!(v1_row.one("nettrace.dgram.version"), "1");
    assert_eq!(
        v1_row.one("nettrace.dgram.header_len"),
        (tracer_codec::HEADER_FIXED_LEN_V1 + dg.agent.host.len()).to_string()
    );
    assert!(!v1_row.has("nettrace.dgram.incarnation"));
    assert!(!v1_row.has("nettrace.dgram.mac"));
    assert_eq!(v1_row.all("nettrace.kind"), plain_row.all("nettrace.kind"));
    assert_eq!(v1_row.one("nettrace.host"), dg.agent.host);
    // The acknowledgement is shown as one, not as a malformed datagram
    // (`fields` fails on any expert error).
    let ack_rows = tshark
        .fields(
            &file,
            &[
                "frame.number",
                "nettrace.ack.sink_instance",
                "nettrace.ack.preceding_events",
                "nettrace.ack.delivered_events",
                "nettrace.ack.lost_events",
                "nettrace.ack.received_events",
                "nettrace.dgram.incarnation",
                "nettrace.ack.mac",
                "_ws.col.Info",
            ],
            &Query::default(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let a = &ack_rows[3];
    assert_eq!(a.one("nettrace.ack.sink_instance"), "0x000000000000abcd");
    assert_eq!(a.one("nettrace.ack.preceding_events"), "1000");
    assert_eq!(a.one("nettrace.ack.delivered_events"), "250");
    assert_eq!(a.one("nettrace.ack.lost_events"), "7");
    assert_eq!(a.one("nettrace.ack.received_events"), "260");
    assert_eq!(
        a.one("nettrace.dgram.incarnation"),
        format!("0x{INCARNATION:016x}")
    );
    assert_eq!(
        a.one("nettrace.ack.mac"),
        hex(&ack[ack.len() - tracer_codec::MAC_LEN..])
    );
    assert!(a.one("_ws.col.Info").starts_with("ack agent="), "{a:?}");
}

/// A UDP GSO batch as a capture on veth or loopback sees it, before the
/// device cuts it: datagrams end to end, each padded to the segment size
/// but the last. The dissector shows each datagram as if it came alone.
#[test]
fn udp_gso_batch_seen_before_segmentation() {
    let Some(tshark) = Tshark::or_skip("udp_gso_batch_seen_before_segmentation") else {
        return;
    };
    let key = tracer_auth::SharedKey::from_bytes(&[9; 32])
        .unwrap()
        .mac_key(tracer_auth::Purpose::Datagram);
    let dgrams = dgrams();
    for key in [None, Some(&key)] {
        let build = |d: &Dgram, pad_to| {
            let v = tracer_codec::WIRE_VERSION;
            datagram_padded(&d.agent, d.seq, d.lost_events, &d.events, v, key, pad_to)
        };
        let alone: Vec<Vec<u8>> = dgrams.iter().map(|d| build(d, None)).collect();
        let segment = alone.iter().map(Vec::len).max().unwrap() + 40;
        let mut batch = Vec::new();
        let mut tags = Vec::new();
        for (i, d) in dgrams.iter().enumerate() {
            let last = i + 1 == dgrams.len();
            let seg = build(d, (!last).then_some(segment));
            if key.is_some() {
                // The tag covers the padding: each its own.
                tags.push(hex(&seg[seg.len() - tracer_codec::MAC_LEN..]));
            }
            batch.extend(seg);
        }
        assert_eq!(batch.len(), segment * 3 + alone[3].len());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("gso.pcapng");
        write_payloads(&file, std::iter::once(&batch).chain(&alone));
        let rows = decode(&tshark, &file, &Query::default());
        assert_eq!(rows.len(), 5);
        let (gso, singles) = rows.split_first().unwrap();
        let info = gso.one("_ws.col.Info");
        assert!(info.starts_with("GSO batch of 4 datagrams: "), "{info}");
        let concat =
            |f: &str| -> Vec<String> { singles.iter().flat_map(|r| r.all(f).to_vec()).collect() };
        for f in [
            "nettrace.dgram.seq",
            "nettrace.agent_id",
            "nettrace.dgram.event_count",
            "nettrace.kind",
            "nettrace.event_seq",
            "nettrace.host",
        ] {
            assert_eq!(gso.all(f).to_vec(), concat(f), "{f}");
        }
        assert_eq!(gso.all("nettrace.dgram.mac").to_vec(), tags);
        let header_lens = gso.all("nettrace.dgram.header_len");
        assert!(header_lens[0].parse::<usize>().unwrap() > tracer_codec::HEADER_FIXED_LEN + 2);
    }
}
