//! The `tracer-sink` binary: runs, writes, stops cleanly on SIGTERM with
//! JSON stats on stdout; a bind failure exits non-zero with a hint.

mod common;

use std::process::{Command, Stdio};

use common::*;
use tracer_codec::TxEvent;
use tracer_sink::SinkStats;

#[test]
fn sigterm_writes_everything_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("traces");
    let sink = SinkBin::start(
        &out,
        &["--json", "--stats-interval", "0", "--file-prefix", "bin"],
        Stdio::piped(),
    );
    let port = sink.port;

    let tx = sender();
    let mut a = SimAgent::new(0xB1, "binhost");
    let mut sent = 0u64;
    for d in 0..50u64 {
        let evs: Vec<TxEvent> = (0..10)
            .map(|k| tx_event(BASE_NS + d * 100 + k, k, 1))
            .collect();
        sent += evs.len() as u64;
        tx.send_to(&a.datagram(&evs), ("127.0.0.1", port)).unwrap();
    }
    tx.send_to(b"garbage", ("127.0.0.1", port)).unwrap();

    let (status, log, stdout) = sink.stop();
    assert!(status.success(), "exit {status:?}; stderr:\n{log}");

    let last = stdout.lines().last().expect("final stats on stdout");
    let stats: SinkStats = serde_json::from_str(last).expect("stats are JSON");
    assert_eq!(stats.events_written, sent, "{stats:?}");
    assert_eq!(stats.rejects["too_short"], 1);
    assert_eq!(stats.agents.len(), 1);
    assert_eq!(stats.agents[0].host, "binhost");

    let f = files(&out);
    assert_eq!(f.len(), 1);
    assert!(f[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("bin-"));
    let s = &read_file(&f[0])[0];
    assert_eq!(s.epbs.len() as u64, sent);
    assert_eq!(s.isbs.len(), 1);
}

#[test]
fn bind_failure_is_explained() {
    let holder = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = holder.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tracer-sink"))
        .args(["--listen", &addr.to_string(), "--output"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("address in use") && err.contains("--listen"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn help_documents_every_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_tracer-sink"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--listen",
        "--output",
        "--rotate-size",
        "--rotate-interval",
        "--stats-interval",
        "--json",
        "--reorder-window-ms",
        "--rcvbuf",
        "--file-prefix",
        "--no-comments",
        "--agent-idle-timeout",
        "--stats-max-agents",
        "Examples:",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}");
    }
}
