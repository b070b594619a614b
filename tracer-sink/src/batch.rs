//! Messages from the receive task to the writer thread: accepted events in
//! batches (one allocation per batch, not per event) and new agents.

use std::sync::Mutex;
use std::time::Instant;

/// One accepted event, pointing into its batch's byte arena.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EventMeta {
    /// Timestamp to write: the event's global time, or the sink's receive
    /// time for kinds without one.
    pub ts_ns: u64,
    /// Per-agent event sequence number (EPB packet id).
    pub event_seq: u64,
    /// Agent index (see [`crate::agents::AgentTable`]).
    pub agent: u32,
    /// Offset of the wire record (kind, len, body) in [`Batch::data`].
    pub start: u32,
    /// Length of the wire record.
    pub len: u32,
    /// Clock source of the datagram that carried it.
    pub clock_source: u8,
    /// Clock state of the datagram that carried it.
    pub clock_state: u8,
}

/// Accepted events of one or more datagrams.
#[derive(Debug)]
pub(crate) struct Batch {
    /// The wire records, back to back.
    pub data: Vec<u8>,
    /// One entry per event, in arrival order.
    pub events: Vec<EventMeta>,
    /// When the first event of the batch arrived.
    pub arrived: Instant,
    /// Largest timestamp in the batch.
    pub max_ts: u64,
}

impl Batch {
    /// An empty batch with room for a typical burst.
    pub fn new() -> Self {
        Batch {
            data: Vec::with_capacity(256 * 1024),
            events: Vec::with_capacity(2048),
            arrived: Instant::now(),
            max_ts: 0,
        }
    }

    /// Empty it for reuse (keeps its allocations).
    pub fn clear(&mut self) {
        self.data.clear();
        self.events.clear();
        self.max_ts = 0;
        self.arrived = Instant::now();
    }

    /// Bytes of one event's wire record.
    pub fn record(&self, i: usize) -> &[u8] {
        let m = &self.events[i];
        &self.data[m.start as usize..(m.start + m.len) as usize]
    }
}

/// Batches the writer is done with, for the receive task to fill again:
/// their memory is already mapped, so reusing them spares the page faults
/// and allocator work of fresh ones at a million events per second.
#[derive(Debug, Default)]
pub(crate) struct BatchPool {
    free: Mutex<Vec<Batch>>,
}

impl BatchPool {
    /// Batches kept at most.
    const MAX: usize = 64;
    /// A batch that grew larger than this is not kept.
    const MAX_DATA: usize = 4 << 20;

    /// A cleared batch from the pool, or a new one.
    pub fn take(&self) -> Batch {
        let b = self.free.lock().unwrap_or_else(|p| p.into_inner()).pop();
        match b {
            Some(mut b) => {
                b.clear();
                b
            }
            None => Batch::new(),
        }
    }

    /// Return a batch whose events are all written.
    pub fn give(&self, b: Batch) {
        if b.data.capacity() > Self::MAX_DATA {
            return;
        }
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if free.len() < Self::MAX {
            free.push(b);
        }
    }
}

/// What the writer needs to describe an agent in an IDB and a capture record.
#[derive(Debug, Clone)]
pub(crate) struct AgentInfo {
    /// Agent index.
    pub index: u32,
    /// Agent id.
    pub agent_id: u64,
    /// Hostname.
    pub host: String,
    /// Clock source wire value at first sight.
    pub clock_source: u8,
    /// Incarnation (0 from a version-1 agent).
    pub incarnation: u64,
    /// Source address of its first datagram.
    pub source: std::net::SocketAddr,
}

/// Receive task to writer thread.
#[derive(Debug)]
pub(crate) enum ToWriter {
    /// A new agent; always sent before any batch holding its events.
    Agent(AgentInfo),
    /// Accepted events.
    Batch(Batch),
    /// Nothing new; time-based work is due (reorder age, rotation, retry).
    Tick,
}
