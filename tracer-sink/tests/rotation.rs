//! Rotation by size and by time: several valid files, each starting with a
//! Section Header and the IDBs of all known agents; together they hold
//! exactly the events sent, in time order.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::*;
use tracer_codec::{CaptureRecord, TxEvent};

/// Check every file and return the (agent_id, event_seq) of all events.
fn check_files(out: &Path, n_agents: usize) -> (usize, Vec<(u64, u64)>) {
    let files = files(out);
    let mut all = Vec::new();
    let mut last_ts = 0;
    for f in &files {
        let sections = read_file(f);
        assert_eq!(sections.len(), 1, "{}", f.display());
        let s = &sections[0];
        assert_eq!(s.order[0], 'S');
        assert!(
            s.order[1..=n_agents].iter().all(|&c| c == 'I'),
            "{}: {:?}",
            f.display(),
            &s.order[..8.min(s.order.len())]
        );
        assert_eq!(s.idbs.len(), n_agents);
        assert_eq!(
            s.isbs.len(),
            n_agents,
            "one ISB per agent when the file closes"
        );
        for e in &s.epbs {
            let ts = ns(e.timestamp);
            assert!(ts >= last_ts, "events out of order across files");
            last_ts = ts;
            let c = CaptureRecord::decode(&e.data).unwrap();
            assert_eq!(
                iface_agent(s, e.interface_id),
                format!("{:016x}", c.agent_id)
            );
            all.push((c.agent_id, c.event_seq));
        }
    }
    (files.len(), all)
}

fn expected(agents: &[SimAgent]) -> BTreeSet<(u64, u64)> {
    agents
        .iter()
        .flat_map(|a| (0..a.event_seq).map(move |s| (a.agent_id, s)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_by_size() {
    let sink = TestSink::start(|c| tracer_sink::SinkConfig {
        rotate_size_bytes: Some(64 * 1024),
        compression: tracer_sink::Compression::None,
        ..c
    })
    .await;
    let tx = sender();
    let mut agents = [SimAgent::new(0x51, "s1"), SimAgent::new(0x52, "s2")];
    let mut t = BASE_NS;
    for _ in 0..100 {
        for a in agents.iter_mut() {
            let evs: Vec<TxEvent> = (0..a.per_datagram() as u64)
                .map(|k| {
                    t += 10;
                    tx_event(t, k, 2)
                })
                .collect();
            tx.send_to(&a.datagram(&evs), sink.addr).unwrap();
        }
    }
    let (stats, dir) = sink.stop().await;
    let (n_files, got) = check_files(&dir.path().join("out"), 2);
    let want = expected(&agents);
    assert_eq!(got.len(), want.len(), "no event twice, none lost");
    assert_eq!(got.into_iter().collect::<BTreeSet<_>>(), want);
    assert!(n_files >= 5, "{n_files} files");
    assert_eq!(stats.files as usize, n_files);
    for f in files(&dir.path().join("out")) {
        let len = std::fs::metadata(&f).unwrap().len();
        // A file ends at the first event past the limit, plus its ISBs.
        assert!(len < 64 * 1024 + 2048, "{}: {len} bytes", f.display());
    }
}

/// zstd (the default) rotates by compressed bytes on disk: every file is
/// near the limit on disk while it holds several times that in pcapng,
/// and the stats count both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_by_size_counts_compressed_bytes() {
    const LIMIT: u64 = 64 * 1024;
    let sink = TestSink::start(|c| tracer_sink::SinkConfig {
        rotate_size_bytes: Some(LIMIT),
        ..c
    })
    .await;
    let tx = sender();
    let mut agents = [SimAgent::new(0x53, "z1"), SimAgent::new(0x54, "z2")];
    let mut t = BASE_NS;
    for i in 0..3000 {
        for a in agents.iter_mut() {
            let evs: Vec<TxEvent> = (0..a.per_datagram() as u64)
                .map(|k| {
                    t += 10;
                    tx_event(t, k * 7919 + i, 2)
                })
                .collect();
            tx.send_to(&a.datagram(&evs), sink.addr).unwrap();
        }
        if i % 200 == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let (stats, dir) = sink.stop().await;
    let out = dir.path().join("out");
    let (n_files, got) = check_files(&out, 2);
    let want = expected(&agents);
    assert_eq!(got.len(), want.len(), "no event twice, none lost");
    assert_eq!(got.into_iter().collect::<BTreeSet<_>>(), want);
    assert!(n_files >= 4, "{n_files} files");
    assert_eq!(stats.files as usize, n_files);
    assert_eq!(stats.compression, "zstd");
    let (mut disk, mut raw) = (0, 0);
    for f in files(&out) {
        assert!(
            f.to_string_lossy().ends_with(".pcapng.zst"),
            "{}",
            f.display()
        );
        let len = std::fs::metadata(&f).unwrap().len();
        let decoded = zstd::stream::decode_all(std::fs::File::open(&f).unwrap())
            .unwrap()
            .len() as u64;
        // Past the limit by at most the frame that crossed it (128 KiB of
        // pcapng, compressed) and the closing ISBs.
        assert!(len < LIMIT + 32 * 1024, "{}: {len} bytes", f.display());
        disk += len;
        raw += decoded;
    }
    assert_eq!(stats.bytes_written, disk);
    assert_eq!(stats.bytes_uncompressed, raw);
    // The limit counted compressed bytes: files hold far more pcapng.
    assert!(raw > 4 * disk, "{raw} bytes of pcapng in {disk} on disk");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_by_time() {
    let sink = TestSink::start(|c| tracer_sink::SinkConfig {
        rotate_interval: Some(Duration::from_millis(300)),
        reorder_window: Duration::from_millis(20),
        ..c
    })
    .await;
    let tx = sender();
    let mut agents = [
        SimAgent::new(0x71, "t1"),
        SimAgent::new(0x72, "t2"),
        SimAgent::new(0x73, "t3"),
    ];
    let start = tracer_sink::SinkClock::System.now_ns();
    for step in 0..8u64 {
        for (i, a) in agents.iter_mut().enumerate() {
            let evs: Vec<TxEvent> = (0..3u64)
                .map(|k| tx_event(start + step * 150_000_000 + k * 1000 + i as u64, k, 1))
                .collect();
            tx.send_to(&a.datagram(&evs), sink.addr).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let (stats, dir) = sink.stop().await;
    let (n_files, got) = check_files(&dir.path().join("out"), 3);
    assert!(
        n_files >= 3,
        "{n_files} files in 1.2 s with 300 ms rotation"
    );
    assert_eq!(got.len(), 72);
    assert_eq!(got.into_iter().collect::<BTreeSet<_>>(), expected(&agents));
    assert_eq!(stats.events_written, 72);
}
