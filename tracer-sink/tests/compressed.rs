//! Compressed traces (`.pcapng.zst`, the default) as the tools users open
//! them with: files written and rotated by the sink binary are read by
//! tshark with the dissector, capinfos, mergecap and nettrace-match; the
//! same file cut anywhere (what a kill -9 mid-write leaves) is still read
//! without an error, to its last whole frame.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use tracer_codec::{CaptureRecord, TxEvent};

/// Packets capinfos counts in `file`, or its error output.
fn capinfos_count(file: &Path) -> Result<u64, String> {
    let out = Command::new("capinfos")
        .args(["-c", "-M", "-t"])
        .arg(file)
        .output()
        .map_err(|e| format!("cannot run capinfos: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "capinfos failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    if !text.contains("zstd compressed") && !file.to_string_lossy().ends_with(".pcapng") {
        return Err(format!("capinfos does not see zstd: {text}"));
    }
    text.lines()
        .find_map(|l| l.strip_prefix("Number of packets:"))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| format!("no packet count in {text}"))
}

/// Frames plain tshark (no dissector) reads from `file`; an error when it
/// fails or complains (a packet cut short, a bad frame).
fn tshark_frames(tshark: &Path, file: &Path) -> Result<u64, String> {
    let out = Command::new(tshark)
        .args(["-n", "-r"])
        .arg(file)
        .args(["-T", "fields", "-e", "frame.number"])
        .output()
        .map_err(|e| format!("cannot run tshark: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let complaints: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.contains("Running as user"))
        .collect();
    if !out.status.success() || !complaints.is_empty() {
        return Err(format!("tshark: {} {complaints:?}", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().count() as u64)
}

#[test]
fn compressed_files_open_in_tshark_capinfos_mergecap_and_nettrace_match() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let sink = SinkBin::start(
        &out,
        &[
            "--rotate-size",
            "64K",
            "--reorder-window-ms",
            "20",
            "--stats-interval",
            "0",
            "--json",
        ],
        std::process::Stdio::piped(),
    );
    let tx = sender();
    let mut agents = [SimAgent::new(0xC1, "zst-a"), SimAgent::new(0xC2, "zst-b")];
    let mut t = BASE_NS;
    for i in 0..2500u64 {
        for a in agents.iter_mut() {
            let evs: Vec<TxEvent> = (0..a.per_datagram() as u64)
                .map(|k| {
                    t += 250;
                    tx_event(t, i * 64 + k, (k % 4) as u8)
                })
                .collect();
            tx.send_to(&a.datagram(&evs), ("127.0.0.1", sink.port))
                .unwrap();
        }
        if i % 250 == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let (status, log, stdout) = sink.stop();
    assert!(status.success(), "{log}");
    let stats: tracer_sink::SinkStats =
        serde_json::from_str(stdout.lines().last().expect("final stats")).unwrap();
    let sent: u64 = agents.iter().map(|a| a.event_seq).sum();
    assert_eq!(stats.events_written, sent, "{log}");
    assert_eq!(stats.compression, "zstd");

    let f = files(&out);
    assert!(f.len() >= 3, "{f:?}");
    let mut per_file = Vec::new();
    let mut seen = BTreeSet::new();
    for p in &f {
        assert!(
            p.to_string_lossy().ends_with(".pcapng.zst"),
            "{}",
            p.display()
        );
        let s = &read_file(p)[0];
        for e in &s.epbs {
            let c = CaptureRecord::decode(&e.data).unwrap();
            assert!(seen.insert((c.agent_id, c.event_seq)), "event twice");
        }
        per_file.push(s.epbs.len() as u64);
    }
    assert_eq!(seen.len() as u64, sent);

    // nettrace-match reads the directory (it lists .pcapng.zst).
    let (report, _) = tracer_match::run(
        &tracer_match::input::merge::expand_inputs(std::slice::from_ref(&out)).unwrap(),
        tracer_match::MergeConfig::default(),
        tracer_match::MatchConfig::default(),
    )
    .unwrap();
    assert_eq!(report.input.events, sent);
    assert!(report.input.damaged_files.is_empty());

    let Some(tshark) = tracer_e2e::tshark::Tshark::or_skip("compressed files") else {
        return;
    };
    for (p, n) in f.iter().zip(&per_file) {
        // The dissector decodes every frame, without a flag.
        let rows = tshark
            .fields(p, &["frame.number"], &tracer_e2e::tshark::Query::default())
            .unwrap();
        assert_eq!(rows.len() as u64, *n, "tshark on {}", p.display());
        assert_eq!(capinfos_count(p), Ok(*n), "capinfos on {}", p.display());
    }
    let merged = dir.path().join("merged.pcapng");
    let st = Command::new("mergecap")
        .arg("-w")
        .arg(&merged)
        .args(&f)
        .status()
        .expect("mergecap (installed with tshark)");
    assert!(st.success());
    assert_eq!(capinfos_count(&merged), Ok(sent));

    // Cut the largest file anywhere: every reader stops cleanly at the
    // last whole frame, never inside a packet, and reads more the later
    // the cut.
    let big = f
        .iter()
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let bytes = std::fs::read(big).unwrap();
    let cut_path = dir.path().join("cut.pcapng.zst");
    let mut last = 0;
    let cuts = 24;
    for k in 1..cuts {
        let at = bytes.len() * k / cuts + k % 5;
        std::fs::write(&cut_path, &bytes[..at]).unwrap();
        let n = tshark_frames(tshark.exe(), &cut_path)
            .unwrap_or_else(|e| panic!("cut at {at} of {}: {e}", bytes.len()));
        assert_eq!(capinfos_count(&cut_path), Ok(n), "cut at {at}");
        assert!(n >= last, "cut at {at}: {n} frames after {last}");
        last = n;
    }
    assert!(last > 0);
}

/// A long compressed file (megabytes, far past the read buffer of
/// Wireshark's zstd reader) reads whole in tshark and capinfos. Wireshark
/// 4.0 misreads a file of many concatenated zstd frames once a frame
/// starts away from its buffer's start, which is why the sink writes one
/// frame per file; this is the test that tells.
#[test]
fn a_long_compressed_file_reads_whole_in_tshark_and_capinfos() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let sink = SinkBin::start(
        &out,
        &["--reorder-window-ms", "20", "--stats-interval", "0"],
        std::process::Stdio::null(),
    );
    let tx = sender();
    let mut agents = [SimAgent::new(0xD1, "long-a"), SimAgent::new(0xD2, "long-b")];
    let mut t = BASE_NS;
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for i in 0..6000u64 {
        for a in agents.iter_mut() {
            let evs: Vec<TxEvent> = (0..a.per_datagram() as u64)
                .map(|k| {
                    // Irregular times and cookies: a file that compresses
                    // like real traffic, not 20x.
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    t += 100 + x % 5000;
                    tx_event(t, x >> 16, (k % 4) as u8)
                })
                .collect();
            tx.send_to(&a.datagram(&evs), ("127.0.0.1", sink.port))
                .unwrap();
        }
        if i % 200 == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let (status, log, _) = sink.stop();
    assert!(status.success(), "{log}");
    let sent: u64 = agents.iter().map(|a| a.event_seq).sum();
    let f = files(&out);
    assert_eq!(f.len(), 1, "{f:?}");
    let len = std::fs::metadata(&f[0]).unwrap().len();
    assert!(len > 2 << 20, "{len} bytes: too short to tell");
    assert_eq!(read_file(&f[0])[0].epbs.len() as u64, sent);
    let Some(tshark) = tracer_e2e::tshark::Tshark::or_skip("long compressed file") else {
        return;
    };
    assert_eq!(tshark_frames(tshark.exe(), &f[0]), Ok(sent));
    assert_eq!(capinfos_count(&f[0]), Ok(sent));
}
