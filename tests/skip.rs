//! Tests that cannot run their real part (no root, no tshark, no tmpfs)
//! must not count as passed: under `CI=true` they fail with the reason;
//! elsewhere they say why and are counted as skipped by scripts/test.sh.

use std::io::Write;

/// Environment variable naming the file where skipped tests are listed,
/// one line each (scripts/test.sh sets it and counts the lines).
pub const SKIP_LOG_ENV: &str = "NETTRACE_SKIP_LOG";

/// True when running under CI (`CI=true`), where nothing may be skipped.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The running test's name (libtest names each test's thread after it).
fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("unnamed test")
        .to_owned()
}

/// The running test cannot run its real part because of `reason`. Under
/// CI this panics, failing the test; otherwise it prints the reason and
/// records the skip. The caller returns right after.
pub fn skip(reason: &str) {
    let name = test_name();
    if in_ci() {
        panic!("{name} cannot run its real part under CI: {reason}");
    }
    eprintln!("SKIPPED {name}: {reason}");
    if let Some(path) = std::env::var_os(SKIP_LOG_ENV) {
        let line = format!("{name}: {reason}\n");
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = appended {
            eprintln!("cannot record the skip in {}: {e}", path.to_string_lossy());
        }
    }
}

/// True when running as root; otherwise records the skip (see [`skip`]).
/// Namespaces, BPF and mounts need root.
pub fn require_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        skip("needs root (network namespaces, BPF programs, mounts)");
    }
    root
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Set in the child process this test starts.
    const CHILD: &str = "NETTRACE_SKIP_CHILD";
    const NAME: &str = "skip::tests::a_skip_is_recorded_or_fails_under_ci";

    fn run_child(ci: &str, log: Option<&std::path::Path>) -> std::process::Output {
        let mut cmd = std::process::Command::new(std::env::current_exe().expect("current_exe"));
        cmd.args(["--exact", NAME, "--nocapture"])
            .env(CHILD, "1")
            .env("CI", ci)
            .env_remove(SKIP_LOG_ENV);
        if let Some(log) = log {
            cmd.env(SKIP_LOG_ENV, log);
        }
        cmd.output().expect("re-run this test binary")
    }

    #[test]
    fn a_skip_is_recorded_or_fails_under_ci() {
        if std::env::var_os(CHILD).is_some() {
            skip("no widget here");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("skips");
        let child = run_child("false", Some(&log));
        assert!(child.status.success(), "{child:?}");
        let text = std::fs::read_to_string(&log).expect("skip log written");
        assert_eq!(text, format!("{NAME}: no widget here\n"));

        let child = run_child("true", None);
        assert!(!child.status.success(), "a skip must fail under CI");
        let err = String::from_utf8_lossy(&child.stderr);
        assert!(
            err.contains("cannot run its real part under CI: no widget here"),
            "{err}"
        );
    }
}
