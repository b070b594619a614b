//! The `nettrace-match` binary on synthetic traces: the summary, `--json`
//! and `--html` of one run agree, inputs may be directories, and bad
//! inputs fail with a message that names them.

use std::process::Command;

use tracer_match::synth::{write_trace, FileLayout, SynthConfig};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nettrace-match"))
}

#[test]
fn summary_json_and_html_of_one_trace() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SynthConfig {
        skbs: 500,
        both_ways: true,
        clock_offset_ns: [0, -40_000],
        ..SynthConfig::default()
    };
    let (files, events) = write_trace(
        dir.path(),
        &cfg,
        FileLayout {
            events_per_file: Some(2000),
            per_host: false,
        },
    )
    .unwrap();
    assert!(files.len() > 2);
    let html = dir.path().join("r.html");

    let out = bin()
        .arg("--html")
        .arg(&html)
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for want in [
        "alpha → beta",
        "beta → alpha",
        "VIOLATIONS",
        "EXCLUDES 0",
        "CONTRADICTED",
        &format!("{events} events"),
    ] {
        assert!(text.contains(want), "no `{want}` in:\n{text}");
    }

    let out = bin().arg("--json").args(&files).output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["input"]["events"], events);
    let dirs = v["directions"].as_array().unwrap();
    assert_eq!(dirs.len(), 2);
    let ab = dirs.iter().find(|d| d["sender"] == "alpha").unwrap();
    assert_eq!(ab["violations"]["count"], ab["matched"]);
    assert_eq!(v["pairs"][0]["contains_zero"], false);
    assert_eq!(v["slowest"].as_array().unwrap().len(), 20);

    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert_eq!(
        page.matches("<svg").count(),
        5,
        "offset line, one-way CDF, two hosts, timeline"
    );
    assert!(page.contains("excludes 0"));
}

#[test]
fn bad_inputs_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = bin()
        .arg(dir.path().join("missing.pcapng"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("missing.pcapng"), "{err}");

    let out = bin().arg(dir.path()).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no .pcapng or .pcapng.zst files"));

    // A damaged file beside a good trace is reported, not fatal; alone,
    // with not one event read, it fails and names the file.
    let junk = dir.path().join("junk.pcapng");
    std::fs::write(&junk, b"this is not a trace at all").unwrap();
    let good = dir.path().join("good");
    std::fs::create_dir(&good).unwrap();
    let cfg = SynthConfig {
        skbs: 50,
        ..SynthConfig::default()
    };
    write_trace(&good, &cfg, FileLayout::default()).unwrap();
    let out = bin().arg(&good).arg(&junk).output().unwrap();
    assert!(
        out.status.success(),
        "a damaged file is reported, not fatal: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("warning") && text.contains("junk.pcapng"),
        "{text}"
    );
    let out = bin().arg(&junk).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no nettrace event") && err.contains("junk.pcapng"),
        "{err}"
    );

    let out = bin()
        .args(["--window", "soon"])
        .arg(&junk)
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn inputs_without_a_single_event_fail_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pcapng");
    std::fs::write(
        &junk,
        (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    for i in 0..20 {
        std::fs::write(empty.join(format!("t{i}.pcapng")), b"").unwrap();
    }
    for input in [&junk, &empty] {
        let out = bin().arg(input).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{}: exit 0, stderr {err}",
            input.display()
        );
        assert!(err.contains("nettrace-match:"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}
