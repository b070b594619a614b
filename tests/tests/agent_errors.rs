//! tracer-agent's error paths: it exits non-zero with a message that says
//! what to do, and on SIGINT/SIGTERM it detaches its BPF program.

use std::process::Command;
use std::time::Duration;

use tracer_e2e::bins::bin;
use tracer_e2e::netns::is_root;
use tracer_e2e::procs::{run, Proc};
use tracer_e2e::skip::require_root;

fn agent() -> Command {
    let mut c = Command::new(bin("tracer-agent"));
    c.args(["--sink", "127.0.0.1:9"]);
    c
}

fn assert_fails_with(cmd: Command, needles: &[&str]) {
    let (st, _, err) = run(cmd);
    assert!(!st.success(), "expected failure, got {st}; stderr: {err}");
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}: {err}");
    }
}

#[test]
fn without_privileges_it_says_which_capabilities() {
    if !is_root() {
        // Unprivileged already: the plain command must fail the same way.
        assert_fails_with(agent(), &["privileges", "CAP_BPF"]);
        return;
    }
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
    ])
    .arg(bin("tracer-agent"))
    .args(["--sink", "127.0.0.1:9"]);
    assert_fails_with(c, &["insufficient privileges", "CAP_BPF", "root"]);
}

#[test]
fn a_path_that_is_not_a_cgroup_is_refused() {
    if !require_root() {
        return;
    }
    let mut c = agent();
    c.args(["--cgroup", "/tmp"]);
    assert_fails_with(c, &["cgroup /tmp", "not on a cgroup v2", "--cgroup"]);
    let mut c = agent();
    c.args(["--cgroup", "/sys/fs/cgroup/unified/no-such-group"]);
    assert_fails_with(c, &["not accessible"]);
}

#[test]
fn a_kernel_without_bpf_tx_timestamping_is_refused() {
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let btf = dir.path().join("vmlinux-6.1");
    std::fs::write(&btf, b"\0tcp_sendmsg\0bpf_sock_ops_cb_flags_set\0").unwrap();
    let mut c = agent();
    c.arg("--btf").arg(&btf);
    assert_fails_with(c, &["lacks BPF TX timestamping", "6.15"]);
}

#[test]
fn unknown_probe_and_bad_options_are_refused() {
    let mut c = agent();
    c.args(["--probes", "tx,bogus"]);
    assert_fails_with(c, &["unknown probe \"bogus\"", "known probes are tx"]);
    let mut c = agent();
    c.args(["--sample-every", "0"]);
    assert_fails_with(c, &["sample-every"]);
    let (st, out, _) = run({
        let mut c = Command::new(bin("tracer-agent"));
        c.arg("--help");
        c
    });
    assert!(st.success());
    for flag in [
        "--sink",
        "--probes",
        "--cgroup",
        "--sample-every",
        "--stats-interval",
        "--json",
    ] {
        assert!(out.contains(flag), "--help lacks {flag}");
    }
}

#[test]
fn an_unknown_probe_is_refused_before_anything_is_loaded() {
    // As root loading would succeed, so only the name check can stop it.
    // Exit code 2 is clap's usage error: the name is refused while the
    // command line is parsed, before preflight, clock or BPF (other tests
    // of this file load programs concurrently, so counting loaded programs
    // here would race with them).
    let mut c = agent();
    c.args(["--probes", "bogus", "--clock-lock-timeout", "0"]);
    let (st, out, err) = run(c);
    assert_eq!(st.code(), Some(2), "usage error expected: {err}");
    for needle in ["unknown probe \"bogus\"", "known probes are", "tx"] {
        assert!(err.contains(needle), "stderr lacks {needle:?}: {err}");
    }
    assert!(!err.contains("probe attached"), "{err}");
    assert!(out.is_empty(), "no stats without a run: {out}");
}

fn prog_exists(id: u32) -> bool {
    // BPF_PROG_GET_FD_BY_ID fails with ENOENT once the program is gone.
    let (st, _, _) = run({
        let mut c = Command::new("bpftool");
        c.args(["prog", "show", "id", &id.to_string()]);
        c
    });
    st.success()
}

#[test]
fn sigint_and_sigterm_detach_and_print_final_stats() {
    if !require_root() {
        return;
    }
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let mut c = agent();
        c.args(["--json"]);
        let mut p = Proc::spawn("tracer-agent", c);
        p.wait_stderr("tx probe attached", Duration::from_secs(30));
        let line = p.stderr.last().cloned().unwrap_or_default();
        let id: u32 = line
            .split("prog_id")
            .nth(1)
            .and_then(|s| {
                s.trim_start_matches(|c: char| !c.is_ascii_digit())
                    .split(|c: char| !c.is_ascii_digit())
                    .next()
                    .and_then(|d| d.parse().ok())
            })
            .unwrap_or_else(|| panic!("no prog_id in {line:?}"));
        assert!(prog_exists(id), "program {id} not loaded while attached");
        let (st, out) = p.stop(sig, Duration::from_secs(20));
        assert!(st.success(), "exit {st} on signal {sig}");
        let v: serde_json::Value =
            serde_json::from_str(out.lines().last().unwrap_or("{}")).unwrap();
        assert_eq!(v["final"], true, "final stats missing: {out}");
        assert!(!prog_exists(id), "program {id} still loaded after exit");
    }
}

#[test]
fn an_unreachable_sink_clock_delays_nothing_beyond_the_lock_timeout() {
    if !require_root() {
        return;
    }
    let mut c = agent();
    c.args(["--clock", "sink", "--clock-lock-timeout", "1", "--json"]);
    let mut p = Proc::spawn("tracer-agent", c);
    p.wait_stderr("clock not locked yet", Duration::from_secs(20));
    p.wait_stderr("tx probe attached", Duration::from_secs(20));
    let (st, out) = p.stop(libc::SIGINT, Duration::from_secs(20));
    assert!(st.success(), "exit {st}");
    assert!(out.contains("\"final\":true"), "{out}");
}

/// Each argument error is one clear line with a non-zero exit, printed
/// once; nothing is clamped or cut silently. All of these fail while the
/// command line is checked, before anything is loaded.
#[test]
fn argument_errors_are_clear_and_nothing_is_clamped() {
    let bare = || Command::new(bin("tracer-agent"));
    let cases: Vec<(Vec<String>, Option<i32>, &str)> = vec![
        (
            vec!["--sink".into(), "no-such-host.invalid:7420".into()],
            Some(2),
            "cannot resolve host name \"no-such-host.invalid\"",
        ),
        (
            vec!["--sink".into(), "localhost".into()],
            Some(2),
            "expected HOST:PORT",
        ),
        (
            // A host name resolves; the ring size is checked while parsing too.
            vec![
                "--sink".into(),
                "localhost:7420".into(),
                "--ring-slots".into(),
                "3".into(),
            ],
            Some(2),
            "3 is not in 64..=1048576",
        ),
        (
            vec![
                "--sink".into(),
                "localhost:7420".into(),
                "--ring-slots".into(),
                "100".into(),
            ],
            Some(2),
            "100 is not a power of two",
        ),
        (
            vec![
                "--sink".into(),
                "127.0.0.1:9".into(),
                "--max-datagram".into(),
                "70000".into(),
            ],
            Some(2),
            "70000 is not in 256..=65507",
        ),
        (
            vec![
                "--sink".into(),
                "127.0.0.1:9".into(),
                "--max-datagram".into(),
                "100".into(),
            ],
            Some(2),
            "100 is not in 256..=65507",
        ),
        (
            vec![
                "--sink".into(),
                "127.0.0.1:9".into(),
                "--hostname".into(),
                "h".repeat(300),
            ],
            Some(2),
            "it is 300 bytes long; the trace carries at most 64",
        ),
        (
            vec![
                "--sink".into(),
                "127.0.0.1:9".into(),
                "--hostname".into(),
                "web\u{1b}[31m-1".into(),
            ],
            Some(2),
            "control character '\\u{1b}'",
        ),
    ];
    for (args, code, needle) in cases {
        let mut c = bare();
        c.args(&args);
        let (st, out, err) = run(c);
        assert_eq!(st.code(), code, "{args:?}: {err}");
        assert_eq!(
            err.matches(needle).count(),
            1,
            "{args:?}: want {needle:?} once in: {err}"
        );
        assert!(!err.contains("invalid socket address syntax"), "{err}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        // clap adds one "For more information, try '--help'." line.
        assert!(lines.len() <= 2, "{args:?}: {err}");
        assert!(out.is_empty(), "{out}");
    }
}
