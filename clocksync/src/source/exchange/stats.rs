//! Counters of an exchange client or responder, and a handle through
//! which another thread reads a client's while it runs.

use std::sync::{Arc, Mutex};

/// Counters of a client or responder.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ExchangeStats {
    /// Exchanges completed.
    pub completed: u64,
    /// Exchanges that timed out.
    pub timeouts: u64,
    /// Messages ignored (stale sequence, bad format, unsynced responder).
    pub ignored: u64,
    /// Messages dropped because a key is set and their tag is missing or
    /// wrong (a forged or unkeyed peer).
    pub unauthenticated: u64,
    /// Datagrams that are no protocol message at all (wrong length, magic,
    /// version or kind): junk, or a forger without the format.
    pub malformed: u64,
    /// Of all the above, datagrams read away before an exchange: what had
    /// queued up since the last one (a flood fills the queue, and the
    /// kernel charges TX timestamps to it).
    pub drained: u64,
    /// Datagrams the kernel dropped before they reached the socket: the
    /// client's socket filter admits only answers to the exchange in
    /// flight (a flood never reaches the queue), and a full queue drops
    /// too. Not part of the counts above.
    pub dropped_by_kernel: u64,
}

/// A client's counters as of its last exchange, readable from any thread
/// (the client itself runs in the discipline's). Clones share them.
#[derive(Debug, Clone, Default)]
pub struct SharedExchangeStats(Arc<Mutex<ExchangeStats>>);

impl SharedExchangeStats {
    /// The counters as last published.
    pub fn get(&self) -> ExchangeStats {
        // Plain counters: a panic elsewhere cannot leave them half-written.
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publish the counters (the client does, after each exchange).
    pub fn publish(&self, stats: ExchangeStats) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = stats;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_what_is_published() {
        let a = SharedExchangeStats::default();
        let b = a.clone();
        let s = ExchangeStats {
            malformed: 3,
            ..Default::default()
        };
        a.publish(s);
        assert_eq!(b.get(), s);
    }
}
