//! Counters of an exchange client or responder.

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
