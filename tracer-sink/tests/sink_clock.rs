//! The `tracer-sink` binary stamps events of kinds it does not know with
//! the clock its `--clock` chose (the global clock its clock service
//! disciplines), not with raw CLOCK_TAI. `monotonic_raw` counts from boot,
//! decades away from TAI, so the two cannot be confused.

mod common;

use std::process::Stdio;
use std::time::Duration;

use clocksync::{now_ns, ClockId};
use common::*;

/// Run the sink with `clock_args`, send one record of an unknown kind, stop
/// it, and return the record's pcapng timestamp.
fn unknown_kind_stamp(clock_args: &[&str]) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("traces");
    let mut args = vec!["--stats-interval", "0", "--clock-listen", "127.0.0.1:0"];
    args.extend_from_slice(clock_args);
    let sink = SinkBin::start(&out, &args, Stdio::null());
    let port = sink.port;
    let mut agent = SimAgent::new(0xC10C, "clockhost");
    sender()
        .send_to(
            &agent.datagram_raw(&[(99, vec![7u8; 33])]),
            ("127.0.0.1", port),
        )
        .unwrap();
    // Let the sink read it before the signal (it drains on shutdown too).
    std::thread::sleep(Duration::from_millis(300));
    let (status, log, _) = sink.stop();
    assert!(status.success(), "exit {status:?}; stderr:\n{log}");
    let f = files(&out);
    assert_eq!(f.len(), 1, "{log}");
    let s = &read_file(&f[0])[0];
    assert_eq!(s.epbs.len(), 1, "{log}");
    ns(s.epbs[0].timestamp)
}

#[test]
fn unknown_kinds_follow_the_sinks_clock_not_tai() {
    let before = now_ns(ClockId::MonotonicRaw).unwrap();
    let ts = unknown_kind_stamp(&["--clock", "monotonic_raw"]);
    let after = now_ns(ClockId::MonotonicRaw).unwrap();
    let tai = now_ns(ClockId::Tai).unwrap();
    assert!(
        ts.abs_diff(tai) > 86_400 * 1_000_000_000,
        "stamped on CLOCK_TAI ({ts}), not on --clock monotonic_raw"
    );
    // The sink's global clock follows CLOCK_MONOTONIC_RAW to well within a
    // second; the record arrived between `before` and `after`.
    assert!(
        ts + 1_000_000_000 > before && ts < after + 1_000_000_000,
        "{before} <= {ts} <= {after}?"
    );
}

#[test]
fn unknown_kinds_use_tai_with_the_default_clock() {
    let before = now_ns(ClockId::Tai).unwrap();
    let ts = unknown_kind_stamp(&[]);
    let after = now_ns(ClockId::Tai).unwrap();
    assert!(ts >= before && ts <= after, "{before} <= {ts} <= {after}?");
}
