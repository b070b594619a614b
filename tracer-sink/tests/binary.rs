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
        "Examples:",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}");
    }
}

/// `--key-file` of a file others may read is refused at start with one
/// line that says what to do, and the key never appears in any output; a
/// private one runs and logs that datagrams are authenticated.
#[test]
fn key_file_permissions_are_checked_and_the_key_never_printed() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("nettrace.key");
    std::fs::write(&key, b"SECRET-KEY-0123456789-abcdef").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tracer-sink"))
        .args(["--listen", "127.0.0.1:0", "--output"])
        .arg(dir.path().join("out"))
        .arg("--key-file")
        .arg(&key)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("chmod 600"), "{err}");
    assert!(err.contains("0644"), "{err}");
    assert_eq!(err.matches("tracer-sink: error").count(), 1, "{err}");
    assert!(!err.contains("SECRET") && !String::from_utf8_lossy(&out.stdout).contains("SECRET"));

    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let sink = SinkBin::start(
        &dir.path().join("out"),
        &[
            "--json",
            "--stats-interval",
            "0",
            "--key-file",
            key.to_str().unwrap(),
        ],
        Stdio::piped(),
    );
    let tx = sender();
    tx.send_to(
        &SimAgent::new(1, "unkeyed").datagram(&[tx_event(BASE_NS, 1, 1)]),
        ("127.0.0.1", sink.port),
    )
    .unwrap();
    let (status, log, stdout) = sink.stop();
    assert!(status.success(), "{log}");
    assert!(log.contains("authenticated=true"), "{log}");
    assert!(!log.contains("SECRET") && !stdout.contains("SECRET"));
    let stats: SinkStats = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(stats.rejects["auth_missing"], 1);
    assert_eq!(stats.events_written, 0);
}
