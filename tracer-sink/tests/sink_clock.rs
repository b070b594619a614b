//! The `tracer-sink` binary stamps events of kinds it does not know with
//! the clock its `--clock` chose (the global clock its clock service
//! disciplines), not with raw CLOCK_TAI. `monotonic_raw` counts from boot,
//! decades away from TAI, so the two cannot be confused.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use clocksync::{now_ns, ClockId};
use common::*;

/// Run the sink with `clock_args`, send one record of an unknown kind, stop
/// it, and return the record's pcapng timestamp.
fn unknown_kind_stamp(clock_args: &[&str]) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("traces");
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tracer-sink"))
        .args(["--listen", &format!("127.0.0.1:{port}"), "--output"])
        .arg(&out)
        .args(["--stats-interval", "0", "--clock-listen", "127.0.0.1:0"])
        .args(clock_args)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tracer-sink");
    let stderr = child.stderr.take().unwrap();
    let (ltx, lrx) = mpsc::channel::<String>();
    let logger = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = ltx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    loop {
        let line = lrx
            .recv_timeout(Duration::from_secs(20))
            .expect("sink did not start");
        if line.contains("tracer-sink started") {
            break;
        }
    }
    let mut agent = SimAgent::new(0xC10C, "clockhost");
    sender()
        .send_to(
            &agent.datagram_raw(&[(99, vec![7u8; 33])]),
            ("127.0.0.1", port),
        )
        .unwrap();
    // Let the sink read it before the signal (it drains on shutdown too).
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: plain kill(2) on the pid of a child we spawned and still own.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let status = child.wait().unwrap();
    let log = logger.join().unwrap();
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
