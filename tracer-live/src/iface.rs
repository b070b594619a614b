//! [`LiveIface`]: frames copied into chunks on the caller's thread, handed
//! to a writer thread through a bounded queue without ever waiting, and
//! written to the TAP there (the kernel's receive path of each frame runs
//! on that thread, not the caller's). What cannot be queued or written is
//! dropped and counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::LiveError;
use crate::frame::append_frame;
use crate::tap::{is_no_room, Tap};

/// Bytes a chunk holds before it is handed over (a chunk holds at least
/// one frame, whatever its size).
pub const CHUNK_BYTES: usize = 64 << 10;
/// Chunks queued for the writer thread at most: with [`CHUNK_BYTES`], a
/// live interface holds at most about 4 MiB of frames besides the one
/// being filled.
pub const QUEUE_CHUNKS: usize = 64;
/// Least time between two warnings about write errors.
const WARN_EVERY: Duration = Duration::from_secs(10);
/// How long the interface stays after its last frame at a clean close.
/// A frame is in a reader's socket once its write returns, but a capture
/// (dumpcap here) stops when the interface goes, and what it had not read
/// by then is lost: without this, the last few milliseconds of frames (145
/// of 7,743 in one run of the end-to-end test, 1 run in 3) never reached
/// the capture file.
pub const CLOSE_LINGER: Duration = Duration::from_millis(200);

/// Frames of one hand-over, end to end.
#[derive(Default)]
struct Chunk {
    bytes: Vec<u8>,
    /// End offset of each frame in `bytes`.
    ends: Vec<u32>,
}

impl Chunk {
    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }
}

/// Counters of a live interface, shared with the writer thread (read them
/// from any thread with [`LiveCounters::get`]).
#[derive(Debug, Default)]
pub struct LiveCounters {
    sent: AtomicU64,
    dropped_queue: AtomicU64,
    dropped_kernel: AtomicU64,
    dropped_error: AtomicU64,
}

impl LiveCounters {
    /// The counts now.
    pub fn get(&self) -> LiveCounts {
        LiveCounts {
            frames_sent: self.sent.load(Ordering::Relaxed),
            dropped_queue: self.dropped_queue.load(Ordering::Relaxed),
            dropped_kernel: self.dropped_kernel.load(Ordering::Relaxed),
            dropped_error: self.dropped_error.load(Ordering::Relaxed),
        }
    }

    fn add(c: &AtomicU64, n: usize) {
        c.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// What a live interface did with the frames given to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveCounts {
    /// Frames the kernel took.
    pub frames_sent: u64,
    /// Frames dropped because the writer thread was behind (its queue
    /// full): the caller never waits for it.
    pub dropped_queue: u64,
    /// Frames the kernel had no room for (EAGAIN, ENOBUFS).
    pub dropped_kernel: u64,
    /// Frames the kernel refused otherwise (interface set down by hand,
    /// for one); logged at most every 10 s.
    pub dropped_error: u64,
}

impl LiveCounts {
    /// Every frame dropped, whatever the reason.
    pub fn dropped(&self) -> u64 {
        self.dropped_queue + self.dropped_kernel + self.dropped_error
    }
}

/// A live TAP interface fed with capture records.
pub struct LiveIface {
    name: String,
    chunk: Chunk,
    /// To the writer thread (None once closed).
    tx: Option<SyncSender<Chunk>>,
    /// Written chunks coming back for reuse.
    spare: Receiver<Chunk>,
    counters: Arc<LiveCounters>,
    thread: Option<JoinHandle<()>>,
}

impl LiveIface {
    /// Create the TAP interface `name` (see [`Tap::create`]) and start its
    /// writer thread.
    pub fn create(name: &str) -> Result<Self, LiveError> {
        let tap = Tap::create(name)?;
        if tap.took_over() {
            tracing::warn!(
                iface = name,
                "took over a stale live interface of that name; it is \
                removed when this program exits"
            );
        }
        LiveIface::start(tap)
    }

    /// Start the writer thread of an open TAP.
    pub fn start(tap: Tap) -> Result<Self, LiveError> {
        let name = tap.name().to_owned();
        let (tx, rx) = sync_channel::<Chunk>(QUEUE_CHUNKS);
        let (spare_tx, spare) = sync_channel::<Chunk>(QUEUE_CHUNKS);
        let counters = Arc::new(LiveCounters::default());
        let c = Arc::clone(&counters);
        let thread = std::thread::Builder::new()
            .name("live-iface".to_owned())
            .spawn(move || write_chunks(&tap, &rx, &spare_tx, &c))
            .map_err(|source| LiveError::Io {
                name: name.clone(),
                what: "cannot start the live interface's writer thread",
                source,
            })?;
        Ok(LiveIface {
            name,
            chunk: Chunk::default(),
            tx: Some(tx),
            spare,
            counters,
            thread: Some(thread),
        })
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The counters, to read from another thread.
    pub fn counters(&self) -> Arc<LiveCounters> {
        Arc::clone(&self.counters)
    }

    /// Add one frame carrying `head` then `data` (a capture header and its
    /// record); `fill` writes the per-event fields into the copy of `head`.
    /// Hands the chunk over when it is full.
    pub fn push(&mut self, head: &[u8], data: &[u8], fill: impl FnOnce(&mut [u8])) {
        let need = crate::frame::ETH_HEADER_LEN + head.len() + data.len();
        if !self.chunk.ends.is_empty() && self.chunk.bytes.len() + need > CHUNK_BYTES {
            self.flush();
        }
        append_frame(&mut self.chunk.bytes, head, data, fill);
        self.chunk.ends.push(self.chunk.bytes.len() as u32);
    }

    /// Hand the frames added so far to the writer thread, without waiting:
    /// if its queue is full they are dropped and counted.
    pub fn flush(&mut self) {
        if self.chunk.ends.is_empty() {
            return;
        }
        let next = self.spare.try_recv().unwrap_or_default();
        let full = std::mem::replace(&mut self.chunk, next);
        let Some(tx) = &self.tx else {
            LiveCounters::add(&self.counters.dropped_queue, full.ends.len());
            return;
        };
        match tx.try_send(full) {
            Ok(()) => {}
            Err(TrySendError::Full(mut c)) | Err(TrySendError::Disconnected(mut c)) => {
                LiveCounters::add(&self.counters.dropped_queue, c.ends.len());
                c.clear();
                self.chunk = c;
            }
        }
    }

    /// Write what is queued, stop the writer thread and close the
    /// interface (the kernel removes it).
    pub fn close(&mut self) {
        self.flush();
        self.tx = None;
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!(iface = %self.name, "the live interface's writer thread panicked");
            }
        }
    }
}

impl Drop for LiveIface {
    fn drop(&mut self) {
        self.close();
    }
}

/// The writer thread: every frame of every chunk to the TAP, until the
/// sender is gone; then, after [`CLOSE_LINGER`] if it wrote anything, the
/// TAP closes.
fn write_chunks(tap: &Tap, rx: &Receiver<Chunk>, spare: &SyncSender<Chunk>, c: &LiveCounters) {
    let mut warned: Option<Instant> = None;
    let mut wrote = false;
    while let Ok(mut chunk) = rx.recv() {
        let (mut sent, mut no_room, mut failed) = (0usize, 0usize, 0usize);
        let mut start = 0usize;
        for &end in &chunk.ends {
            let frame = &chunk.bytes[start..end as usize];
            start = end as usize;
            match tap.write_frame(frame) {
                Ok(()) => sent += 1,
                Err(e) if is_no_room(&e) => no_room += 1,
                Err(e) => {
                    failed += 1;
                    if warned.is_none_or(|w| w.elapsed() >= WARN_EVERY) {
                        warned = Some(Instant::now());
                        tracing::warn!(iface = tap.name(), error = %e,
                            "the live interface refuses frames (is it down? `ip link set {} up`); \
                             they are dropped and counted as live dropped_error", tap.name());
                    }
                }
            }
        }
        wrote |= sent > 0;
        LiveCounters::add(&c.sent, sent);
        LiveCounters::add(&c.dropped_kernel, no_room);
        LiveCounters::add(&c.dropped_error, failed);
        chunk.clear();
        let _ = spare.try_send(chunk);
    }
    if wrote {
        std::thread::sleep(CLOSE_LINGER);
    }
}
