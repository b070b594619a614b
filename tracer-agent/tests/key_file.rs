//! `tracer-agent --key-file`: a key file others may access is refused
//! before anything is loaded, with one line saying what to do, and the key
//! never appears in the output (no root needed: the key is read first).

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

fn agent(key: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tracer-agent"))
        .args(["--sink", "127.0.0.1:9", "--key-file"])
        .arg(key)
        .output()
        .unwrap()
}

#[test]
fn unsafe_or_short_key_files_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("nettrace.key");
    std::fs::write(&key, b"SECRET-KEY-0123456789-abcdef").unwrap();
    for (mode, want) in [(0o640, "chmod 600"), (0o604, "chmod 600")] {
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
        let out = agent(&key);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{mode:o}: {err}");
        assert!(err.contains("--key-file"), "{err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(!err.contains("SECRET"));
    }
    std::fs::write(&key, b"short").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let err = String::from_utf8_lossy(&agent(&key).stderr).into_owned();
    assert!(
        err.contains("at least 16") && err.contains("/dev/urandom"),
        "{err}"
    );
    let err = String::from_utf8_lossy(&agent(&dir.path().join("none")).stderr).into_owned();
    assert!(err.contains("cannot read the key file"), "{err}");
}
