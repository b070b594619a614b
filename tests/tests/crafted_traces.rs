//! Traces are shared between people, so a trace file is input from a
//! stranger: every shape of `tracer_testdata::crafted` (one skb claimed by
//! every frame, a retransmission storm, nested ranges, skbs no socket stage
//! reaches, a busy UDP socket) must cost the analyst about what a normal
//! trace of the same size costs, in the dissector (`tshark -2`) and in
//! nettrace-match, and what cannot be told apart must be said.
//!
//! Each run has a deadline of a fixed floor plus ten times the normal
//! trace's time measured in the same test, far above what a linear reader
//! needs and far below what the readers before the bounds took (nested
//! ranges: 120 s for 2,000 frames in tshark, 208 s for 200,000 events in
//! the matcher; both grow with the square of the size or worse).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tracer_e2e::tshark::{dissector_path, Query, Tshark};
use tracer_testdata::crafted::{self, Shape};

const ATTACKS: [Shape; 5] = [
    Shape::SameSkb,
    Shape::RetransmitStorm,
    Shape::NestedRanges,
    Shape::WaitingSkbs,
    Shape::UdpSocket,
];

fn trace(dir: &Path, shape: Shape, events: u64) -> PathBuf {
    let sub = dir.join(format!("{shape:?}-{events}"));
    std::fs::create_dir_all(&sub).expect("trace dir");
    crafted::write(&sub, shape, events)
        .expect("crafted trace")
        .0
}

/// `tshark -2` with the dissector printing the peer-link fields, killed
/// at `deadline`; the rows and the time taken.
fn tshark_fields(t: &Tshark, file: &Path, deadline: Duration) -> (Vec<String>, Duration) {
    let start = Instant::now();
    let out = tempfile::NamedTempFile::new().expect("temp file");
    let mut child = Command::new(t.exe())
        .args(["-n", "-2", "-X"])
        .arg(format!("lua_script:{}", dissector_path().display()))
        .arg("-r")
        .arg(file)
        .args(["-T", "fields", "-E", "separator=/t", "-E", "occurrence=f"])
        .args(["-e", "frame.number", "-e", "nettrace.peer_ambiguous"])
        .args([
            "-e",
            "nettrace.peer_unexamined",
            "-e",
            "nettrace.peer_frame",
        ])
        .args(["-e", "nettrace.rx.skb_count"])
        .stdout(out.reopen().expect("reopen"))
        .stderr(Stdio::null())
        .spawn()
        .expect("tshark runs");
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            assert!(status.success(), "tshark failed on {}", file.display());
            break;
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "tshark -2 with the dissector did not finish {} within {deadline:?}",
                file.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = start.elapsed();
    let text = std::fs::read_to_string(out.path()).expect("tshark output");
    (text.lines().map(str::to_owned).collect(), took)
}

fn column(rows: &[String], i: usize) -> Vec<&str> {
    rows.iter()
        .filter_map(|r| r.split('\t').nth(i))
        .filter(|v| !v.is_empty())
        .collect()
}

#[test]
fn no_crafted_trace_hangs_the_dissector() {
    let Some(t) = Tshark::or_skip("no_crafted_trace_hangs_the_dissector") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    const EVENTS: u64 = 6_000;
    let normal = trace(dir.path(), Shape::Normal, EVENTS);
    let (rows, base) = tshark_fields(&t, &normal, Duration::from_secs(600));
    assert!(
        column(&rows, 3).len() > 1_000,
        "the normal trace links its sends and receptions"
    );
    assert!(column(&rows, 1).is_empty() && column(&rows, 2).is_empty());
    let deadline = Duration::from_secs(30) + base * 10;
    for shape in ATTACKS {
        let file = trace(dir.path(), shape, EVENTS);
        let (rows, took) = tshark_fields(&t, &file, deadline);
        // Only once it is known to finish: no Lua error, no expert error.
        t.check_clean(&file, &Query::default().two_pass())
            .unwrap_or_else(|e| panic!("{shape:?}: {e}"));
        eprintln!("{shape:?}: {took:?} (normal {base:?})");
        let ambiguous = column(&rows, 1);
        match shape {
            // 667 sends and receptions of one byte; 1,200 sends of one
            // segment: more than the 512 entries one byte may cost.
            Shape::SameSkb | Shape::RetransmitStorm => {
                assert!(ambiguous.len() > 1_000, "{shape:?}: {}", ambiguous.len());
                assert!(ambiguous.iter().all(|a| a.starts_with("too_many_copies")));
            }
            // 3,000 receptions from one byte: each later one holds more
            // last bytes of sends than a frame examines.
            Shape::NestedRanges => {
                assert!(ambiguous.iter().all(|a| a.starts_with("too_many_copies")));
                assert!(column(&rows, 2).len() > 2_000, "unexamined sends counted");
            }
            // Nothing reaches the waiting skbs: no socket stage links.
            Shape::WaitingSkbs => assert!(column(&rows, 4).is_empty()),
            Shape::UdpSocket | Shape::Normal => assert!(ambiguous.is_empty()),
        }
    }
}

/// The matcher on a crafted trace, on its own thread, with a deadline.
fn match_within(file: PathBuf, deadline: Duration) -> (tracer_match::Report, Duration) {
    let start = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = tracer_match::run(&[file], Default::default(), Default::default());
        let _ = tx.send(r.map(|(report, _)| report));
    });
    let report = rx
        .recv_timeout(deadline)
        .unwrap_or_else(|_| panic!("nettrace-match did not finish within {deadline:?}"))
        .expect("the matcher reads the trace");
    (report, start.elapsed())
}

#[test]
fn no_crafted_trace_hangs_the_matcher() {
    let dir = tempfile::tempdir().expect("tempdir");
    const EVENTS: u64 = 50_000;
    let (normal, base) = match_within(
        trace(dir.path(), Shape::Normal, EVENTS),
        Duration::from_secs(600),
    );
    let d = &normal.directions[0];
    assert_eq!(d.ambiguous.total(), 0);
    assert_eq!(d.matched, d.sent, "the normal trace matches every send");
    let deadline = Duration::from_secs(20) + base * 10;
    for shape in ATTACKS {
        let (report, took) = match_within(trace(dir.path(), shape, EVENTS), deadline);
        eprintln!("{shape:?}: {took:?} (normal {base:?})");
        let crowded: u64 = report
            .directions
            .iter()
            .map(|d| d.ambiguous.too_many_copies)
            .sum();
        match shape {
            Shape::SameSkb | Shape::RetransmitStorm | Shape::NestedRanges => {
                assert!(crowded > 1_000, "{shape:?}: {crowded}")
            }
            _ => assert_eq!(crowded, 0, "{shape:?}"),
        }
    }
}
