//! The `nettrace-match` binary on synthetic traces: the summary, `--json`
//! and `--html` of one run agree, inputs may be directories, and bad
//! inputs fail with a message that names them.

use std::process::Command;

use tracer_codec::CpuEvent;
use tracer_match::input::Ev;
use tracer_testdata::synth::{write_trace, FileLayout, SynthConfig, SynthEvent, SynthWriter};

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

/// CPU events in files, as the sink writes them, rotated: the binary
/// reads them, sums them per host and CPU, and prints the same numbers in
/// the summary, `--json` and `--html`.
#[test]
fn cpu_events_in_files_are_summed_in_every_output() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SynthConfig::default();
    let mut w = SynthWriter::new(
        dir.path(),
        &cfg,
        FileLayout {
            events_per_file: Some(4),
            per_host: false,
        },
    );
    let ms = 1_000_000u64;
    let mut seq = [0u64; 2];
    // alpha: 10 one-second reads of CPU 2 (NET_RX 30 ms, send 5 ms each);
    // beta: 5 two-second reads of CPU 0 (NET_TX 1 ms, recv 100 ms each),
    // and one event of a kind this build does not know.
    let mut events: Vec<(usize, u64, Ev)> = Vec::new();
    for k in 0..10u64 {
        let ts = cfg.start_ns + (k + 1) * 1_000 * ms;
        events.push((
            0,
            ts,
            Ev::Cpu(CpuEvent {
                mono_ns: ts - cfg.start_ns,
                global_ns: ts,
                interval_ns: 1_000 * ms,
                net_rx_ns: 30 * ms,
                sock_send_ns: 5 * ms,
                cpu: 2,
                ..CpuEvent::default()
            }),
        ));
        if k % 2 == 1 {
            events.push((
                1,
                ts + 7,
                Ev::Cpu(CpuEvent {
                    mono_ns: ts - cfg.start_ns,
                    global_ns: ts + 7,
                    interval_ns: 2_000 * ms,
                    net_tx_ns: ms,
                    sock_recv_ns: 100 * ms,
                    cpu: 0,
                    ..CpuEvent::default()
                }),
            ));
        }
    }
    events.push((1, cfg.start_ns + 11_000 * ms, Ev::Other));
    for (host, ts_ns, ev) in events {
        let e = SynthEvent {
            host,
            ts_ns,
            event_seq: seq[host],
            locked: true,
            ev,
        };
        seq[host] += 1;
        w.write(&e, 0).unwrap();
    }
    let files = w.finish().unwrap();
    assert!(files.len() >= 4, "{files:?}");

    let out = bin().arg("--json").arg(dir.path()).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["input"]["events"], 16);
    assert_eq!(
        v["input"]["used"], 15,
        "CPU events are used, the unknown kind is not"
    );
    let cost = v["cpu_cost"].as_array().unwrap();
    assert_eq!(cost.len(), 2);
    let alpha = &cost[0];
    assert_eq!(alpha["host"], "alpha");
    assert_eq!(alpha["cpus"].as_array().unwrap().len(), 1);
    let a2 = &alpha["cpus"][0];
    assert_eq!(a2["cpu"], 2);
    assert_eq!(a2["samples"], 10);
    assert_eq!(a2["covered_s"], 10.0);
    assert_eq!(a2["net_rx"]["ns"], 300 * ms);
    assert_eq!(a2["net_rx"]["share"], 0.03);
    assert_eq!(a2["sock_send"]["seconds"], 0.05);
    assert_eq!(a2["sock_send"]["share"], 0.005);
    assert_eq!(a2["net_tx"]["share"], 0.0);
    assert_eq!(alpha["all"]["covered_s"], 10.0);
    let b0 = &cost[1]["cpus"][0];
    assert_eq!(
        (b0["samples"].as_u64(), b0["covered_s"].as_f64()),
        (Some(5), Some(10.0))
    );
    assert_eq!(b0["net_tx"]["ns"], 5 * ms);
    assert_eq!(b0["sock_recv"]["seconds"], 0.5);
    assert_eq!(b0["sock_recv"]["share"], 0.05);
    let hosts = v["hosts"].as_array().unwrap();
    assert_eq!(hosts[0]["events"]["cpu"], 10);
    assert_eq!(hosts[1]["events"]["cpu"], 5);
    assert_eq!(hosts[1]["events"]["other"], 1);

    let html = dir.path().join("r.html");
    let out = bin()
        .arg("--html")
        .arg(&html)
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let section = text
        .split("CPU cost of the network stack")
        .nth(1)
        .expect(&text);
    let rows: Vec<Vec<&str>> = section
        .lines()
        .map(|l| l.split_whitespace().collect())
        .filter(|t: &Vec<&str>| t.first().is_some_and(|h| *h == "alpha" || *h == "beta"))
        .collect();
    assert_eq!(
        rows,
        [
            vec![
                "alpha", "2", "10.0", "s", "300", "ms", "3.0", "%", "0", "ns", "0.0", "%", "50.0",
                "ms", "0.5", "%", "0", "ns", "0.0", "%", "10"
            ],
            vec![
                "beta", "0", "10.0", "s", "0", "ns", "0.0", "%", "5.00", "ms", "0.1", "%", "0",
                "ns", "0.0", "%", "500", "ms", "5.0", "%", "5"
            ],
        ],
        "{text}"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<h2>CPU cost of the network stack</h2>"));
    assert!(
        page.contains("<tr><td>alpha</td><td>2</td><td>10.0 s</td><td>300 ms</td><td>3.0 %</td>"),
        "{page}"
    );
    assert!(page.contains("<td>500 ms</td><td>5.0 %</td><td>5</td></tr>"));
}
