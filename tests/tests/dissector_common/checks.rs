//! What tshark printed compared with what was sent: the field lists for
//! `-e`, tshark's value formats, and the field-by-field checks of a
//! decoded event.

use std::net::IpAddr;

use tracer_codec::{ClockEvent, TxEvent};
use tracer_e2e::tshark::Row;

use super::events::{Record, Sent};
use super::latency::{Latency, LatencyModel};

/// Nanoseconds since the epoch of tshark's absolute time text, e.g.
/// "Nov 13, 2025 02:13:20.000009000 UTC".
pub fn parse_abs_time(s: &str) -> u64 {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let parts: Vec<&str> = s.split_whitespace().collect();
    assert_eq!(parts.len(), 5, "absolute time {s:?}");
    assert_eq!(parts[4], "UTC", "absolute time {s:?} not in UTC");
    let month = MONTHS.iter().position(|m| *m == parts[0]).expect("month") as i64 + 1;
    let day: i64 = parts[1].trim_end_matches(',').parse().expect("day");
    let year: i64 = parts[2].parse().expect("year");
    let (hms, frac) = parts[3].split_once('.').expect("fraction");
    let hms: Vec<i64> = hms.split(':').map(|x| x.parse().expect("hms")).collect();
    assert_eq!(frac.len(), 9, "nanosecond digits in {s:?}");
    let secs = days_from_civil(year, month, day) * 86_400 + hms[0] * 3600 + hms[1] * 60 + hms[2];
    secs as u64 * 1_000_000_000 + frac.parse::<u64>().expect("fraction")
}

/// Days since 1970-01-01 of a proleptic Gregorian date (eras of 400 years).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12; // March = 0
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Every field of the TX event display filter names, for `-e`.
pub const TX_FIELDS: &[&str] = &[
    "nettrace.mono_ns",
    "nettrace.global_ns",
    "nettrace.global_time",
    "nettrace.hw_ns",
    "nettrace.cookie",
    "nettrace.tskey",
    "nettrace.seq",
    "nettrace.netns",
    "nettrace.cpu",
    "nettrace.pid",
    "nettrace.tid",
    "nettrace.stage",
    "nettrace.family",
    "nettrace.sport",
    "nettrace.dport",
    "nettrace.saddr",
    "nettrace.daddr",
    "nettrace.saddr6",
    "nettrace.daddr6",
    "nettrace.comm",
    "nettrace.extra",
];

/// Every field of a clock update, for `-e`.
pub const CLOCK_FIELDS: &[&str] = &[
    "nettrace.clock.mono_ns",
    "nettrace.clock.global_ns",
    "nettrace.clock.global_time",
    "nettrace.clock.ref_ns",
    "nettrace.clock.offset_ns",
    "nettrace.clock.freq_ppb",
    "nettrace.clock.delay_ns",
    "nettrace.clock.uncertainty_ns",
    "nettrace.clock.error_estimate_ns",
    "nettrace.clock.source",
    "nettrace.clock.state",
    "nettrace.clock.ref_minus_mono_ns",
];

/// Latency fields, for `-e`.
pub const LAT_FIELDS: &[&str] = &[
    "nettrace.lat.sched_ns",
    "nettrace.lat.snd_sw_ns",
    "nettrace.lat.snd_hw_ns",
    "nettrace.lat.ack_ns",
    "nettrace.lat.total_ns",
];

/// Capture-record (pcapng frame) header fields, for `-e`.
pub const CAPTURE_FIELDS: &[&str] = &[
    "nettrace.capture.version",
    "nettrace.capture.header_len",
    "nettrace.agent_id",
    "nettrace.event_seq",
    "nettrace.clock_source",
    "nettrace.clock_state",
    "nettrace.host_len",
    "nettrace.host",
    "nettrace.kind",
    "nettrace.len",
    "nettrace.unknown",
];

/// `fields` + `more`, for one `-e` list.
pub fn field_list(groups: &[&[&'static str]]) -> Vec<&'static str> {
    groups.iter().flat_map(|g| g.iter().copied()).collect()
}

/// Lower-case hex without separators, as tshark prints bytes fields.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Value `i` of a field that occurs once per TX event of the frame. A
/// string field whose values are all empty is printed as nothing at all.
fn nth<'a>(row: &'a Row, field: &str, i: usize) -> &'a str {
    let all = row.all(field);
    if all.is_empty() {
        return "";
    }
    all.get(i)
        .unwrap_or_else(|| panic!("{field}: no occurrence {i} in {row:?}"))
}

/// Compare the TX fields of the `i`-th TX event of `row` with `ev`; its
/// addresses are the `addr_i`-th of its family (IPv4 and IPv6 addresses are
/// separate fields). `what` names the event in failure messages.
pub fn check_tx(row: &Row, i: usize, addr_i: usize, ev: &TxEvent, what: &str) {
    let eq = |field: &str, want: String| {
        assert_eq!(nth(row, field, i), want, "{what}: {field}");
    };
    eq("nettrace.mono_ns", ev.mono_ns.to_string());
    eq("nettrace.global_ns", ev.global_ns.to_string());
    assert_eq!(
        parse_abs_time(nth(row, "nettrace.global_time", i)),
        ev.global_ns,
        "{what}: nettrace.global_time"
    );
    eq("nettrace.hw_ns", ev.hw_ns.to_string());
    eq("nettrace.cookie", ev.cookie.to_string());
    eq("nettrace.tskey", ev.tskey.to_string());
    eq("nettrace.seq", ev.seq.to_string());
    eq("nettrace.netns", ev.netns.to_string());
    eq("nettrace.cpu", ev.cpu.to_string());
    eq("nettrace.pid", ev.pid.to_string());
    eq("nettrace.tid", ev.tid.to_string());
    eq("nettrace.stage", ev.stage.to_string());
    eq("nettrace.family", ev.family.to_string());
    eq("nettrace.sport", ev.sport.to_string());
    eq("nettrace.dport", ev.dport.to_string());
    eq("nettrace.comm", ev.comm_str());
    let f = ev.flow();
    let (s, d) = match (f.saddr, f.daddr) {
        (IpAddr::V4(_), _) => ("nettrace.saddr", "nettrace.daddr"),
        _ => ("nettrace.saddr6", "nettrace.daddr6"),
    };
    assert_eq!(nth(row, s, addr_i), f.saddr.to_string(), "{what}: {s}");
    assert_eq!(nth(row, d, addr_i), f.daddr.to_string(), "{what}: {d}");
}

/// ref_ns - mono_ns, exact (the golden values keep it inside i64).
pub fn ref_minus_mono(ev: &ClockEvent) -> i64 {
    i64::try_from(i128::from(ev.ref_ns) - i128::from(ev.mono_ns)).expect("ref - mono fits i64")
}

/// Compare the clock fields of the `i`-th clock update of `row` with `ev`.
pub fn check_clock(row: &Row, i: usize, ev: &ClockEvent, what: &str) {
    let eq = |field: &str, want: String| {
        assert_eq!(nth(row, field, i), want, "{what}: {field}");
    };
    eq("nettrace.clock.mono_ns", ev.mono_ns.to_string());
    eq("nettrace.clock.global_ns", ev.global_ns.to_string());
    assert_eq!(
        parse_abs_time(nth(row, "nettrace.clock.global_time", i)),
        ev.global_ns,
        "{what}: nettrace.clock.global_time"
    );
    eq("nettrace.clock.ref_ns", ev.ref_ns.to_string());
    eq("nettrace.clock.offset_ns", ev.offset_ns.to_string());
    // tshark prints a double with 15 significant digits ("%.15g"); the
    // golden values need no more, so Rust's shortest form is the same text
    // and parses back to the very same double.
    let freq = nth(row, "nettrace.clock.freq_ppb", i);
    assert_eq!(freq, ev.freq_ppb.to_string(), "{what}: freq_ppb text");
    assert_eq!(
        freq.parse::<f64>().expect("freq_ppb").to_bits(),
        ev.freq_ppb.to_bits(),
        "{what}: freq_ppb bits"
    );
    eq("nettrace.clock.delay_ns", ev.delay_ns.to_string());
    eq(
        "nettrace.clock.uncertainty_ns",
        ev.uncertainty_ns.to_string(),
    );
    eq(
        "nettrace.clock.error_estimate_ns",
        ev.error_estimate_ns.to_string(),
    );
    eq("nettrace.clock.source", ev.source.to_string());
    eq("nettrace.clock.state", ev.state.to_string());
    eq(
        "nettrace.clock.ref_minus_mono_ns",
        ref_minus_mono(ev).to_string(),
    );
}

/// Compare a row's latency fields with `lat` (the row holds one event).
pub fn check_latency(row: &Row, lat: &Latency, what: &str) {
    let eq = |field: &str, want: Option<i64>| {
        assert_eq!(
            row.opt(field).map(|v| v.parse::<i64>().expect("latency")),
            want,
            "{what}: {field}"
        );
    };
    eq("nettrace.lat.sched_ns", lat.sched_ns);
    eq("nettrace.lat.snd_sw_ns", lat.snd_sw_ns);
    eq("nettrace.lat.snd_hw_ns", lat.snd_hw_ns);
    eq("nettrace.lat.ack_ns", lat.ack_ns);
    eq("nettrace.lat.total_ns", lat.total_ns);
}

/// Compare one decoded pcapng frame (a capture record) with the event
/// that was sent, every field, and its latencies with the model's.
pub fn check_capture_frame(row: &Row, s: &Sent, model: &mut LatencyModel) {
    let what = format!("{} event {}", s.agent.host, s.event_seq);
    let (kind, body) = s.record.kind_body();
    let eq = |field: &str, want: String| {
        assert_eq!(row.one(field), want, "{what}: {field}");
    };
    eq("nettrace.capture.version", "1".into());
    eq(
        "nettrace.capture.header_len",
        (23 + s.agent.host.len()).to_string(),
    );
    eq("nettrace.agent_id", format!("0x{:016x}", s.agent.agent_id));
    eq("nettrace.event_seq", s.event_seq.to_string());
    eq("nettrace.clock_source", s.agent.clock_source.to_string());
    eq("nettrace.clock_state", s.agent.clock_state.to_string());
    eq("nettrace.host_len", s.agent.host.len().to_string());
    eq("nettrace.host", s.agent.host.into());
    eq("nettrace.kind", kind.to_string());
    eq("nettrace.len", body.len().to_string());
    match &s.record {
        Record::Tx { ev, extra } => {
            check_tx(row, 0, 0, ev, &what);
            // Exactly one address pair, the one of the event's family.
            let pairs = ["nettrace.saddr", "nettrace.saddr6"]
                .iter()
                .filter(|f| row.has(f))
                .count();
            assert_eq!(pairs, 1, "{what}: one address family");
            assert_eq!(
                row.opt("nettrace.extra"),
                (!extra.is_empty()).then(|| hex(extra)).as_deref(),
                "{what}: nettrace.extra"
            );
            assert!(!row.has("nettrace.unknown"), "{what}: not unknown");
            check_latency(row, &model.next(s.agent.agent_id, ev), &what);
            for f in CLOCK_FIELDS {
                assert!(!row.has(f), "{what}: TX event has no {f}");
            }
        }
        Record::Clock { ev, extra } => {
            check_clock(row, 0, ev, &what);
            assert_eq!(
                row.opt("nettrace.extra"),
                (!extra.is_empty()).then(|| hex(extra)).as_deref(),
                "{what}: nettrace.extra"
            );
            assert!(!row.has("nettrace.unknown"), "{what}: not unknown");
            for f in TX_FIELDS.iter().chain(LAT_FIELDS) {
                if *f != "nettrace.extra" {
                    assert!(!row.has(f), "{what}: clock update has no {f}");
                }
            }
        }
        Record::Unknown { body, .. } => {
            assert_eq!(row.one("nettrace.unknown"), hex(body), "{what}: body");
            for f in TX_FIELDS.iter().chain(LAT_FIELDS).chain(CLOCK_FIELDS) {
                assert!(!row.has(f), "{what}: unknown kind has no {f}");
            }
        }
    }
}
