//! Golden tests of the Lua dissector: known events are written as pcapng
//! (once by a real `tracer-sink` fed with real UDP datagrams, once directly
//! with the sink's `TraceWriter`, no sink running), decoded by tshark with `wireshark/nettrace/nettrace.lua`, and
//! every field of every frame is compared with the event that was sent.

mod dissector_common;

use std::collections::HashMap;
use std::fs::File;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dissector_common::*;
use tracer_e2e::tshark::{Query, Row, Tshark};
use tracer_sink::LinkType;

/// Generous: the machine is small and shared with other builds.
const SINK_TIMEOUT: Duration = Duration::from_secs(60);

/// All fields a capture frame is checked on.
fn capture_fields() -> Vec<&'static str> {
    field_list(&[
        &[
            "frame.number",
            "frame.time_epoch",
            "_ws.col.Protocol",
            "_ws.col.Info",
        ],
        CAPTURE_FIELDS,
        TX_FIELDS,
        LAT_FIELDS,
        CLOCK_FIELDS,
    ])
}

fn all_sent() -> Vec<Sent> {
    golden_datagrams()
        .into_iter()
        .flat_map(|(_, events)| events)
        .collect()
}

/// Checks the decoded frames against the sent events, matched by (agent
/// id, event sequence), with latencies expected in file order.
fn check_frames(rows: &[Row], sent: &[Sent], check_frame_time: bool) {
    assert_eq!(rows.len(), sent.len(), "one frame per event: {rows:#?}");
    let by_id: HashMap<(String, String), &Sent> = sent
        .iter()
        .map(|s| {
            let id = format!("0x{:016x}", s.agent.agent_id);
            ((id, s.event_seq.to_string()), s)
        })
        .collect();
    let mut model = LatencyModel::default();
    let mut matched = std::collections::HashSet::new();
    for row in rows {
        let key = (
            row.one("nettrace.agent_id").to_owned(),
            row.one("nettrace.event_seq").to_owned(),
        );
        let s = by_id
            .get(&key)
            .unwrap_or_else(|| panic!("frame of no sent event: {row:?}"));
        assert!(matched.insert(key.clone()), "event {key:?} written twice");
        check_capture_frame(row, s, &mut model);
        assert_eq!(row.one("_ws.col.Protocol"), "NETTRACE");
        if check_frame_time {
            // docs/wire-format.md: each EPB carries the event's global time
            // (clock updates included).
            if let Some(ns) = s
                .record
                .tx()
                .map(|e| e.global_ns)
                .or(s.record.clock().map(|e| e.global_ns))
            {
                let want = format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000);
                assert_eq!(row.one("frame.time_epoch"), want, "frame time");
            }
        }
        if let Some(ev) = s.record.clock() {
            // phc2sys style, the very text of the codec's summary (which the
            // sink writes as the frame comment).
            assert_eq!(row.one("_ws.col.Info"), ev.summary(), "clock info");
        } else if let Some(ev) = s.record.tx() {
            let info = row.one("_ws.col.Info");
            let stage = ["SENDMSG", "SCHED", "SND_SW", "SND_HW", "ACK"][ev.stage as usize];
            assert!(info.starts_with(stage), "info {info:?}");
            assert!(
                info.contains(&format!("tskey={}", ev.tskey)),
                "info {info:?}"
            );
        } else {
            assert!(row
                .one("_ws.col.Info")
                .starts_with("unknown kind 77 (9 bytes)"));
        }
    }
}

/// Decodes `file` in one and in two passes: the latencies must not depend
/// on how often a frame is dissected.
fn decode_twice(tshark: &Tshark, file: &Path) -> Vec<Row> {
    let fields = capture_fields();
    let one = tshark
        .fields(file, &fields, &Query::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let two = tshark
        .fields(file, &fields, &Query::default().two_pass())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(one, two, "two-pass decode differs from one pass");
    one
}

/// The dissector alone, independent of the sink's receive path and
/// ordering: a file of capture records made here (as docs/wire-format.md
/// describes them) written with the sink's `TraceWriter`.
#[test]
fn golden_direct_pcapng() {
    let Some(tshark) = Tshark::or_skip("golden_direct_pcapng") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("golden.pcapng");
    let sent = all_sent();
    let frames: Vec<Frame> = sent
        .iter()
        .map(|s| Frame {
            interface: if s.agent.agent_id == AGENT_A.agent_id {
                0
            } else {
                1
            },
            time_ns: s.time_ns,
            data: capture_payload(s),
        })
        .collect();
    write_pcapng(
        &file,
        LinkType::User0,
        &[AGENT_A.host, AGENT_B.host],
        &frames,
    );

    let rows = decode_twice(&tshark, &file);
    check_frames(&rows, &sent, true);

    // Display filters of the README work on these fields.
    let q = Query::default().filter("nettrace.stage == SND_SW && nettrace.lat.snd_sw_ns > 3000");
    let hits = tshark.fields(&file, &["nettrace.event_seq"], &q).unwrap();
    let seqs: Vec<&str> = hits.iter().map(|r| r.one("nettrace.event_seq")).collect();
    assert_eq!(seqs, ["103"], "SND_SW events slower than 3 µs after SCHED");
    // Earlier-stage latencies are carried on later events.
    let q = Query::default().filter("nettrace.stage == SND_SW && nettrace.lat.sched_ns > 1000");
    let hits = tshark.fields(&file, &["nettrace.event_seq"], &q).unwrap();
    let seqs: Vec<&str> = hits.iter().map(|r| r.one("nettrace.event_seq")).collect();
    assert_eq!(seqs, ["103"], "SND_SW events of skbs slow to SCHED");
    let q = Query::default().filter("nettrace.saddr6 == fd00::1");
    assert_eq!(
        tshark.fields(&file, &["frame.number"], &q).unwrap().len(),
        3
    );

    // Clock filters of the README, on the golden clock updates: c1 = B 0,
    // c2 = A 107, c3 = A 112, c4 = B 5, c5 = B 9 (file order c1 c2 c3 c4 c5).
    let seqs = |filter: &str| -> Vec<String> {
        let q = Query::default().filter(filter);
        let rows = tshark
            .fields(&file, &["nettrace.event_seq"], &q)
            .unwrap_or_else(|e| panic!("{filter}: {e}"));
        rows.iter()
            .map(|r| r.one("nettrace.event_seq").to_owned())
            .collect()
    };
    assert_eq!(
        seqs("nettrace.kind == CLOCK"),
        ["0", "107", "112", "5", "9"]
    );
    assert_eq!(
        seqs("nettrace.clock.state < 2 || abs(nettrace.clock.offset_ns) > 1000"),
        ["107", "112", "5", "9"]
    );
    assert_eq!(
        seqs("nettrace.clock.source == phc && nettrace.clock.error_estimate_ns > 1000000"),
        ["107", "112"]
    );
    assert_eq!(seqs("abs(nettrace.clock.freq_ppb) > 10"), ["112", "9"]);
    assert_eq!(seqs("nettrace.clock.ref_minus_mono_ns < 0"), ["107"]);
    assert_eq!(
        seqs("nettrace.clock.state == LOCKED && nettrace.clock.offset_ns < 0"),
        ["0"]
    );
    // The capture header's clock_state is a different field from the
    // event's clock.state: A's header says LOCKED_STABLE, B's LOCKED.
    assert_eq!(
        seqs("nettrace.clock.state != LOCKED_STABLE && nettrace.clock_state == LOCKED_STABLE"),
        ["107", "112"]
    );
}

/// Every display filter example of wireshark/README.md parses in this
/// tshark and runs cleanly on the golden file (a filter tshark cannot
/// parse makes it exit non-zero).
#[test]
fn readme_filters_parse() {
    let Some(tshark) = Tshark::or_skip("readme_filters_parse") else {
        return;
    };
    let readme = std::fs::read_to_string(
        tracer_e2e::bins::repo_root()
            .join("wireshark")
            .join("README.md"),
    )
    .unwrap();
    let section = readme
        .split("## Display filter examples")
        .nth(1)
        .expect("filter section");
    let block = section.split("```").nth(1).expect("filter code block");
    let filters: Vec<&str> = block
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert!(filters.len() >= 10, "filters: {filters:?}");
    assert!(
        filters.iter().any(|f| f.contains("nettrace.clock.")),
        "a clock filter example: {filters:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("golden.pcapng");
    let frames: Vec<Frame> = all_sent()
        .iter()
        .map(|s| Frame {
            interface: 0,
            time_ns: s.time_ns,
            data: capture_payload(s),
        })
        .collect();
    write_pcapng(&file, LinkType::User0, &["host-a"], &frames);
    for f in filters {
        // `_ws.expert.severity == error` only matches bad frames: none here.
        let q = Query::default().filter(f);
        tshark
            .fields(&file, &["frame.number"], &q)
            .unwrap_or_else(|e| panic!("README filter {f:?}: {e}"));
    }
}

/// A running `tracer-sink`, killed if the test panics.
struct Sink {
    child: Child,
    log: PathBuf,
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Sink {
    fn start(port: u16, out: &Path, log: PathBuf) -> Sink {
        let exe = tracer_e2e::bins::bin("tracer-sink");
        let child = Command::new(exe)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--output")
            .arg(out)
            // The golden file holds every part the sink can write.
            .arg("--comments")
            .stdin(Stdio::null())
            .stdout(File::create(&log).unwrap())
            .stderr(File::create(log.with_extension("err")).unwrap())
            .spawn()
            .expect("spawn tracer-sink");
        Sink { child, log }
    }

    fn logs(&self) -> String {
        let out = std::fs::read_to_string(&self.log).unwrap_or_default();
        let err = std::fs::read_to_string(self.log.with_extension("err")).unwrap_or_default();
        format!("stdout:\n{out}\nstderr:\n{err}")
    }

    /// Polls until `cond` holds; fails if the sink exits or time runs out.
    fn wait_for(&mut self, what: &str, mut cond: impl FnMut() -> bool) {
        let start = Instant::now();
        while !cond() {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "tracer-sink exited ({status}) waiting for {what}\n{}",
                    self.logs()
                );
            }
            assert!(
                start.elapsed() < SINK_TIMEOUT,
                "timed out waiting for {what}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then wait for a clean exit.
    fn stop(mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) on the pid of our own child, which has not been reaped.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0, "kill");
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                start.elapsed() < SINK_TIMEOUT,
                "sink ignores SIGTERM\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "sink exit {status}\n{}", self.logs());
    }
}

/// Bytes queued on the UDP sockets bound to 127.0.0.1:`port`, from
/// /proc/net/udp: `None` while nothing is bound there. 0 means the sink has
/// read every datagram sent so far (loopback queues them before `send_to`
/// returns), so no sleep is needed.
fn udp_rx_queue(port: u16) -> Option<u64> {
    let table = std::fs::read_to_string("/proc/net/udp").ok()?;
    let local = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.get(1) != Some(&local.as_str()) {
                return None;
            }
            let (_, rx) = cols.get(4)?.split_once(':')?;
            u64::from_str_radix(rx, 16).ok()
        })
        .reduce(|a, b| a + b)
}

fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The contract test: agent datagrams -> real sink -> pcapng -> tshark +
/// dissector -> every field equals the event sent.
#[test]
fn golden_through_sink() {
    let Some(tshark) = Tshark::or_skip("golden_through_sink") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let port = free_udp_port();
    let mut sink = Sink::start(port, &out, dir.path().join("sink.log"));
    sink.wait_for("the sink's UDP socket", || udp_rx_queue(port).is_some());

    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut dgram_seq: HashMap<u64, u64> = HashMap::new();
    let mut sent = Vec::new();
    for (agent, events) in golden_datagrams() {
        let seq = dgram_seq.entry(agent.agent_id).or_default();
        let bytes = datagram(&agent, *seq, 0, &events);
        *seq += 1;
        tx.send_to(&bytes, ("127.0.0.1", port)).unwrap();
        sent.extend(events);
    }
    sink.wait_for("the sink to read every datagram", || {
        udp_rx_queue(port) == Some(0)
    });
    sink.stop();

    let files: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("trace-") && tracer_e2e::pcap::is_trace_name(p)
        })
        .collect();
    assert_eq!(files.len(), 1, "one trace file in {out:?}: {files:?}");
    let rows = decode_twice(&tshark, &files[0]);
    check_frames(&rows, &sent, true);

    // The sink's frame comment of a clock update is the codec's summary,
    // and the dissector's Info column says the same.
    let q = Query::default().filter("nettrace.kind == CLOCK");
    let clocks = tshark
        .fields(&files[0], &["frame.comment", "_ws.col.Info"], &q)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        clocks.len(),
        sent.iter().filter(|s| s.record.clock().is_some()).count()
    );
    for r in &clocks {
        assert_eq!(r.one("frame.comment"), r.one("_ws.col.Info"));
    }
}
