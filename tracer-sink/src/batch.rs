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

/// A batch whose capacity is more than this many times its content (and
/// above [`SLACK_MIN_BYTES`]) is not handed over as is, but copied into a
/// right-sized one (see [`Batch::take_fitting`]).
const SLACK_FACTOR: usize = 4;
/// Capacity below which slack does not matter.
const SLACK_MIN_BYTES: usize = 64 << 10;

impl Batch {
    /// An empty batch; it grows with the burst it receives.
    pub fn new() -> Self {
        Self::with_capacity(16 << 10, 128)
    }

    fn with_capacity(data: usize, events: usize) -> Self {
        Batch {
            data: Vec::with_capacity(data),
            events: Vec::with_capacity(events),
            arrived: Instant::now(),
            max_ts: 0,
        }
    }

    /// Bytes this batch holds allocated.
    pub fn capacity_bytes(&self) -> usize {
        self.data.capacity() + self.events.capacity() * std::mem::size_of::<EventMeta>()
    }

    fn content_bytes(&self) -> usize {
        self.data.len() + self.events.len() * std::mem::size_of::<EventMeta>()
    }

    /// The batch to hand to the writer, leaving `self` empty for the next
    /// burst. The writer holds a batch in its reorder buffer until its
    /// last event is written (one reorder window, 250 ms by default), and
    /// a batch keeps the capacity of the largest burst it ever held: a few
    /// datagrams in a batch sized for 8192 events, held by the thousand,
    /// made the sink's memory grow to hundreds of MB at 100 k events/s.
    /// So a batch with much more capacity than content is copied into a
    /// right-sized one (a small copy, by construction), and the large
    /// one stays here for the next burst. The memory the reorder buffer
    /// holds is then at most [`SLACK_FACTOR`] times its events' bytes.
    pub fn take_fitting(&mut self, pool: &BatchPool) -> Batch {
        let cap = self.capacity_bytes();
        if cap > SLACK_MIN_BYTES && self.content_bytes() * SLACK_FACTOR < cap {
            let mut b = Batch::with_capacity(self.data.len(), self.events.len());
            b.data.extend_from_slice(&self.data);
            b.events.extend_from_slice(&self.events);
            b.arrived = self.arrived;
            b.max_ts = self.max_ts;
            self.clear();
            b
        } else {
            std::mem::replace(self, pool.take())
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
    const MAX: usize = 16;
    /// A batch that grew larger than this is not kept (a full batch of
    /// 8192 MTU-datagram events holds about 1.5 MB).
    const MAX_BYTES: usize = 2 << 20;

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
        if b.capacity_bytes() > Self::MAX_BYTES {
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
    /// An agent expired (idle): write its last ISB in the current file and
    /// forget it; sent after every batch holding its events.
    Expire(crate::agents::ExpiredAgent),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(i: u32) -> EventMeta {
        EventMeta {
            ts_ns: u64::from(i),
            event_seq: u64::from(i),
            agent: 0,
            start: i * 100,
            len: 100,
            clock_source: 0,
            clock_state: 0,
        }
    }

    #[test]
    fn a_large_batch_with_few_events_is_handed_over_right_sized() {
        let pool = BatchPool::default();
        let mut b = Batch::new();
        // One burst makes it large...
        for i in 0..8192 {
            b.data.extend_from_slice(&[1u8; 100]);
            b.events.push(meta(i));
        }
        let full = b.take_fitting(&pool);
        assert_eq!(full.events.len(), 8192);
        // ... a pooled batch reused after it keeps that size; a few events
        // in it are copied out into a small batch, and it stays for reuse.
        pool.give(full);
        let mut b = pool.take();
        let big = b.capacity_bytes();
        assert!(big > 1 << 20);
        for i in 0..3 {
            b.data.extend_from_slice(&[2u8; 100]);
            b.events.push(meta(i));
        }
        let small = b.take_fitting(&pool);
        assert_eq!(small.events.len(), 3);
        assert_eq!(small.record(2), &[2u8; 100][..]);
        assert!(
            small.capacity_bytes() < 4 * 1024,
            "{}",
            small.capacity_bytes()
        );
        assert!(b.events.is_empty());
        assert_eq!(b.capacity_bytes(), big);
    }
}
