//! A full disk for real: the sink writes into a 256 KiB tmpfs (root only).
//! It must log, count unwritten events as `sink_write_lost`, keep running,
//! leave every file valid, and write again once space is back.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use tracer_codec::{CaptureRecord, TxEvent};

const MOUNT_PREFIX: &str = "tracer-sink-fulldisk-";

fn is_mounted(p: &Path) -> bool {
    let s = p.to_string_lossy().to_string();
    std::fs::read_to_string("/proc/mounts")
        .map(|m| {
            m.lines()
                .any(|l| l.split_whitespace().nth(1) == Some(s.as_str()))
        })
        .unwrap_or(false)
}

fn unmount(p: &Path) {
    if is_mounted(p) {
        let _ = Command::new("umount").arg("-l").arg(p).status();
    }
    let _ = std::fs::remove_dir_all(p);
}

/// Unmounts (and removes) the tmpfs when dropped, also when the test fails.
struct TmpfsGuard(PathBuf);

impl Drop for TmpfsGuard {
    fn drop(&mut self) {
        unmount(&self.0);
    }
}

fn mount_tmpfs(size: &str) -> Option<TmpfsGuard> {
    let tmp = std::env::temp_dir();
    // Leftovers of an earlier, killed run.
    if let Ok(entries) = std::fs::read_dir(&tmp) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(MOUNT_PREFIX) {
                unmount(&e.path());
            }
        }
    }
    let p = tmp.join(format!("{MOUNT_PREFIX}{}", std::process::id()));
    std::fs::create_dir_all(&p).ok()?;
    let guard = TmpfsGuard(p.clone());
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(&p)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    ok.then_some(guard)
}

fn remount(p: &Path, size: &str) -> bool {
    Command::new("mount")
        .args(["-o", &format!("remount,size={size}")])
        .arg(p)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_disk_is_counted_and_survived() {
    if !tracer_e2e::skip::require_root() {
        return;
    }
    let Some(mnt) = mount_tmpfs("256k") else {
        tracer_e2e::skip::skip("cannot mount a tmpfs here");
        return;
    };
    let out = mnt.0.join("out");
    let holder = tempfile::tempdir().unwrap();
    let out2 = out.clone();
    let sink = TestSink::start_in(holder, move |c| tracer_sink::SinkConfig {
        output_dir: out2,
        rotate_size_bytes: Some(64 * 1024),
        retry_interval: Duration::from_millis(200),
        reorder_window: Duration::from_millis(10),
        ..c
    })
    .await;
    let tx = sender();
    let mut a = SimAgent::new(0xF0, "fullhost");
    let mut t = BASE_NS;
    let mut send = |a: &mut SimAgent, n: usize| {
        for _ in 0..n {
            let evs: Vec<TxEvent> = (0..a.per_datagram() as u64)
                .map(|k| {
                    t += 100;
                    tx_event(t, k, 2)
                })
                .collect();
            tx.send_to(&a.datagram(&evs), sink.addr).unwrap();
        }
    };
    // Phase 1: about 2 MB of pcapng into 256 KiB.
    for _ in 0..20 {
        send(&mut a, 30);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Phase 2: space comes back; the sink must open a fresh file by itself.
    assert!(remount(&mnt.0, "8m"), "remount failed");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let phase2_from = a.event_seq;
    send(&mut a, 20);
    let phase2_to = a.event_seq;

    let (stats, _holder) = sink.stop().await;
    assert!(
        stats.sink_write_lost > 0,
        "a full disk must lose events: {stats:?}"
    );
    assert_eq!(
        stats.events_written + stats.sink_write_lost,
        stats.events_accepted
    );
    assert_eq!(stats.events_accepted, a.event_seq);

    // Every file on the tmpfs is a valid pcapng; together they hold
    // exactly the events the stats call written.
    let mut got = BTreeSet::new();
    let f = files(&out);
    assert!(f.len() >= 3, "{} files", f.len());
    for p in &f {
        for s in read_file(p) {
            for e in &s.epbs {
                let c = CaptureRecord::decode(&e.data).unwrap();
                assert!(got.insert(c.event_seq), "event {} twice", c.event_seq);
            }
        }
    }
    assert_eq!(got.len() as u64, stats.events_written);
    // Everything sent after space came back was written.
    for s in phase2_from..phase2_to {
        assert!(got.contains(&s), "event {s} sent after recovery is missing");
    }
}
