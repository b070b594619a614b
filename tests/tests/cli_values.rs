//! Every option of every binary (tracer-agent, tracer-sink, clocksync,
//! nettrace-match) is checked while its command line is parsed: a value
//! outside the range its `--help` documents exits 2 with one line naming
//! the option, nothing is clamped, and every value it accepts runs without
//! a panic or a hang (issue 16, point 5).
//!
//! Which options are driven: each binary's `--help` is read; an option
//! whose value name is a number's (SECS, MS, N, NS, PORT, ID, BYTES, SIZE,
//! PPB, PPM, KP, KI, DURATION) must document its range as
//! `[range: LO..=HI UNIT]` or `[range: 0 or LO..=HI UNIT]`, and is run with
//! 0, -1, NaN, ±inf, 1e30, u64::MAX and the values at and just past both
//! ends of its range. Any other option with a value must be listed in
//! [`Binary::other`] with the test that covers it, so an option added
//! later cannot be forgotten: an unlisted one fails this test.
//!
//! How "accepted" is told without starting the real thing: clap runs an
//! option's value parser when it meets the option, in command-line order,
//! and stops at the first error. Each case runs `BIN --OPT=VALUE SENTINEL`,
//! where the sentinel is another option with a value that is always
//! invalid (`--probes bogus`). A refused VALUE gives an error naming
//! `--OPT`; an accepted one lets parsing go on to the sentinel, whose error
//! names the sentinel. Both exit 2 at once, before anything is loaded,
//! bound or opened, so no root is needed. A value accepted there and only
//! refused later, after parsing, counts as accepted: moving those checks
//! into parsing is what this test holds the binaries to.
//!
//! The `*_values_run` tests then run every value the range admits for
//! real (the sink, clocksync and the matcher always; the agent as root)
//! and fail on a panic, a hang or an error exit.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tracer_e2e::bins::bin;
use tracer_e2e::skip::require_root;

/// Values every numeric option is driven with.
const HOSTILE: [&str; 8] = [
    "0",
    "-1",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1e30",
    "18446744073709551615",
];

/// How long a command-line check may take before it counts as a hang.
const PARSE_TIMEOUT: Duration = Duration::from_secs(10);

/// One binary and what its checks need.
struct Binary {
    name: &'static str,
    /// Options every parse check starts with (required ones), except the
    /// one tested.
    base: &'static [(&'static str, &'static str)],
    /// Options with an always-invalid value, put after the one tested.
    sentinels: [(&'static str, &'static str); 2],
    /// Options whose value is not a number, and the test covering each.
    other: &'static [(&'static str, &'static str)],
}

const AGENT: Binary = Binary {
    name: "tracer-agent",
    base: &[("sink", "127.0.0.1:9")],
    sentinels: [("probes", "bogus"), ("filter", "port x")],
    other: &[
        ("sink", "agent_addresses_and_names_are_checked"),
        (
            "probes",
            "agent_errors::unknown_probe_and_bad_options_are_refused",
        ),
        (
            "cgroup",
            "agent_errors::a_path_that_is_not_a_cgroup_is_refused",
        ),
        (
            "filter",
            "tracer-agent filter_is_parsed_at_argument_parsing",
        ),
        ("netns", "agent_netns_must_be_a_network_namespace"),
        ("hostname", "agent_addresses_and_names_are_checked"),
        (
            "clock",
            "clock_errors::agent_refuses_a_missing_phc_device_and_a_bad_clock_name",
        ),
        ("clock-hw-iface", "interface_names_are_checked"),
        ("servo", "a closed list (pi, linreg), parsed by clap"),
        (
            "batch-send",
            "tracer-agent batch_send_is_one_of_three_modes",
        ),
        ("simulate-oscillator", "oscillator_specs_are_checked"),
        ("oscillator-truth", "a path written at start"),
        ("key-file", "tracer-agent tests/key_file.rs"),
        (
            "write",
            "e2e_write::write_traces_one_host_into_rotated_files",
        ),
        ("live-iface", "interface_names_are_checked"),
        (
            "metrics",
            "e2e_metrics (agent_metrics_options_are_checked and both scrapes)",
        ),
        (
            "metrics-with",
            "e2e_metrics::agent_metrics_options_are_checked (a closed list)",
        ),
        (
            "metrics-by",
            "e2e_metrics::agent_metrics_options_are_checked (a closed list)",
        ),
        (
            "file-prefix",
            "sink_file_prefix_is_checked (the sink's parser: tracer_sink::WriterArgs)",
        ),
        (
            "compress",
            "tracer-sink writer_args tests (a closed list, the sink's tracer_sink::WriterArgs)",
        ),
    ],
};

const SINK: Binary = Binary {
    name: "tracer-sink",
    base: &[],
    sentinels: [("clock", "bogus"), ("file-prefix", "a/b")],
    other: &[
        ("listen", "sink_listens_on_unicast_addresses_only"),
        (
            "output",
            "tracer-sink binary::an_output_path_that_is_a_file_is_refused_at_start",
        ),
        ("file-prefix", "sink_file_prefix_is_checked"),
        (
            "clock",
            "clock_errors::sink_refuses_hardware_stamps_without_a_phc_and_a_bad_clock",
        ),
        ("clock-listen", "sink_listens_on_unicast_addresses_only"),
        ("clock-hw-iface", "interface_names_are_checked"),
        (
            "compress",
            "tracer-sink binary::compress_values_are_checked",
        ),
        (
            "key-file",
            "tracer-sink binary::key_file_permissions_are_checked_and_the_key_never_printed",
        ),
        ("live-iface", "interface_names_are_checked"),
        ("live-listen", "sink_listens_on_unicast_addresses_only"),
        ("metrics", "sink_listens_on_unicast_addresses_only"),
    ],
};

const CLOCKSYNC: Binary = Binary {
    name: "clocksync",
    base: &[],
    sentinels: [("servo", "bogus"), ("pi-gains", "bogus")],
    other: &[
        ("source", "clocksync_sources_are_checked"),
        ("servo", "a closed list (pi, linreg), parsed by clap"),
        ("pi-gains", "a closed list (phc2sys, ptp4l), parsed by clap"),
        ("simulate-oscillator", "oscillator_specs_are_checked"),
        ("hw-iface", "interface_names_are_checked"),
        (
            "key-file",
            "loaded at start by tracer_auth::SharedKey::load, tested in tracer-auth",
        ),
    ],
};

const MATCH: Binary = Binary {
    name: "nettrace-match",
    base: &[],
    sentinels: [("window", "soon"), ("reorder-window", "soon")],
    other: &[
        (
            "html",
            "tracer-match cli::summary_json_and_html_of_one_trace",
        ),
        ("pairs", "tracer-match tests (a file created at start)"),
    ],
};

/// How an option's values read, from its value name.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// A real number (seconds, ppb, ppm, gains).
    Real,
    /// A whole number (counts, ms, ns, ports, ids, bytes with K/M/G/T).
    Whole,
    /// A duration with a unit; a bare number is milliseconds.
    Duration,
}

fn kind_of(value_name: &str) -> Option<Kind> {
    match value_name {
        "SECS" | "PPB" | "PPM" | "KP" | "KI" => Some(Kind::Real),
        "N" | "MS" | "NS" | "PORT" | "ID" | "BYTES" | "SIZE" => Some(Kind::Whole),
        "DURATION" => Some(Kind::Duration),
        _ => None,
    }
}

/// A value of an option, compared with its range.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
enum Val {
    Real(f64),
    Whole(i128),
}

/// What a value means for an option of `kind`: `None` if it is not a
/// value of that kind at all (e.g. "nan" for a count).
fn value_of(kind: Kind, s: &str) -> Option<Val> {
    match kind {
        Kind::Real => s.parse().ok().map(Val::Real),
        Kind::Whole => {
            let (num, mult) = match s.chars().last()? {
                'K' => (&s[..s.len() - 1], 1i128 << 10),
                'M' => (&s[..s.len() - 1], 1 << 20),
                'G' => (&s[..s.len() - 1], 1 << 30),
                'T' => (&s[..s.len() - 1], 1 << 40),
                _ => (s, 1),
            };
            let n = match num.strip_prefix("0x") {
                Some(h) => i128::from_str_radix(h, 16).ok()?,
                None => num.parse::<i128>().ok()?,
            };
            Some(Val::Whole(n * mult))
        }
        Kind::Duration => {
            let (num, per) = [("ns", 1.0), ("us", 1e3), ("ms", 1e6), ("s", 1e9)]
                .iter()
                .find_map(|&(u, per)| s.strip_suffix(u).map(|n| (n, per)))
                .unwrap_or((s, 1e6));
            num.parse::<f64>().ok().map(|v| Val::Real(v * per))
        }
    }
}

/// A documented range: `lo..=hi`, plus 0 where 0 has a meaning of its own.
#[derive(Debug, Clone)]
struct Range {
    zero: bool,
    lo: Val,
    hi: Val,
    /// LO and HI as the help writes them (the binary must take them so).
    lo_text: String,
    hi_text: String,
}

impl Range {
    fn admits(&self, v: Option<Val>) -> bool {
        let Some(v) = v else { return false };
        let is_zero = matches!(v, Val::Real(x) if x == 0.0) || v == Val::Whole(0);
        (self.zero && is_zero) || (self.lo <= v && v <= self.hi)
    }
}

/// `[range: 0 or LO..=HI UNIT]` in an option's help text.
fn range_of(kind: Kind, text: &str) -> Result<Range, String> {
    let start = text
        .find("[range: ")
        .ok_or("no `[range: LO..=HI]` in its help")?;
    let inner = &text[start + 8..];
    let inner = &inner[..inner.find(']').ok_or("unclosed `[range:`")?];
    let (zero, body) = match inner.strip_prefix("0 or ") {
        Some(b) => (true, b),
        None => (false, inner),
    };
    let bounds = body.split(' ').next().unwrap_or("");
    let (lo, hi) = bounds
        .split_once("..=")
        .ok_or_else(|| format!("`{inner}`: expected LO..=HI"))?;
    let parse = |t: &str| value_of(kind, t).ok_or_else(|| format!("`{t}` in `{inner}`"));
    Ok(Range {
        zero,
        lo: parse(lo)?,
        hi: parse(hi)?,
        lo_text: lo.to_owned(),
        hi_text: hi.to_owned(),
    })
}

/// The next f64 above `x` (finite `x`).
fn next_up(x: f64) -> f64 {
    if x == 0.0 {
        f64::from_bits(1)
    } else if x > 0.0 {
        f64::from_bits(x.to_bits() + 1)
    } else {
        f64::from_bits(x.to_bits() - 1)
    }
}

/// Values at and just past both ends of `r`, spelled for the binary.
fn edges(kind: Kind, r: &Range) -> Vec<String> {
    let mut out = vec![r.lo_text.clone(), r.hi_text.clone()];
    match (kind, r.lo, r.hi) {
        (Kind::Whole, Val::Whole(lo), Val::Whole(hi)) => {
            out.extend([lo.to_string(), hi.to_string()]);
            out.extend([(lo - 1).to_string(), (hi + 1).to_string()]);
        }
        (Kind::Real, Val::Real(lo), Val::Real(hi)) => {
            out.extend([(-next_up(-lo)).to_string(), next_up(hi).to_string()]);
        }
        (Kind::Duration, Val::Real(lo), Val::Real(hi)) => {
            if lo >= 1.0 {
                out.push(format!("{}ns", lo - 1.0));
            }
            out.push(format!("{}ns", hi + 1.0));
        }
        _ => {}
    }
    let mut unique = Vec::new();
    for v in out {
        if !unique.contains(&v) {
            unique.push(v);
        }
    }
    unique
}

/// One option of a `--help`.
#[derive(Debug)]
struct Opt {
    name: String,
    value_name: Option<String>,
    text: String,
}

/// The options of a `--help` text (long or short form), with their value
/// names and their whole help text on one line.
fn options(help: &str) -> Vec<Opt> {
    let mut out: Vec<Opt> = Vec::new();
    for line in help.lines() {
        let t = line.trim_start();
        let indent = line.len() - t.len();
        let head = t
            .strip_prefix("--")
            .or_else(|| {
                let b = t.as_bytes();
                (b.len() > 5 && b[0] == b'-' && b[1] != b'-' && &t[2..6] == ", --").then(|| &t[6..])
            })
            .filter(|_| indent < 8);
        match head {
            Some(h) => {
                let (spec, rest) = h.split_once("  ").unwrap_or((h, ""));
                let (name, value) = match spec.split_once(' ') {
                    Some((n, v)) => (n, Some(v)),
                    None => (spec, None),
                };
                let value_name = value.map(|v| v.trim_matches(|c| "[]<>.".contains(c)).to_owned());
                out.push(Opt {
                    name: name.to_owned(),
                    value_name,
                    text: rest.trim().to_owned(),
                });
            }
            None => {
                if let Some(o) = out.last_mut() {
                    if !t.is_empty() && indent >= 8 {
                        o.text.push(' ');
                        o.text.push_str(t);
                    }
                }
            }
        }
    }
    out
}

/// A child's end: its status (None: killed after `timeout`) and stderr.
fn run_bounded(mut cmd: Command, timeout: Duration) -> (Option<ExitStatus>, String, String) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("NO_COLOR", "1");
    let mut child = cmd.spawn().expect("spawn");
    let status = wait_until(&mut child, timeout);
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let (out, err) = outputs(&mut child);
    (status, out, err)
}

fn wait_until(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return Some(st);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn outputs(child: &mut Child) -> (String, String) {
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    (out, err)
}

/// True when a clap error in `err` is about `--name`.
fn names(err: &str, name: &str) -> bool {
    err.contains(&format!("'--{name} <")) || err.contains(&format!("'--{name}'"))
}

/// The help of `b`, its options, and every failure of the ones it lists.
fn read_options(b: &Binary, failures: &mut Vec<String>) -> Vec<(Opt, Kind, Range)> {
    let mut c = Command::new(bin(b.name));
    c.arg("--help");
    let (st, help, err) = run_bounded(c, PARSE_TIMEOUT);
    assert!(st.is_some_and(|s| s.success()), "{} --help: {err}", b.name);
    let opts = options(&help);
    assert!(opts.len() > 5, "{} --help read as {opts:?}", b.name);
    let opts_names: Vec<String> = opts.iter().map(|o| o.name.clone()).collect();
    let mut numeric = Vec::new();
    for o in opts {
        let Some(vn) = o.value_name.clone() else {
            continue;
        };
        let listed = b.other.iter().any(|(n, _)| *n == o.name);
        match (kind_of(&vn), listed) {
            (Some(_), true) => failures.push(format!(
                "{} --{}: value <{vn}> is a number's, yet it is listed as not numeric",
                b.name, o.name
            )),
            (None, false) => failures.push(format!(
                "{} --{} <{vn}>: neither a numeric value name ({}) nor listed in `other` with the test that covers it",
                b.name,
                o.name,
                "SECS, MS, N, NS, PORT, ID, BYTES, SIZE, PPB, PPM, KP, KI, DURATION"
            )),
            (None, true) => {}
            (Some(kind), false) => match range_of(kind, &o.text) {
                Ok(r) => numeric.push((o, kind, r)),
                Err(e) => failures.push(format!("{} --{}: {e}: {}", b.name, o.name, o.text)),
            },
        }
    }
    for (n, _) in b.other {
        // A stale entry hides nothing new, but it lies about coverage.
        if !opts_names.iter().any(|o| o == n) {
            failures.push(format!(
                "{} --{n} is listed in `other` but not in --help",
                b.name
            ));
        }
    }
    numeric
}

/// `b` with its base options, `--name=value`, then the sentinel `--sn=sv`.
fn parse_command(b: &Binary, name: &str, value: &str, sn: &str, sv: &str) -> Command {
    let mut c = Command::new(bin(b.name));
    for (n, v) in b.base.iter().filter(|(n, _)| *n != name) {
        c.arg(format!("--{n}={v}"));
    }
    c.arg(format!("--{name}={value}"))
        .arg(format!("--{sn}={sv}"));
    c
}

/// Whether `b` accepts `--name=value` while parsing (Ok(true): accepted,
/// Ok(false): refused with one line naming the option), or what went wrong.
fn parse_check(b: &Binary, name: &str, value: &str) -> Result<bool, String> {
    let (sn, sv) = b
        .sentinels
        .iter()
        .find(|(n, _)| *n != name)
        .expect("two sentinels");
    let (st, out, err) = run_bounded(parse_command(b, name, value, sn, sv), PARSE_TIMEOUT);
    let case = format!("{} --{name}={value}", b.name);
    let Some(st) = st else {
        return Err(format!("{case}: hung (killed after {PARSE_TIMEOUT:?})"));
    };
    if err.contains("panicked") || st.code() == Some(101) {
        return Err(format!("{case}: panicked: {err}"));
    }
    if st.code() != Some(2) {
        return Err(format!("{case}: exit {st}, not 2 (a usage error): {err}"));
    }
    if !out.is_empty() {
        return Err(format!("{case}: wrote to stdout: {out}"));
    }
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    // clap's error line, then its "For more information, try '--help'."
    if lines.len() > 2 || !lines.first().is_some_and(|l| l.starts_with("error: ")) {
        return Err(format!("{case}: not one clear error line: {err}"));
    }
    if names(&err, name) {
        Ok(false)
    } else if names(&err, sn) {
        Ok(true)
    } else {
        Err(format!(
            "{case}: the error names neither --{name} nor --{sn}: {err}"
        ))
    }
}

/// Drive every numeric option of `b` through the parse checks; returns
/// the failures.
fn check_binary(b: &Binary) -> Vec<String> {
    let mut failures = Vec::new();
    let numeric = read_options(b, &mut failures);
    let mut cases = 0;
    for (o, kind, r) in &numeric {
        let values = HOSTILE.iter().map(|s| s.to_string()).chain(edges(*kind, r));
        for v in values {
            cases += 1;
            let expect = r.admits(value_of(*kind, &v));
            match parse_check(b, &o.name, &v) {
                Err(e) => failures.push(e),
                Ok(got) if got != expect => failures.push(format!(
                    "{} --{}={v}: {} though its help says [range: {}{}..={}]",
                    b.name,
                    o.name,
                    if got { "accepted" } else { "refused" },
                    if r.zero { "0 or " } else { "" },
                    r.lo_text,
                    r.hi_text
                )),
                Ok(_) => {}
            }
        }
    }
    eprintln!(
        "{}: {} numeric options, {cases} values checked",
        b.name,
        numeric.len()
    );
    failures
}

fn assert_none(failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn agent_options_are_checked_at_parse_time() {
    assert_none(check_binary(&AGENT));
}

#[test]
fn sink_options_are_checked_at_parse_time() {
    assert_none(check_binary(&SINK));
}

#[test]
fn clocksync_options_are_checked_at_parse_time() {
    assert_none(check_binary(&CLOCKSYNC));
}

#[test]
fn match_options_are_checked_at_parse_time() {
    assert_none(check_binary(&MATCH));
}

/// The values `b`'s documented ranges admit, per option (from `--help`
/// alone: the parse tests check that the binary agrees).
fn admitted_values(b: &Binary) -> Vec<(String, Vec<String>)> {
    let mut failures = Vec::new();
    let numeric = read_options(b, &mut failures);
    assert_none(failures);
    numeric
        .iter()
        .map(|(o, kind, r)| {
            let vals: Vec<String> = HOSTILE
                .iter()
                .map(|s| s.to_string())
                .chain(edges(*kind, r))
                .filter(|v| r.admits(value_of(*kind, v)))
                .collect();
            (o.name.clone(), vals)
        })
        .collect()
}

/// Outcome of a real run that must end by itself.
fn ran_cleanly(case: &str, st: Option<ExitStatus>, err: &str) -> Option<String> {
    match st {
        None => Some(format!("{case}: hung")),
        Some(_) if err.contains("panicked") => Some(format!("{case}: panicked: {err}")),
        Some(s) if !s.success() => Some(format!("{case}: exit {s}: {err}")),
        Some(_) => None,
    }
}

/// Start `cmd`, wait for `ready` on stderr (or an exit), then stop it with
/// `sig` and require a clean exit; returns a failure, if any.
fn run_until_ready_then_stop(
    case: &str,
    mut cmd: Command,
    ready: &str,
    sig: i32,
    timeout: Duration,
) -> Option<String> {
    use std::io::{BufRead, BufReader};
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info");
    let mut child = cmd.spawn().expect("spawn");
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut log = String::new();
    let deadline = Instant::now() + timeout;
    let mut saw_ready = false;
    while Instant::now() < deadline && !saw_ready {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(l) => {
                saw_ready = l.contains(ready);
                log.push_str(&l);
                log.push('\n');
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if let Ok(Some(st)) = child.try_wait() {
                    let _ = reader.join();
                    log.extend(rx.try_iter().map(|l| l + "\n"));
                    return Some(format!("{case}: exited ({st}) before {ready:?}:\n{log}"));
                }
            }
            Err(_) => break,
        }
    }
    if !saw_ready {
        let _ = child.kill();
        let _ = child.wait();
        return Some(format!("{case}: no {ready:?} within {timeout:?}:\n{log}"));
    }
    // SAFETY: kill(2) on the pid of a child this test spawned and has not reaped.
    unsafe { libc::kill(child.id() as i32, sig) };
    let st = wait_until(&mut child, Duration::from_secs(30));
    if st.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = reader.join();
    log.extend(rx.try_iter().map(|l| l + "\n"));
    ran_cleanly(case, st, &log).map(|e| format!("{e} (stopped by signal {sig})"))
}

#[test]
fn sink_values_run() {
    let mut failures = Vec::new();
    let mut runs = 0;
    for (name, values) in admitted_values(&SINK) {
        for v in values {
            runs += 1;
            let dir = tempfile::tempdir().unwrap();
            let mut c = Command::new(bin("tracer-sink"));
            // The live stream too (--live-max-clients requires it).
            c.args(["--listen", "127.0.0.1:0", "--clock-listen", "127.0.0.1:0"])
                .args(["--live-listen", "127.0.0.1:0"])
                .arg("--output")
                .arg(dir.path())
                .arg(format!("--{name}={v}"));
            let case = format!("tracer-sink --{name}={v}");
            failures.extend(run_until_ready_then_stop(
                &case,
                c,
                "tracer-sink started",
                libc::SIGTERM,
                Duration::from_secs(20),
            ));
        }
    }
    eprintln!("tracer-sink: {runs} accepted values run for real");
    assert_none(failures);
}

#[test]
fn clocksync_values_run() {
    let mut failures = Vec::new();
    let mut runs = 0;
    for (name, values) in admitted_values(&CLOCKSYNC) {
        for v in values {
            runs += 1;
            let mut c = Command::new(bin("clocksync"));
            // One update and no wait after it, whatever the interval.
            if name != "count" {
                c.args(["--count", "1"]);
            }
            if name != "interval" {
                c.args(["--interval", "0.01"]);
            }
            c.arg(format!("--{name}={v}"));
            let case = format!("clocksync --{name}={v}");
            let endless = name == "count" && v.parse::<u64>().is_ok_and(|n| n == 0 || n > 100);
            let (st, _, err) = run_bounded(c, Duration::from_secs(if endless { 2 } else { 20 }));
            let failure = if endless {
                // Runs until killed, as documented: it must still be running.
                st.map(|s| format!("{case}: should run until killed, exited {s}: {err}"))
            } else {
                ran_cleanly(&case, st, &err)
            };
            failures.extend(failure);
        }
    }
    eprintln!("clocksync: {runs} accepted values run for real");
    assert_none(failures);
}

#[test]
fn match_values_run() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = tracer_testdata::synth::SynthConfig {
        skbs: 200,
        both_ways: true,
        ..Default::default()
    };
    tracer_testdata::synth::write_trace(dir.path(), &cfg, Default::default()).unwrap();
    let mut failures = Vec::new();
    let mut runs = 0;
    for (name, values) in admitted_values(&MATCH) {
        for v in values {
            runs += 1;
            let mut c = Command::new(bin("nettrace-match"));
            c.arg(format!("--{name}={v}")).arg(dir.path());
            let (st, _, err) = run_bounded(c, Duration::from_secs(60));
            failures.extend(ran_cleanly(
                &format!("nettrace-match --{name}={v}"),
                st,
                &err,
            ));
        }
    }
    eprintln!("nettrace-match: {runs} accepted values run for real");
    assert_none(failures);
}

#[test]
fn agent_values_run() {
    if !require_root() {
        return;
    }
    let mut failures = Vec::new();
    let mut runs = 0;
    let out = tempfile::tempdir().unwrap();
    let write_only = options_under("Writing files (with --write):");
    assert!(
        write_only.iter().any(|o| o == "rotate-size"),
        "{write_only:?}"
    );
    let metrics_only = options_under("Metrics (with --metrics):");
    assert!(
        metrics_only.iter().any(|o| o == "metrics-max-series"),
        "{metrics_only:?}"
    );
    for (name, values) in admitted_values(&AGENT) {
        for v in values {
            runs += 1;
            let mut c = Command::new(bin("tracer-agent"));
            if write_only.contains(&name.to_string()) {
                c.arg("--write").arg(out.path());
            } else {
                c.args(["--sink", "127.0.0.1:9"]);
            }
            if metrics_only.contains(&name.to_string()) {
                c.args(["--metrics", "127.0.0.1:19439", "--metrics-with", "drops"]);
            }
            c.args(["--probes", "tx"]);
            if name != "clock-lock-timeout" {
                c.args(["--clock-lock-timeout", "0"]);
            }
            c.arg(format!("--{name}={v}"));
            let case = format!("tracer-agent --{name}={v}");
            failures.extend(run_until_ready_then_stop(
                &case,
                c,
                "probe attached",
                libc::SIGINT,
                Duration::from_secs(60),
            ));
        }
    }
    eprintln!("tracer-agent: {runs} accepted values run for real");
    assert_none(failures);
}

/// The agent's options that apply only with another (`--write`,
/// `--metrics`): those its --help lists under `heading`.
fn options_under(heading: &str) -> Vec<String> {
    let (_, help, _) = tracer_e2e::procs::run({
        let mut c = Command::new(bin("tracer-agent"));
        c.arg("--help");
        c
    });
    help.lines()
        .skip_while(|l| !l.starts_with(heading))
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .filter_map(|l| l.trim_start().strip_prefix("--"))
        .filter_map(|l| l.split([' ', '=']).next())
        .map(str::to_owned)
        .collect()
}

/// Run `b` with `args` and the first sentinel; `Ok(())` when refused with
/// one line naming `--name` and holding every needle.
fn refused(b: &Binary, name: &str, value: &str, needles: &[&str]) -> Result<(), String> {
    let (sn, sv) = b
        .sentinels
        .iter()
        .find(|(n, _)| *n != name)
        .expect("sentinel");
    let (st, _, err) = run_bounded(parse_command(b, name, value, sn, sv), PARSE_TIMEOUT);
    let case = format!("{} --{name}={value:?}", b.name);
    if st.and_then(|s| s.code()) != Some(2) || !names(&err, name) {
        return Err(format!("{case}: not refused at parse time ({st:?}): {err}"));
    }
    match needles.iter().find(|n| !err.contains(*n)) {
        Some(n) => Err(format!("{case}: error lacks {n:?}: {err}")),
        None => Ok(()),
    }
}

/// Run `b` with `--name=value`: `Ok(())` when it passes parsing.
fn accepted(b: &Binary, name: &str, value: &str) -> Result<(), String> {
    match parse_check(b, name, value)? {
        true => Ok(()),
        false => Err(format!("{} --{name}={value:?} refused", b.name)),
    }
}

#[test]
fn agent_addresses_and_names_are_checked() {
    let mut failures = Vec::new();
    for sink in ["127.0.0.1:0", "[::1]:0", "localhost:0"] {
        failures.extend(refused(&AGENT, "sink", sink, &["port 0"]).err());
    }
    failures.extend(refused(&AGENT, "sink", "sink\u{202e}bal.example:7420", &["U+202E"]).err());
    failures.extend(accepted(&AGENT, "sink", "localhost:7420").err());
    for c in [
        '\u{61c}', '\u{200e}', '\u{200f}', '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}',
        '\u{202e}', '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}',
    ] {
        let name = format!("web{c}1");
        let code = format!("U+{:04X}", u32::from(c));
        failures.extend(refused(&AGENT, "hostname", &name, &[&code, "bidirectional"]).err());
    }
    failures.extend(accepted(&AGENT, "hostname", "web-1").err());
    assert_none(failures);
}

#[test]
fn agent_netns_must_be_a_network_namespace() {
    let mut failures = Vec::new();
    for (path, needles) in [
        ("/dev/zero", &["/dev/zero", "not a namespace"][..]),
        (
            "/proc/self/ns/mnt",
            &["mount namespace", "not a network namespace"][..],
        ),
        ("/proc/self/ns/uts", &["UTS namespace"][..]),
        ("/no/such/netns", &["cannot open"][..]),
        ("/tmp", &["not a namespace"][..]),
    ] {
        failures.extend(refused(&AGENT, "netns", path, needles).err());
    }
    failures.extend(accepted(&AGENT, "netns", "/proc/self/ns/net").err());
    assert_none(failures);
}

#[test]
fn sink_listens_on_unicast_addresses_only() {
    let mut failures = Vec::new();
    for opt in ["listen", "clock-listen", "live-listen", "metrics"] {
        for (addr, needle) in [
            ("224.0.0.1:9000", "multicast"),
            ("255.255.255.255:9000", "broadcast"),
            ("[ff02::1]:9000", "multicast"),
            ("sink.lab:7420", "IP:PORT"),
        ] {
            failures.extend(refused(&SINK, opt, addr, &[needle]).err());
        }
        // Port 0: the kernel picks a free port (tests rely on it).
        for addr in ["0.0.0.0:7420", "127.0.0.1:0", "[::]:7420"] {
            failures.extend(accepted(&SINK, opt, addr).err());
        }
    }
    assert_none(failures);
}

#[test]
fn sink_file_prefix_is_checked() {
    let mut failures = Vec::new();
    for (p, needle) in [
        ("", "1 to 128 bytes"),
        ("x/y", "'/'"),
        ("trace\u{202e}gnpcap", "U+202E"),
        ("t\u{7}x", "control character"),
    ] {
        failures.extend(refused(&SINK, "file-prefix", p, &[needle]).err());
    }
    failures.extend(accepted(&SINK, "file-prefix", "lab-1").err());
    assert_none(failures);
}

#[test]
fn interface_names_are_checked() {
    let mut failures = Vec::new();
    for (b, opt) in [
        (&AGENT, "clock-hw-iface"),
        (&SINK, "clock-hw-iface"),
        (&SINK, "live-iface"),
        (&AGENT, "live-iface"),
        (&CLOCKSYNC, "hw-iface"),
    ] {
        for bad in ["", "a-sixteen-bytes!", "eth0/x", "e\u{202e}th0"] {
            failures.extend(refused(b, opt, bad, &[]).err());
        }
        failures.extend(accepted(b, opt, "eth0").err());
    }
    assert_none(failures);
}

#[test]
fn oscillator_specs_are_checked() {
    let mut failures = Vec::new();
    for b in [&AGENT, &CLOCKSYNC] {
        for bad in [
            "nan,0",
            "0,nan",
            "0,inf",
            "1e30,0",
            "18446744073709551615,0",
            "9223372036854775807,0",
            "0,0,nan",
            "0,0,0,inf",
            "0,0,0,0,-1",
        ] {
            failures.extend(refused(b, "simulate-oscillator", bad, &[]).err());
        }
        failures.extend(accepted(b, "simulate-oscillator", "3000000,50,5,20").err());
    }
    assert_none(failures);
}

#[test]
fn clocksync_sources_are_checked() {
    let mut failures = Vec::new();
    for bad in [
        "sink:127.0.0.1:0",
        "sim:freq_ppm=nan",
        "sim:offset_ns=1e30",
        "sim:delay_ns=-1",
        "sim:reads=18446744073709551615",
        "sim:wander_ppb=inf",
    ] {
        failures.extend(refused(&CLOCKSYNC, "source", bad, &[]).err());
    }
    for ok in ["tai", "sink:127.0.0.1:7421", "sim:freq_ppm=50,reads=3"] {
        failures.extend(accepted(&CLOCKSYNC, "source", ok).err());
    }
    assert_none(failures);
}

#[test]
fn the_help_parser_reads_both_forms() {
    let long = "Options:\n      --sink <HOST:PORT>\n          Address.\n          More [range: 1..=2]\n\n  -h, --help\n          Print help\n";
    let o = options(long);
    assert_eq!(o.len(), 2, "{o:?}");
    assert_eq!(o[0].name, "sink");
    assert_eq!(o[0].value_name.as_deref(), Some("HOST:PORT"));
    assert!(o[0].text.contains("[range: 1..=2]"), "{}", o[0].text);
    assert_eq!(o[1].name, "help");
    let short =
        "      --window <DURATION>  Matching window [range: 1us..=86400s] [default: 250ms]\n";
    let o = options(short);
    let r = range_of(Kind::Duration, &o[0].text).unwrap();
    assert_eq!((r.lo, r.hi), (Val::Real(1e3), Val::Real(86_400e9)));
    assert!(!r.admits(value_of(Kind::Duration, "0")));
    assert!(r.admits(value_of(Kind::Duration, "250")));
    let r = range_of(Kind::Whole, "x [range: 0 or 64K..=512M]").unwrap();
    assert!(r.admits(Some(Val::Whole(0))) && !r.admits(Some(Val::Whole(1))));
    assert_eq!(edges(Kind::Whole, &r)[4..], ["65535", "536870913"]);
    let r = range_of(Kind::Real, "[range: 0.01..=3600 s]").unwrap();
    assert!(!r.admits(value_of(Kind::Real, "nan")));
    assert!(!r.admits(value_of(Kind::Real, &edges(Kind::Real, &r)[2])));
}
