//! Bounded reorder buffer: releases events in global-timestamp order once
//! no straggler can precede them any more.
//!
//! Events from several agents (and several CPUs of one agent) arrive
//! slightly out of time order. An event is released once its timestamp is
//! at or below the *watermark*, the larger of
//! - the newest timestamp seen minus the window (event-time rule), and
//! - the largest timestamp of any batch that arrived at least one window
//!   ago in wall-clock time (so a quiet sink still writes, and no event
//!   waits much longer than the window).
//!
//! Memory is bounded by `max_len` events: past it the oldest event is
//! released at once (counted as an overflow), whatever the watermark.
//! Ties are broken by arrival order, so equal timestamps keep their order.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

struct Entry<T> {
    ts: u64,
    order: u64,
    item: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.ts, self.order) == (other.ts, other.order)
    }
}
impl<T> Eq for Entry<T> {}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Entry<T> {
    // Reversed: BinaryHeap is a max-heap and we want the oldest on top.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.ts, other.order).cmp(&(self.ts, self.order))
    }
}

/// Why an item left the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Its time had come (watermark).
    Ready,
    /// The buffer was full.
    Overflow,
}

/// A min-heap of items by `(timestamp, arrival order)` with a watermark.
pub struct ReorderBuffer<T> {
    heap: BinaryHeap<Entry<T>>,
    next_order: u64,
    window_ns: u64,
    window: Duration,
    max_len: usize,
    newest_ts: u64,
    /// `(arrival, max timestamp)` per batch, oldest first.
    arrivals: VecDeque<(Instant, u64)>,
    /// Largest timestamp of batches older than one window.
    aged_ts: u64,
}

impl<T> ReorderBuffer<T> {
    /// A buffer holding events up to `window` and at most `max_len` items.
    pub fn new(window: Duration, max_len: usize) -> Self {
        ReorderBuffer {
            heap: BinaryHeap::new(),
            next_order: 0,
            window_ns: window.as_nanos().min(u128::from(u64::MAX)) as u64,
            window,
            max_len: max_len.max(1),
            newest_ts: 0,
            arrivals: VecDeque::new(),
            aged_ts: 0,
        }
    }

    /// Items held.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Add one item.
    pub fn push(&mut self, ts: u64, item: T) {
        self.newest_ts = self.newest_ts.max(ts);
        self.heap.push(Entry {
            ts,
            order: self.next_order,
            item,
        });
        self.next_order += 1;
    }

    /// Record that a batch whose largest timestamp is `max_ts` arrived at `at`.
    pub fn note_arrival(&mut self, at: Instant, max_ts: u64) {
        match self.arrivals.back_mut() {
            // Coalesce arrivals within a millisecond: bounds the deque.
            Some((t, m)) if at.saturating_duration_since(*t) < Duration::from_millis(1) => {
                *m = (*m).max(max_ts)
            }
            _ => self.arrivals.push_back((at, max_ts)),
        }
    }

    /// The current watermark at wall-clock time `now`.
    pub fn watermark(&mut self, now: Instant) -> u64 {
        while let Some(&(at, m)) = self.arrivals.front() {
            if now.saturating_duration_since(at) < self.window {
                break;
            }
            self.aged_ts = self.aged_ts.max(m);
            self.arrivals.pop_front();
        }
        self.newest_ts
            .saturating_sub(self.window_ns)
            .max(self.aged_ts)
    }

    /// The next item due at `now` (watermark or overflow), oldest first.
    /// Call [`watermark`](Self::watermark) once and pass it in a loop.
    pub fn pop_due(&mut self, watermark: u64) -> Option<(u64, T, Release)> {
        let top = self.heap.peek()?;
        let why = if top.ts <= watermark {
            Release::Ready
        } else if self.heap.len() > self.max_len {
            Release::Overflow
        } else {
            return None;
        };
        self.heap.pop().map(|e| (e.ts, e.item, why))
    }

    /// The oldest item regardless of the watermark (shutdown, rotation).
    pub fn pop_any(&mut self) -> Option<(u64, T)> {
        self.heap.pop().map(|e| (e.ts, e.item))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_in_timestamp_order_after_the_window() {
        let mut r = ReorderBuffer::new(Duration::from_nanos(100), 1000);
        let now = Instant::now();
        for (ts, id) in [(50, 'a'), (10, 'b'), (30, 'c'), (10, 'd')] {
            r.push(ts, id);
        }
        r.note_arrival(now, 50);
        let w = r.watermark(now);
        assert_eq!(w, 0);
        assert!(r.pop_due(w).is_none());
        r.push(140, 'e');
        let w = r.watermark(now);
        assert_eq!(w, 40);
        let got: Vec<char> = std::iter::from_fn(|| r.pop_due(w).map(|x| x.1)).collect();
        assert_eq!(got, vec!['b', 'd', 'c']);
        let rest: Vec<char> = std::iter::from_fn(|| r.pop_any().map(|x| x.1)).collect();
        assert_eq!(rest, vec!['a', 'e']);
    }

    #[test]
    fn wall_clock_age_releases_a_quiet_buffer() {
        let mut r = ReorderBuffer::new(Duration::from_millis(10), 1000);
        let t0 = Instant::now();
        r.push(1_000_000_000, 1);
        r.note_arrival(t0, 1_000_000_000);
        let w0 = r.watermark(t0);
        assert!(r.pop_due(w0).is_none());
        let later = t0 + Duration::from_millis(11);
        let w = r.watermark(later);
        assert_eq!(r.pop_due(w).map(|x| x.1), Some(1));
    }

    #[test]
    fn overflow_releases_the_oldest() {
        let mut r = ReorderBuffer::new(Duration::from_secs(1000), 2);
        for ts in [5, 3, 4] {
            r.push(ts, ts);
        }
        let w = r.watermark(Instant::now());
        assert_eq!(r.pop_due(w), Some((3, 3, Release::Overflow)));
        assert!(r.pop_due(w).is_none());
        assert_eq!(r.len(), 2);
    }
}
