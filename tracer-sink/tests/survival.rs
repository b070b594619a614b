//! What the sink survives besides bad datagrams: a SIGKILL (the file is
//! readable up to its last block), loss and reordering on the way (every
//! lost event accounted for, exactly), and a trace corrupted afterwards
//! (the dissector marks what it cannot read, never a Lua error).

mod common;

use std::collections::{BTreeSet, VecDeque};
use std::net::UdpSocket;
use std::time::Duration;

use common::*;
use tracer_codec::{CaptureRecord, TxEvent};

fn full_datagram(a: &mut SimAgent, t: &mut u64) -> Vec<u8> {
    let evs: Vec<TxEvent> = (0..a.per_datagram() as u64)
        .map(|k| {
            *t += 100;
            tx_event(*t, k, 2)
        })
        .collect();
    a.datagram(&evs)
}

/// kill -9 while events stream in: every block in the file is whole, and
/// every event sent well before the kill is in it; compressed (the
/// default: the file ends at a whole zstd frame) and plain.
#[test]
fn sigkill_leaves_a_file_readable_up_to_its_last_block() {
    sigkill_case(&[], ".pcapng.zst");
    sigkill_case(&["--compress", "none"], ".pcapng");
}

fn sigkill_case(mode: &[&str], suffix: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut args = vec!["--reorder-window-ms", "20", "--stats-interval", "0"];
    args.extend_from_slice(mode);
    let sink = SinkBin::start(&out, &args, std::process::Stdio::null());
    let tx = sender();
    let mut a = SimAgent::new(0x91, "killed");
    let mut t = BASE_NS;
    for _ in 0..300 {
        tx.send_to(&full_datagram(&mut a, &mut t), ("127.0.0.1", sink.port))
            .unwrap();
    }
    // Written within a tick after the reorder window.
    std::thread::sleep(Duration::from_millis(800));
    let settled = a.event_seq;
    // More in flight at the moment of the kill.
    for _ in 0..3000 {
        tx.send_to(&full_datagram(&mut a, &mut t), ("127.0.0.1", sink.port))
            .unwrap();
    }
    let mut sink = sink;
    // SAFETY: plain kill(2) on the pid of a child we spawned and still own.
    assert_eq!(
        unsafe { libc::kill(sink.child.id() as libc::pid_t, libc::SIGKILL) },
        0
    );
    let _ = sink.child.wait();
    let f = files(&out);
    assert_eq!(f.len(), 1);
    assert!(f[0].to_string_lossy().ends_with(suffix), "{f:?}");
    // read_file panics on any partial or bad block (or zstd frame).
    let s = &read_file(&f[0])[0];
    let seqs: BTreeSet<u64> = s
        .epbs
        .iter()
        .map(|e| CaptureRecord::decode(&e.data).unwrap().event_seq)
        .collect();
    for e in 0..settled {
        assert!(
            seqs.contains(&e),
            "{suffix}: event {e}, sent 800 ms before the kill, is missing"
        );
    }
    if suffix == ".pcapng" {
        assert_eq!(std::fs::metadata(&f[0]).unwrap().len() % 4, 0);
    }
    if let Some(tshark) = tracer_e2e::tshark::Tshark::or_skip("sigkill") {
        tshark
            .check_clean(&f[0], &tracer_e2e::tshark::Query::default())
            .unwrap();
    }
}

/// A UDP relay between agent and sink that drops one datagram in
/// `drop_one_in` and holds one in `hold_one_in` back for 1 to 20 others
/// (reordering), deterministically. Returns its address; it stops once
/// nothing has arrived for a second and reports the sequence numbers it
/// forwarded (whatever it did not forward is lost, on purpose or in its
/// socket).
fn lossy_relay(
    to: std::net::SocketAddr,
    drop_one_in: u64,
    hold_one_in: u64,
) -> (std::net::SocketAddr, std::thread::JoinHandle<BTreeSet<u64>>) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let addr = sock.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let out = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut rng = 0x5EED_1234_u64;
        let mut held: VecDeque<(usize, Vec<u8>)> = VecDeque::new();
        let mut forwarded = BTreeSet::new();
        let mut send = |d: &[u8]| {
            out.send_to(d, to).unwrap();
            forwarded.insert(u64::from_le_bytes(d[32..40].try_into().unwrap()));
        };
        let mut buf = vec![0u8; 65_536];
        let mut i = 0usize;
        while let Ok(n) = sock.recv(&mut buf) {
            let d = buf[..n].to_vec();
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            if rng % drop_one_in == 0 {
                // Dropped.
            } else if rng / 7 % hold_one_in == 0 {
                held.push_back((i + 1 + (rng / 11 % 20) as usize, d));
            } else {
                send(&d);
            }
            while held.front().is_some_and(|(at, _)| *at <= i) {
                let (_, d) = held.pop_front().unwrap();
                send(&d);
            }
            i += 1;
        }
        for (_, d) in held {
            send(&d);
        }
        forwarded
    });
    (addr, h)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loss_and_reordering_through_a_relay_are_accounted_exactly() {
    const DATAGRAMS: usize = 5000;
    let sink = TestSink::start(|c| c).await;
    let (relay, h) = lossy_relay(sink.addr, 20, 10);
    let tx = sender();
    let mut a = SimAgent::new(0x7E1A, "relayed");
    let mut t = BASE_NS;
    // Events per datagram vary, so event gaps differ from datagram gaps.
    let mut per_seq = Vec::new();
    for i in 0..DATAGRAMS {
        let n = 1 + i % a.per_datagram();
        let evs: Vec<TxEvent> = (0..n as u64)
            .map(|k| {
                t += 100;
                tx_event(t, k, 2)
            })
            .collect();
        per_seq.push(n as u64);
        tx.send_to(&a.datagram(&evs), relay).unwrap();
        if i % 50 == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let forwarded = tokio::task::spawn_blocking(move || h.join().unwrap())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (stats, dir) = sink.stop().await;
    let dropped: Vec<u64> = (0..DATAGRAMS as u64)
        .filter(|s| !forwarded.contains(s))
        .collect();
    let lost_events: u64 = dropped.iter().map(|&s| per_seq[s as usize]).sum();
    let sent_events: u64 = per_seq.iter().sum();
    assert!(dropped.len() > DATAGRAMS / 40, "{} dropped", dropped.len());
    // A loss at the very end is invisible to any sequence tracking.
    assert!(
        forwarded.contains(&(DATAGRAMS as u64 - 1)),
        "reseed the relay"
    );
    let s = &stats.agents[0];
    assert_eq!(s.datagram_gaps, dropped.len() as u64, "{s:?}");
    assert_eq!(s.event_gaps, lost_events, "{s:?}");
    assert!(s.late_datagrams > 0, "the relay reordered nothing: {s:?}");
    assert_eq!((s.duplicates, s.stale, s.seq_jumps), (0, 0, 0));
    assert_eq!(stats.events_written, sent_events - lost_events);
    let f = files(&dir.path().join("out"));
    let sec = &read_file(&f[0])[0];
    assert_eq!(sec.epbs.len() as u64, sent_events - lost_events);
    let (recv, drop, _) = isb_counts(&sec.isbs[0]);
    assert_eq!(recv, Some(sent_events - lost_events));
    assert_eq!(drop, Some(lost_events));
}

/// A trace corrupted after the fact (`editcap -E`: random byte errors in
/// the packet data): tshark with the dissector reads every frame, marks
/// what it cannot decode, and never raises a Lua error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_trace_gets_malformed_marks_not_lua_errors() {
    let Some(tshark) = tracer_e2e::tshark::Tshark::or_skip("corrupted trace") else {
        return;
    };
    let editcap = tshark.exe().with_file_name("editcap");
    if !editcap.is_file() {
        tracer_e2e::skip::skip("editcap not found beside tshark");
        return;
    }
    let sink = TestSink::start(|c| c).await;
    let tx = sender();
    let mut a = SimAgent::new(0xC0, "corrupt");
    let mut t = BASE_NS;
    for _ in 0..100 {
        tx.send_to(&full_datagram(&mut a, &mut t), sink.addr)
            .unwrap();
    }
    let (stats, dir) = sink.stop().await;
    let f = files(&dir.path().join("out"));
    let bad = dir.path().join("corrupted.pcapng");
    let st = std::process::Command::new(&editcap)
        .args(["-E", "0.1", "-F", "pcapng"])
        .arg(&f[0])
        .arg(&bad)
        .status()
        .unwrap();
    assert!(st.success());
    let q = tracer_e2e::tshark::Query::default().allow_expert_errors();
    let frames = tshark
        .run(&bad, &q, &["-T", "fields", "-e", "frame.number"])
        .unwrap();
    assert_eq!(frames.lines().count() as u64, stats.events_written);
    let flagged = tshark.flagged_frames(&bad, &q).unwrap();
    assert!(flagged.iter().all(|f| !f.lua_error), "{flagged:#?}");
    assert!(!flagged.is_empty(), "10 % byte errors flagged nothing");
}
