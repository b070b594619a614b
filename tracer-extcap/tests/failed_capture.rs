//! A capture that fails still opens Wireshark's fifo, writes its reason to
//! standard error, and only then closes the fifo: Wireshark's capture
//! child waits on the fifo for a writer, so an extcap that exits without
//! ever opening it leaves tshark waiting for good, and one that closes it
//! before its message is out has its reason cut short.

use std::ffi::CString;
use std::io::Read;
use std::net::TcpListener;
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

fn mkfifo(path: &std::path::Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path we own; mkfifo only reads it.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(rc, 0, "mkfifo: {}", std::io::Error::last_os_error());
}

/// Runs a capture against `sink` into a fresh fifo, reading the fifo as
/// dumpcap does; returns (exit success, stderr, bytes the fifo gave)
/// or panics when the fifo is never closed.
fn capture_into_fifo(sink: &str, more: &[&str]) -> (bool, String, usize) {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    let mut child = Command::new(env!("CARGO_BIN_EXE_nettrace-extcap"))
        .args([
            "--capture",
            "--extcap-interface",
            "nettrace",
            "--sink",
            sink,
        ])
        .arg("--fifo")
        .arg(&fifo)
        .args(more)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader: blocks in open until the extcap opens its end, then
    // reads until the extcap closes it.
    let (tx, rx) = mpsc::channel();
    let path = fifo.clone();
    std::thread::spawn(move || {
        let mut f = std::fs::File::open(path).unwrap();
        let mut buf = Vec::new();
        let _ = f.read_to_end(&mut buf);
        let _ = tx.send(buf.len());
    });
    let got = rx.recv_timeout(Duration::from_secs(20));
    if got.is_err() {
        let _ = child.kill();
        // Unblock the reader thread's open.
        let _ = std::fs::OpenOptions::new().write(true).open(&fifo);
        panic!("the extcap did not open and close its fifo within 20 s");
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        got.unwrap(),
    )
}

/// A loopback address nothing listens on.
fn unused_address() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

#[test]
fn every_failure_opens_and_closes_the_fifo_after_its_reason() {
    let gone = unused_address();
    // A listener that closes each connection at once.
    let closing = TcpListener::bind("127.0.0.1:0").unwrap();
    let closes = closing.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for c in closing.incoming() {
            drop(c);
        }
    });
    // A listener that never says a word.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let quiet = silent.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in silent.incoming() {
            held.push(c);
        }
    });
    for (sink, more, reason) in [
        (
            gone.as_str(),
            &[][..],
            "cannot connect to the sink's live port",
        ),
        (
            closes.as_str(),
            &[][..],
            "closed the connection during the handshake",
        ),
        (
            quiet.as_str(),
            &["--connect-timeout", "1"][..],
            "did not answer the handshake within 1 s",
        ),
        (
            gone.as_str(),
            &["--extcap-capture-filter", "tcp port 80"][..],
            "display filter",
        ),
    ] {
        let (ok, err, bytes) = capture_into_fifo(sink, more);
        assert!(!ok, "{sink} {more:?}: the capture succeeded");
        assert_eq!(bytes, 0, "{sink} {more:?}: bytes in the fifo");
        assert!(
            err.contains(reason),
            "{sink} {more:?}: no {reason:?} in:\n{err}"
        );
        assert_eq!(err.lines().count(), 1, "one line of reason:\n{err}");
    }
}

#[test]
fn a_failed_capture_by_hand_leaves_no_file() {
    let gone = unused_address();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("live.pcapng");
    let out = Command::new(env!("CARGO_BIN_EXE_nettrace-extcap"))
        .args(["--capture", "--sink", &gone])
        .arg("--fifo")
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot connect"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!file.exists(), "a failed capture left {}", file.display());
}
