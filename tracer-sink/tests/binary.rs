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
    assert!(err.contains("--listen"), "{err}");
    // The OS error once, not once more in the hint.
    assert_eq!(
        err.to_lowercase().matches("address already in use").count(),
        1,
        "{err}"
    );
    assert!(!err.contains("address in use"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn rcvbuf_outside_its_range_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for size in ["1K", "4G"] {
        let (code, err) = run_sink(&[
            "--output".as_ref(),
            dir.path().as_os_str(),
            "--rcvbuf".as_ref(),
            size.as_ref(),
        ]);
        assert_eq!(code, Some(2), "{size}: {err}");
        assert!(err.contains("outside 64K..=512M"), "{err}");
    }
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
        "--comments",
        "--agent-idle-timeout",
        "--stats-max-agents",
        "Examples:",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}");
    }
}

/// Runs the binary with `args` (and an unused port) until it exits;
/// returns its exit code and stderr.
fn run_sink(args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    let port = free_port();
    let out = Command::new(env!("CARGO_BIN_EXE_tracer-sink"))
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--no-clock-responder",
        ])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.stdout.is_empty(), "no stats without a run");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn rotate_size_below_the_minimum_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for size in ["0", "1K", "65535"] {
        let (code, err) = run_sink(&[
            "--output".as_ref(),
            dir.path().as_os_str(),
            "--rotate-size".as_ref(),
            size.as_ref(),
        ]);
        assert_eq!(code, Some(2), "{size}: {err}");
        assert!(err.contains("minimum rotation size of 64K"), "{err}");
    }
    assert!(files(dir.path()).is_empty());
}

/// `--compress` takes `zstd` or `none` only; a bad value stops the sink
/// before it creates anything.
#[test]
fn compress_values_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["gzip", "", "ZSTD1"] {
        let (code, err) = run_sink(&[
            "--output".as_ref(),
            dir.path().as_os_str(),
            "--compress".as_ref(),
            bad.as_ref(),
        ]);
        assert_eq!(code, Some(2), "{bad}: {err}");
        assert!(err.contains("zstd") && err.contains("none"), "{err}");
    }
    assert!(files(dir.path()).is_empty());
}

#[test]
fn an_output_path_that_is_a_file_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let (code, err) = run_sink(&["--output".as_ref(), file.as_os_str()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("cannot create output directory") && err.contains("--output"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
}

/// A read-only output directory stops even root: a read-only bind mount
/// of it (permission bits would not, root ignores them).
#[test]
fn a_read_only_output_directory_is_refused_at_start() {
    if !tracer_e2e::skip::require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let bind = Command::new("mount")
        .args(["--bind"])
        .arg(&ro)
        .arg(&ro)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !bind {
        tracer_e2e::skip::skip("cannot bind-mount here");
        return;
    }
    let _guard = Unmount(ro.clone());
    let remount = Command::new("mount")
        .args(["-o", "remount,bind,ro"])
        .arg(&ro)
        .status()
        .unwrap();
    assert!(remount.success());
    let (code, err) = run_sink(&["--output".as_ref(), ro.as_os_str()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("cannot create files in output directory")
            && err.contains("Read-only file system")
            && err.contains("--output"),
        "{err}"
    );
    assert!(!err.contains("tracer-sink started"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
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
