//! What the live outputs (`crate::live`) count, shared between the
//! threads that count it (the TAP's writer thread, the stream's acceptor
//! and client tasks, the writer) and the stats snapshot: [`LiveCounters`], read into the
//! serialisable [`LiveStats`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The live outputs' part of the sink's stats (present only when one is
/// configured).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveStats {
    /// The live interface (`--live-iface`), if any.
    pub iface: Option<String>,
    /// Frames the kernel took on the live interface.
    pub frames_sent: u64,
    /// Frames not shown on the live interface, every reason (the next
    /// three added up).
    pub frames_dropped: u64,
    /// ... because its writer thread was behind (never waited for).
    pub frames_dropped_queue: u64,
    /// ... because the kernel had no room (EAGAIN, ENOBUFS).
    pub frames_dropped_kernel: u64,
    /// ... because the kernel refused them (interface set down by hand).
    pub frames_dropped_error: u64,
    /// Address of the live stream (`--live-listen`), if any.
    pub stream_listen: Option<String>,
    /// Stream clients accepted (the handshake passed).
    pub clients_connected: u64,
    /// Stream clients connected now.
    pub clients_live: u64,
    /// Clients refused: wrong or missing key.
    pub clients_refused_key: u64,
    /// Clients refused: as many clients as allowed already.
    pub clients_refused_full: u64,
    /// Connections that did not complete the handshake in time or spoke
    /// something else.
    pub clients_handshake_failed: u64,
    /// Clients cut loose because they read too slowly (their queue was
    /// full): never buffered without bound, never waited for.
    pub clients_cut: u64,
    /// Clients that closed their connection.
    pub clients_left: u64,
    /// Events queued to stream clients (one per event per client).
    pub stream_frames_sent: u64,
    /// Events a client missed because it was cut at them.
    pub stream_frames_dropped: u64,
}

/// The counters behind [`LiveStats`] (atomics: each is counted by one
/// thread, read by the reporter).
#[derive(Debug, Default)]
pub(crate) struct LiveCounters {
    pub iface: Option<String>,
    pub tap: Option<Arc<tracer_live::iface::LiveCounters>>,
    pub stream_listen: Option<String>,
    pub clients_connected: AtomicU64,
    pub clients_live: AtomicU64,
    pub clients_refused_key: AtomicU64,
    pub clients_refused_full: AtomicU64,
    pub clients_handshake_failed: AtomicU64,
    pub clients_cut: AtomicU64,
    pub clients_left: AtomicU64,
    pub stream_frames_sent: AtomicU64,
    pub stream_frames_dropped: AtomicU64,
}

/// Add `n` to a counter.
pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl LiveCounters {
    /// The counts now.
    pub fn snapshot(&self) -> LiveStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let tap = self.tap.as_ref().map(|t| t.get()).unwrap_or_default();
        LiveStats {
            iface: self.iface.clone(),
            frames_sent: tap.frames_sent,
            frames_dropped: tap.dropped(),
            frames_dropped_queue: tap.dropped_queue,
            frames_dropped_kernel: tap.dropped_kernel,
            frames_dropped_error: tap.dropped_error,
            stream_listen: self.stream_listen.clone(),
            clients_connected: get(&self.clients_connected),
            clients_live: get(&self.clients_live),
            clients_refused_key: get(&self.clients_refused_key),
            clients_refused_full: get(&self.clients_refused_full),
            clients_handshake_failed: get(&self.clients_handshake_failed),
            clients_cut: get(&self.clients_cut),
            clients_left: get(&self.clients_left),
            stream_frames_sent: get(&self.stream_frames_sent),
            stream_frames_dropped: get(&self.stream_frames_dropped),
        }
    }
}
