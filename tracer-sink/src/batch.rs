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
    /// one goes to the pool for a burst that needs it. The memory the
    /// reorder buffer holds is then at most [`SLACK_FACTOR`] times its
    /// events' bytes.
    ///
    /// Either way `self` is then replaced by the pool's batch that best
    /// fits a burst like this one. Right-sized copies are made in
    /// power-of-two sizes, so that under a steady load the pool's batches
    /// fit the next bursts and are used again (fresh memory costs a page
    /// fault per 4 KiB written into it), and bursts are handed over
    /// without a copy.
    pub fn take_fitting(&mut self, pool: &BatchPool) -> Batch {
        let (data, events) = (self.data.len(), self.events.len());
        let cap = self.capacity_bytes();
        if cap > SLACK_MIN_BYTES && self.content_bytes() * SLACK_FACTOR < cap {
            let mut b = pool.take_fit(data, events).unwrap_or_else(|| {
                Batch::with_capacity(data.next_power_of_two(), events.next_power_of_two())
            });
            b.data.extend_from_slice(&self.data);
            b.events.extend_from_slice(&self.events);
            b.arrived = self.arrived;
            b.max_ts = self.max_ts;
            // The next bursts are likely like this one: fill a batch of
            // their size, which can then be handed over without a copy,
            // and keep the large one for a burst that needs it.
            let next = pool.take_for(data + data / 2, events + events / 2);
            pool.give(std::mem::replace(self, next));
            b
        } else {
            // Half as much again: room for a somewhat larger next burst.
            std::mem::replace(self, pool.take_for(data + data / 2, events + events / 2))
        }
    }

    /// Room for `data` more bytes and `events` more events without
    /// growing as they are appended. A batch that must grow moves into a
    /// new allocation that copies only its content: `Vec::reserve`
    /// reallocates, and the allocator copies the whole old allocation,
    /// most of it never written in a cleared batch from the pool, which
    /// touched (and page-faulted) twice the memory; a third of the receive
    /// task's page faults at 3 M events/s were such copies.
    pub fn reserve(&mut self, data: usize, events: usize) {
        grow(&mut self.data, data);
        grow(&mut self.events, events);
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

/// Room in `v` for `more` elements: at least double the capacity, in a
/// fresh allocation holding a copy of the content only.
fn grow<T: Copy>(v: &mut Vec<T>, more: usize) {
    if v.capacity() - v.len() >= more {
        return;
    }
    let cap = v.len().saturating_add(more).max(v.capacity() * 2);
    let old = std::mem::replace(v, Vec::with_capacity(cap));
    v.extend_from_slice(&old);
}

/// Batches the writer is done with, for the receive task to fill again:
/// their memory is already mapped, so reusing them spares the page faults
/// and allocator work of fresh ones at a million events per second.
///
/// Bounded by bytes, not by count: under load the receive task hands over
/// a batch about every millisecond and the writer returns them in bursts,
/// so a pool of 16 ran empty and overflowed by turns (10 k page faults a
/// second at 1 M events/s); batches that size fit by the hundred in the
/// same 32 MB.
#[derive(Debug, Default)]
pub(crate) struct BatchPool {
    free: Mutex<Spare>,
}

/// The pool's batches and their capacity in bytes.
#[derive(Debug, Default)]
struct Spare {
    batches: Vec<Batch>,
    bytes: usize,
}

impl Spare {
    fn remove(&mut self, i: usize) -> Batch {
        let mut b = self.batches.swap_remove(i);
        self.bytes -= b.capacity_bytes();
        b.clear();
        b
    }
}

impl BatchPool {
    /// Bytes of spare batches kept at most.
    const MAX_TOTAL_BYTES: usize = 32 << 20;
    /// Spare batches kept at most (each take looks at all of them).
    const MAX: usize = 256;
    /// A batch that grew larger than this is not kept (a full batch of
    /// 8192 MTU-datagram events holds about 1.5 MB).
    const MAX_BYTES: usize = 2 << 20;

    fn lock(&self) -> std::sync::MutexGuard<'_, Spare> {
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A cleared batch from the pool (the largest), or a new one.
    pub fn take(&self) -> Batch {
        self.take_for(usize::MAX, usize::MAX)
    }

    /// A cleared batch for a burst of about `data` bytes and `events`
    /// events: the smallest in the pool that holds them, else the largest
    /// (it grows), else a new one.
    pub fn take_for(&self, data: usize, events: usize) -> Batch {
        let mut free = self.lock();
        let all = &free.batches;
        let holds = |b: &Batch| b.data.capacity() >= data && b.events.capacity() >= events;
        let pick = (0..all.len())
            .filter(|&i| holds(&all[i]))
            .min_by_key(|&i| all[i].capacity_bytes())
            .or_else(|| (0..all.len()).max_by_key(|&i| all[i].capacity_bytes()));
        match pick {
            Some(i) => free.remove(i),
            None if data == usize::MAX => Batch::new(),
            None => Batch::with_capacity(data.next_power_of_two(), events.next_power_of_two()),
        }
    }

    /// A cleared batch from the pool that holds `data` bytes and `events`
    /// events without growing and whose capacity is within
    /// [`SLACK_FACTOR`] times that content (the smallest), if there is one.
    pub fn take_fit(&self, data: usize, events: usize) -> Option<Batch> {
        let content = data + events * std::mem::size_of::<EventMeta>();
        let mut free = self.lock();
        let all = &free.batches;
        let i = (0..all.len())
            .filter(|&i| {
                let b = &all[i];
                b.data.capacity() >= data
                    && b.events.capacity() >= events
                    && b.capacity_bytes() <= content * SLACK_FACTOR
            })
            .min_by_key(|&i| all[i].capacity_bytes())?;
        Some(free.remove(i))
    }

    /// Return a batch whose events are all written (or one the receive
    /// task no longer needs).
    pub fn give(&self, b: Batch) {
        let size = b.capacity_bytes();
        if size > Self::MAX_BYTES {
            return;
        }
        let mut free = self.lock();
        if free.batches.len() < Self::MAX && free.bytes + size <= Self::MAX_TOTAL_BYTES {
            free.bytes += size;
            free.batches.push(b);
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
        // in it are copied out into a small batch, and it goes back to the
        // pool for reuse while a batch the size of the burst takes its
        // place.
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
        assert!(b.capacity_bytes() < big);
        assert_eq!(pool.take().capacity_bytes(), big);
    }

    #[test]
    fn reserve_keeps_the_content_and_leaves_room() {
        let mut b = Batch::with_capacity(8, 2);
        b.data.extend_from_slice(&[1, 2, 3]);
        b.events.push(meta(0));
        let cap = b.data.capacity();
        b.reserve(3, 1);
        assert_eq!(b.data.capacity(), cap, "room already there");
        b.reserve(100, 10);
        assert!(b.data.capacity() - b.data.len() >= 100 && b.data.capacity() >= 2 * cap);
        assert!(b.events.capacity() - b.events.len() >= 10);
        assert_eq!((&b.data[..], b.events.len()), (&[1u8, 2, 3][..], 1));
        assert_eq!(b.events[0].start, 0);
    }

    #[test]
    fn the_pool_hands_out_the_smallest_batch_that_holds_a_burst() {
        let pool = BatchPool::default();
        for n in [4usize, 64, 16] {
            let mut b = Batch::with_capacity(n << 10, n);
            b.data.push(1);
            pool.give(b);
        }
        let b = pool.take_for(10 << 10, 10);
        assert_eq!((b.data.capacity(), b.events.len()), (16 << 10, 0));
        assert!(b.data.is_empty(), "handed out cleared");
        // Nothing holds it: the largest, to grow.
        assert_eq!(pool.take_for(1 << 20, 1).data.capacity(), 64 << 10);
        // Within the slack only.
        assert!(pool.take_fit(100, 1).is_none());
        assert_eq!(pool.take_fit(2 << 10, 1).unwrap().data.capacity(), 4 << 10);
        // Bounded by bytes.
        for _ in 0..100 {
            pool.give(Batch::with_capacity(1 << 20, 1));
        }
        assert!(pool.lock().bytes <= BatchPool::MAX_TOTAL_BYTES);
    }
}
