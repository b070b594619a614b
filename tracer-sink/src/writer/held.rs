//! The events the writer holds until their time has come: the reorder
//! buffer orders small references (batch slot, event number), and the
//! batches they point into wait in slots, each with a count of its events
//! not yet written; a batch goes back to the pool when the count reaches
//! zero. (A reference-counted batch per event cost a 24-byte entry and a
//! count update per event; this is 16 bytes and one decrement.)

use std::time::{Duration, Instant};

use crate::batch::{Batch, BatchPool, EventMeta};
use crate::reorder::{Release, ReorderBuffer};

/// One held event: its batch's slot and its number in the batch.
#[derive(Debug, Clone, Copy)]
pub(super) struct EventRef {
    slot: u32,
    index: u32,
}

/// A batch with events still in the reorder buffer.
struct Slot {
    batch: Batch,
    /// Its events not yet written.
    pending: u32,
}

/// Held events in time order, and their batches.
pub(super) struct Held {
    reorder: ReorderBuffer<EventRef>,
    slots: Vec<Option<Slot>>,
    /// Free entries of `slots`.
    free: Vec<u32>,
}

impl Held {
    /// Hold events up to `window`, at most `max_len` of them.
    pub fn new(window: Duration, max_len: usize) -> Self {
        Held {
            reorder: ReorderBuffer::new(window, max_len),
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Events held.
    pub fn len(&self) -> usize {
        self.reorder.len()
    }

    /// Hold every event of `b`, calling `each` on each; an empty batch
    /// goes straight back to `pool`.
    pub fn add(&mut self, b: Batch, pool: &BatchPool, mut each: impl FnMut(&EventMeta)) {
        if b.events.is_empty() {
            pool.give(b);
            return;
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        for (i, m) in b.events.iter().enumerate() {
            each(m);
            self.reorder.push(
                m.ts_ns,
                EventRef {
                    slot,
                    index: i as u32,
                },
            );
        }
        self.reorder.note_arrival(b.arrived, b.max_ts);
        let pending = b.events.len() as u32;
        self.slots[slot as usize] = Some(Slot { batch: b, pending });
    }

    /// Ask the CPU to fetch event `e`'s metadata into the cache (a hint;
    /// nothing is read).
    pub fn prefetch_meta(&self, e: EventRef) {
        if let Some(m) = self.get(e).and_then(|(b, i)| b.events.get(i)) {
            prefetch((m as *const EventMeta).cast());
        }
    }

    /// Ask the CPU to fetch event `e`'s record into the cache (reads its
    /// metadata, best fetched first with [`prefetch_meta`](Self::prefetch_meta)).
    pub fn prefetch_record(&self, e: EventRef) {
        if let Some((b, i)) = self.get(e) {
            let rec = b.record(i);
            // Records of MTU-sized datagrams span a few cache lines.
            for at in (0..rec.len()).step_by(64).take(4) {
                prefetch(rec[at..].as_ptr());
            }
        }
    }

    /// The current watermark at `now` (see [`ReorderBuffer::watermark`]).
    pub fn watermark(&mut self, now: Instant) -> u64 {
        self.reorder.watermark(now)
    }

    /// The events due from the oldest bucket with any (see
    /// [`ReorderBuffer::pop_due_run`]).
    pub fn pop_due_run(&mut self, watermark: u64, out: &mut Vec<(u64, EventRef)>) -> usize {
        self.reorder.pop_due_run(watermark, out)
    }

    /// The next event due (see [`ReorderBuffer::pop_due`]).
    pub fn pop_due(&mut self, watermark: u64) -> Option<(u64, EventRef, Release)> {
        self.reorder.pop_due(watermark)
    }

    /// The oldest event regardless of the watermark.
    pub fn pop_any(&mut self) -> Option<(u64, EventRef)> {
        self.reorder.pop_any()
    }

    /// The batch of a held event and its number in it.
    pub fn get(&self, e: EventRef) -> Option<(&Batch, usize)> {
        let s = self.slots.get(e.slot as usize)?.as_ref()?;
        Some((&s.batch, e.index as usize))
    }

    /// A popped event is written (or lost): its batch goes back to `pool`
    /// after its last one.
    pub fn done(&mut self, e: EventRef, pool: &BatchPool) {
        let Some(entry) = self.slots.get_mut(e.slot as usize) else {
            return;
        };
        let Some(s) = entry.as_mut() else {
            return;
        };
        s.pending -= 1;
        if s.pending == 0 {
            if let Some(s) = entry.take() {
                pool.give(s.batch);
            }
            self.free.push(e.slot);
        }
    }
}

/// A prefetch hint for the cache line at `p` (no-op off x86-64).
#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it reads nothing the program sees and
    // cannot fault, whatever the address; `p` points into a live slice.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(ts: &[u64]) -> Batch {
        let pool = BatchPool::default();
        let mut b = pool.take();
        for (i, &t) in ts.iter().enumerate() {
            b.data.push(i as u8);
            b.events.push(EventMeta {
                ts_ns: t,
                event_seq: i as u64,
                agent: 0,
                start: i as u32,
                len: 1,
                clock_source: 0,
                clock_state: 0,
            });
            b.max_ts = b.max_ts.max(t);
        }
        b
    }

    #[test]
    fn events_come_out_in_time_order_and_batches_are_reused() {
        let pool = BatchPool::default();
        let mut h = Held::new(Duration::from_secs(100), 1000);
        let mut seen = 0;
        h.add(batch(&[30, 10]), &pool, |_| seen += 1);
        h.add(batch(&[20]), &pool, |_| seen += 1);
        h.add(batch(&[]), &pool, |_| seen += 1);
        assert_eq!(seen, 3);
        let mut got = Vec::new();
        while let Some((ts, e)) = h.pop_any() {
            let (b, i) = h.get(e).unwrap();
            got.push((ts, b.record(i)[0]));
            h.done(e, &pool);
        }
        assert_eq!(got, [(10, 1), (20, 0), (30, 0)]);
        assert!(h.slots.iter().all(Option::is_none));
        assert_eq!(h.free.len(), 2);
        // The next batch takes a freed slot.
        h.add(batch(&[5]), &pool, |_| {});
        assert_eq!(h.slots.len(), 2);
    }
}
