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
use tracer_sink::Compression;

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

/// A tmpfs of `size` for the test named `tag` (tests of this file run in
/// parallel in one process).
fn mount_tmpfs(size: &str, tag: &str) -> Option<TmpfsGuard> {
    let tmp = std::env::temp_dir();
    let me = format!("{MOUNT_PREFIX}{}-", std::process::id());
    // Leftovers of an earlier, killed run (not this process's mounts).
    if let Ok(entries) = std::fs::read_dir(&tmp) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with(MOUNT_PREFIX) && !name.starts_with(&me) {
                unmount(&e.path());
            }
        }
    }
    let p = tmp.join(format!("{me}{tag}"));
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
    full_disk_case(Compression::None, 30, "rotate").await;
}

/// The same with zstd (the default): a write that hits the full disk is
/// cut back to its last whole frame, and what those frames hold is
/// exactly what is counted written. Ten times the events, to fill the
/// disk with compressed bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_disk_is_counted_and_survived_compressed() {
    full_disk_case(Compression::Zstd { level: 1 }, 300, "rotate-zst").await;
}

async fn full_disk_case(compression: Compression, per_burst: usize, tag: &str) {
    if !tracer_e2e::skip::require_root() {
        return;
    }
    let Some(mnt) = mount_tmpfs("256k", tag) else {
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
        compression,
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
    // Phase 1: about 2 MB of pcapng (20 MB compressed) into 256 KiB.
    for _ in 0..20 {
        send(&mut a, per_burst);
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
    let suffix = compression.extension();
    assert!(
        f.iter().all(|p| p.to_string_lossy().ends_with(suffix)),
        "{f:?}"
    );
    if compression != Compression::None {
        // Cut back at a flush and ended there: a whole zstd frame (or, if
        // not even its 3-byte end fitted, one that stops between blocks),
        // never damaged data.
        for p in &f {
            match zstd::stream::decode_all(std::fs::File::open(p).unwrap()) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
                Err(e) => panic!("{}: {e}", p.display()),
            }
        }
    }
    for p in &f {
        for s in read_file(p) {
            for e in &s.epbs {
                let c = CaptureRecord::decode(&e.data).unwrap();
                assert!(got.insert(c.event_seq), "event {} twice", c.event_seq);
            }
        }
    }
    assert_eq!(got.len() as u64, stats.events_written);
    let on_disk: u64 = f.iter().map(|p| std::fs::metadata(p).unwrap().len()).sum();
    assert_eq!(
        on_disk, stats.bytes_written,
        "bytes_written counts the bytes on disk"
    );
    // Everything sent after space came back was written.
    for s in phase2_from..phase2_to {
        assert!(got.contains(&s), "event {s} sent after recovery is missing");
    }
}

/// Less free space than one write chunk (1 MiB) and no rotation: the sink
/// still writes what fits (whole blocks), counts the rest as lost, and
/// its retries leave no file without events behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_free_space_makes_progress_and_retries_leave_no_empty_files() {
    if !tracer_e2e::skip::require_root() {
        return;
    }
    let Some(mnt) = mount_tmpfs("512k", "small") else {
        tracer_e2e::skip::skip("cannot mount a tmpfs here");
        return;
    };
    let out = mnt.0.join("out");
    let holder = tempfile::tempdir().unwrap();
    let out2 = out.clone();
    let sink = TestSink::start_in(holder, move |c| tracer_sink::SinkConfig {
        output_dir: out2,
        retry_interval: Duration::from_millis(100),
        reorder_window: Duration::from_millis(50),
        compression: tracer_sink::Compression::None,
        ..c
    })
    .await;
    let tx = sender();
    let mut a = SimAgent::new(0xF1, "smallfree");
    let mut t = BASE_NS;
    // About 4 MB of pcapng in one burst (written in 1 MiB chunks), then
    // a second of retries while the disk stays full.
    for i in 0..1500 {
        let evs: Vec<TxEvent> = (0..a.per_datagram() as u64)
            .map(|k| {
                t += 100;
                tx_event(t, k, 2)
            })
            .collect();
        tx.send_to(&a.datagram(&evs), sink.addr).unwrap();
        if i % 300 == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (stats, _holder) = sink.stop().await;
    assert_eq!(stats.events_accepted, a.event_seq);
    assert_eq!(
        stats.events_written + stats.sink_write_lost,
        stats.events_accepted
    );
    assert!(stats.sink_write_lost > 0, "{stats:?}");
    let f = files(&out);
    eprintln!(
        "{} files, events written {} lost {}",
        f.len(),
        stats.events_written,
        stats.sink_write_lost
    );
    let mut on_disk = 0u64;
    for p in &f {
        let s = &read_file(p)[0];
        assert!(
            !s.epbs.is_empty(),
            "{} holds no event ({} bytes): retries must not litter files",
            p.display(),
            std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
        );
        on_disk += s.epbs.len() as u64;
    }
    assert_eq!(on_disk, stats.events_written);
    // Most of the 512 KiB holds events (a TX event's EPB is ~250 bytes
    // with its comment).
    assert!(
        stats.events_written > 1000,
        "no progress with less than a write chunk free: {stats:?}"
    );
}
