//! The Debian package built by scripts/package.sh, installed on this
//! machine with dpkg: tshark knows the nettrace protocol without `-X` and
//! decodes a trace with the installed plugin, the extcap interface is
//! listed, `man tracer-agent` renders, systemd accepts both units, the
//! options shipped in /etc/default parse, the completions load in bash,
//! nothing is enabled; then `dpkg --purge` leaves none of its files behind.
//!
//! Alone in its own test binary, with one test, on purpose: while the
//! package is installed its Lua plugin sits in Wireshark's global plugin
//! folder, so a tshark started with `-X lua_script:` by any other test
//! would register the dissector twice and fail to load it. `cargo test`
//! runs test binaries one after another, so nothing else runs meanwhile.
//! The package is purged on the way out, pass or fail (a guard), and one
//! left installed by a killed earlier run is purged first.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use tracer_e2e::bins::{bin, repo_root};
use tracer_e2e::procs::run;
use tracer_e2e::skip::{require_root, skip};
use tracer_e2e::tshark::{Tshark, ERROR_FILTER};

const PACKAGE: &str = "nettrace";
/// Every binary the package ships, each with a man page and completions.
const BINARIES: [&str; 5] = [
    "tracer-agent",
    "tracer-sink",
    "nettrace-match",
    "clocksync",
    "nettrace-extcap",
];
const UNITS: [&str; 2] = ["nettrace-agent.service", "nettrace-sink.service"];

fn installed() -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", PACKAGE])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

fn purge() -> (std::process::ExitStatus, String, String) {
    let mut c = Command::new("dpkg");
    c.args(["--purge", PACKAGE]);
    run(c)
}

/// Purges the package when dropped, so a failed check cannot leave the
/// plugin installed for the tests that come after.
struct PurgeGuard;

impl Drop for PurgeGuard {
    fn drop(&mut self) {
        if installed() {
            let (st, _, err) = purge();
            if !st.success() {
                eprintln!("cleanup: dpkg --purge {PACKAGE} failed ({st}): {err}");
            }
        }
    }
}

/// The first program of `names` missing from PATH.
fn missing_tool(names: &[&'static str]) -> Option<&'static str> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    names
        .iter()
        .copied()
        .find(|n| !std::env::split_paths(&path).any(|d| d.join(n).is_file()))
}

/// `tshark -G folders`: the folder named `what` (e.g. "Global Lua Plugins").
fn tshark_folder(tshark: &Tshark, home: &Path, what: &str) -> PathBuf {
    let out = tshark_in(tshark, home, &["-G", "folders"]);
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{what}:")))
        .map(|p| PathBuf::from(p.trim()))
        .unwrap_or_else(|| panic!("no {what:?} in tshark -G folders:\n{out}"))
}

/// tshark run with an empty HOME (no personal plugin can answer for the
/// installed one); fails on an error exit or any Lua message on stderr,
/// since tshark exits 0 when a Lua plugin fails to load.
fn tshark_in(tshark: &Tshark, home: &Path, args: &[&str]) -> String {
    let mut c = Command::new(tshark.exe());
    c.args(args)
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("WIRESHARK_PLUGIN_DIR")
        .env_remove("WIRESHARK_EXTCAP_DIR");
    let (st, out, err) = run(c);
    assert!(st.success(), "tshark {args:?}: {st}: {err}");
    assert!(!err.contains("Lua"), "tshark {args:?}: {err}");
    out
}

#[test]
fn the_package_installs_works_and_purges_cleanly() {
    if !require_root() {
        return;
    }
    let Some(tshark) = Tshark::or_skip("the_package_installs_works_and_purges_cleanly") else {
        return;
    };
    let tools = [
        "dpkg",
        "dpkg-deb",
        "dpkg-shlibdeps",
        "man",
        "systemd-analyze",
        "systemctl",
        "bash",
    ];
    if let Some(tool) = missing_tool(&tools) {
        skip(&format!("{tool} not found (scripts/setup.sh installs it)"));
        return;
    }
    let _guard = PurgeGuard;
    if installed() {
        let (st, _, err) = purge();
        assert!(
            st.success(),
            "purging a package left by an earlier run: {err}"
        );
    }

    // The binaries this test run built: no second build, and the package
    // ships exactly what the other tests exercised. zstd: seconds, where
    // xz takes half a minute on debug binaries.
    let bin_dir = bin("tracer-agent")
        .parent()
        .expect("a binary lives in a folder")
        .to_path_buf();
    let mut c = Command::new(repo_root().join("scripts/package.sh"));
    c.env("PROFILE", "debug")
        .env("BIN_DIR", &bin_dir)
        .env("DEB_COMPRESS", "zstd");
    let (st, out, err) = run(c);
    assert!(st.success(), "scripts/package.sh: {st}: {err}");
    let deb = repo_root().join(out.lines().last().expect("the .deb's path, last"));
    assert!(deb.is_file(), "{} is no file: {out}", deb.display());

    let mut c = Command::new("dpkg");
    c.arg("-i").arg(&deb);
    let (st, _, err) = run(c);
    assert!(st.success(), "dpkg -i {}: {err}", deb.display());
    let mut c = Command::new("dpkg");
    c.args(["-L", PACKAGE]);
    let (st, listed, err) = run(c);
    assert!(st.success(), "dpkg -L: {err}");
    let listed: Vec<PathBuf> = listed.lines().map(PathBuf::from).collect();

    let home = tempfile::tempdir().expect("tempdir");
    check_wireshark(&tshark, home.path(), &listed);
    check_man_pages();
    check_units_and_defaults();
    check_completions();

    let (st, _, err) = purge();
    assert!(st.success(), "dpkg --purge: {err}");
    assert!(!installed(), "still installed after --purge");
    check_all_gone(&listed);
}

/// The plugin folder and the extcap program where this tshark looks, and
/// both in use without `-X` or a personal plugin.
fn check_wireshark(tshark: &Tshark, home: &Path, listed: &[PathBuf]) {
    let lua_dir = tshark_folder(tshark, home, "Global Lua Plugins").join("nettrace");
    let source = repo_root().join("wireshark/nettrace");
    let want: Vec<PathBuf> = walk(&source)
        .into_iter()
        .map(|p| lua_dir.join(p.strip_prefix(&source).expect("under the source")))
        .collect();
    assert!(!want.is_empty());
    for p in &want {
        assert!(listed.contains(p), "{} not in the package", p.display());
        assert!(p.is_file(), "{} not installed", p.display());
    }
    let extcap = tshark_folder(tshark, home, "Extcap path").join("nettrace-extcap");
    assert!(
        listed.contains(&extcap),
        "{} not in the package",
        extcap.display()
    );

    // "<name>\t<short name>\t<filter name>" per protocol.
    let protocols = tshark_in(tshark, home, &["-G", "protocols"]);
    assert!(
        protocols
            .lines()
            .any(|l| l.split('\t').nth(2) == Some("nettrace")),
        "tshark -G protocols lacks nettrace"
    );
    // tshark runs every extcap program in its folder to list interfaces.
    let interfaces = tshark_in(tshark, home, &["-D"]);
    assert!(
        interfaces.lines().any(|l| l.contains(". nettrace")),
        "tshark -D lacks the extcap interface nettrace:\n{interfaces}"
    );

    // A small trace, decoded by the installed plugin alone.
    let traces = tempfile::tempdir().expect("tempdir");
    let cfg = tracer_testdata::synth::SynthConfig {
        skbs: 20,
        ..Default::default()
    };
    let (files, events) =
        tracer_testdata::synth::write_trace(traces.path(), &cfg, Default::default())
            .expect("synthetic trace");
    assert!(events > 0 && !files.is_empty());
    let mut frames = 0;
    for f in &files {
        let file = f.to_str().expect("a UTF-8 temporary path");
        let rows = tshark_in(
            tshark,
            home,
            &["-n", "-r", file, "-T", "fields", "-e", "nettrace.event_seq"],
        );
        for row in rows.lines() {
            assert!(
                !row.is_empty(),
                "{file}: a frame without nettrace.event_seq"
            );
            frames += 1;
        }
        let flagged = tshark_in(
            tshark,
            home,
            &[
                "-n",
                "-r",
                file,
                "-Y",
                ERROR_FILTER,
                "-T",
                "fields",
                "-e",
                "frame.number",
            ],
        );
        assert!(
            flagged.trim().is_empty(),
            "{file}: frames flagged: {flagged}"
        );
    }
    assert_eq!(frames, events, "one decoded frame per event written");
}

/// Every file under `dir`, recursively.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let p = entry.expect("dir entry").path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn check_man_pages() {
    for b in BINARIES {
        let mut c = Command::new("man");
        c.args(["-P", "cat", b]).env("MANWIDTH", "100");
        let (st, page, err) = run(c);
        // A minimized Debian image has a stub `man` and drops pages on
        // install (path-exclude in /etc/dpkg/dpkg.cfg.d): unminimize it.
        assert!(st.success() && !page.is_empty(), "man {b}: {st}: {err}");
        assert!(page.contains(b), "man {b} does not name it:\n{page}");
    }
    let mut c = Command::new("man");
    c.args(["-P", "cat", "tracer-agent"]);
    let (_, page, _) = run(c);
    assert!(page.contains("--metrics"), "man tracer-agent:\n{page}");
}

fn check_units_and_defaults() {
    let unit_dir = Path::new("/usr/lib/systemd/system");
    let mut c = Command::new("systemd-analyze");
    c.arg("verify").args(UNITS.map(|u| unit_dir.join(u)));
    let (st, out, err) = run(c);
    // It also checks that ExecStart's program and the man pages the units
    // document exist.
    assert!(st.success(), "systemd-analyze verify: {st}: {out}{err}");
    let complaints: Vec<&str> = err.lines().filter(|l| l.contains("nettrace")).collect();
    assert!(
        complaints.is_empty(),
        "systemd-analyze verify: {complaints:#?}"
    );

    // Off until enabled: no unit is wanted by any target.
    for u in UNITS {
        let mut c = Command::new("systemctl");
        c.args(["is-enabled", u]);
        let (_, state, _) = run(c);
        assert_eq!(state.trim(), "disabled", "{u} after installation");
    }

    let mut c = Command::new("dpkg-query");
    c.args(["-W", "-f=${Conffiles}", PACKAGE]);
    let (_, conffiles, _) = run(c);
    for f in ["/etc/default/nettrace-agent", "/etc/default/nettrace-sink"] {
        assert!(conffiles.contains(f), "{f} not a conffile: {conffiles}");
    }

    // The options shipped in /etc/default, split as the units split them
    // (sh), parse: a sentinel with a bad value put after them is what the
    // binary refuses, so everything before it was accepted.
    for (file, var, binary, sentinel) in [
        (
            "nettrace-agent",
            "AGENT_OPTIONS",
            "tracer-agent",
            "--probes",
        ),
        ("nettrace-sink", "SINK_OPTIONS", "tracer-sink", "--clock"),
    ] {
        let script = format!(
            ". /etc/default/{file}; eval \"exec /usr/bin/{binary} ${var} {sentinel}=bogus\""
        );
        let mut c = Command::new("sh");
        c.args(["-c", &script]);
        let (st, _, err) = run(c);
        assert_eq!(st.code(), Some(2), "{file}: {err}");
        assert!(
            err.contains(&format!("'{sentinel} <")),
            "{file}: an option before the sentinel was refused: {err}"
        );
    }
}

fn check_completions() {
    for b in BINARIES {
        let file = format!("/usr/share/bash-completion/completions/{b}");
        let mut c = Command::new("bash");
        c.args(["-c", &format!("source {file} && complete -p {b}")]);
        let (st, out, err) = run(c);
        assert!(st.success(), "{file}: {err}");
        assert!(out.trim_end().ends_with(&format!(" {b}")), "{out}");
        for other in [
            format!("/usr/share/zsh/vendor-completions/_{b}"),
            format!("/usr/share/fish/vendor_completions.d/{b}.fish"),
        ] {
            assert!(Path::new(&other).is_file(), "{other} not installed");
        }
    }
}

/// After the purge: every path `dpkg -L` listed is gone, except folders
/// that still hold other packages' files or belong to other packages too
/// (/usr/bin, /etc/default...). Anything named after nettrace must go.
fn check_all_gone(listed: &[PathBuf]) {
    let mut left = BTreeSet::new();
    for p in listed {
        if p.symlink_metadata().is_err() {
            continue;
        }
        let ours = p.to_string_lossy().contains("nettrace");
        let shared = p.is_dir()
            && !ours
            && (std::fs::read_dir(p).is_ok_and(|mut d| d.next().is_some()) || {
                let mut c = Command::new("dpkg-query");
                c.arg("-S").arg(p);
                run(c).0.success()
            });
        if !shared {
            left.insert(p.display().to_string());
        }
    }
    assert!(left.is_empty(), "left after dpkg --purge: {left:#?}");
}
