//! Clock options that cannot work on this host fail with a message that
//! says why: hardware exchange stamps on an interface without a PHC (this
//! machine has none), a PHC device that does not exist, a bad --clock.

use std::process::Command;

use tracer_e2e::bins::bin;
use tracer_e2e::procs::run;
use tracer_e2e::skip::require_root;

fn fails_with(mut cmd: Command, needles: &[&str]) {
    let (st, _, err) = run({
        cmd.env("NO_COLOR", "1");
        cmd
    });
    assert!(!st.success(), "expected failure; stderr: {err}");
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}: {err}");
    }
}

#[test]
fn agent_refuses_hardware_stamps_without_a_phc() {
    if !require_root() {
        return;
    }
    let mut c = Command::new(bin("tracer-agent"));
    c.args([
        "--sink",
        "127.0.0.1:9",
        "--clock",
        "sink",
        "--clock-hw-iface",
        "lo",
    ]);
    fails_with(c, &["lo", "no PTP hardware clock"]);
}

#[test]
fn agent_refuses_a_missing_phc_device_and_a_bad_clock_name() {
    if !require_root() {
        return;
    }
    let mut c = Command::new(bin("tracer-agent"));
    c.args(["--sink", "127.0.0.1:9", "--clock", "phc:/dev/ptp99"]);
    fails_with(c, &["/dev/ptp99"]);
    let mut c = Command::new(bin("tracer-agent"));
    c.args(["--sink", "127.0.0.1:9", "--clock", "gps"]);
    fails_with(c, &["unknown clock", "phc:/dev/ptpN"]);
}

#[test]
fn sink_refuses_hardware_stamps_without_a_phc_and_a_bad_clock() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Command::new(bin("tracer-sink"));
    c.args([
        "--listen",
        "127.0.0.1:0",
        "--clock-hw-iface",
        "lo",
        "--output",
    ])
    .arg(dir.path());
    fails_with(c, &["clock responder", "no PTP hardware clock"]);
    let mut c = Command::new(bin("tracer-sink"));
    c.args([
        "--listen",
        "127.0.0.1:0",
        "--clock",
        "sink:127.0.0.1:1",
        "--output",
    ])
    .arg(dir.path());
    fails_with(c, &["the sink is the master"]);
}
