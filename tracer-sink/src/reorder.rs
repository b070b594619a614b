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
//! Items are kept in time buckets (see [`ReorderBuffer`]), not a heap.

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

/// log2 of the time span of one bucket in ns (65.5 µs).
const BUCKET_SHIFT: u32 = 16;
/// Buckets in the ring at most (about 4.3 s of event time); items further
/// ahead of the oldest bucket wait in a heap until the ring gets to them.
const MAX_BUCKETS: u64 = 1 << 16;
/// Empty bucket vectors kept for reuse.
const SPARE_BUCKETS: usize = 1024;

/// Items of one time slice, in arrival order until sorted.
struct Bucket<T> {
    items: VecDeque<(u64, T)>,
    /// Items are in `(timestamp, arrival)` order.
    sorted: bool,
    /// While sorted: no item is newer (0: none pushed). Kept here rather than
    /// read from `items`: the items' memory is usually cold (reused from a
    /// bucket released a window ago), and reading the last one made every
    /// push wait for a cache miss that a plain store does not.
    last_ts: u64,
}

impl<T> Bucket<T> {
    fn new(items: VecDeque<(u64, T)>) -> Self {
        Bucket {
            items,
            sorted: true,
            last_ts: 0,
        }
    }

    fn push(&mut self, ts: u64, item: T) {
        if self.last_ts > ts {
            self.sorted = false;
        }
        self.last_ts = ts;
        self.items.push_back((ts, item));
    }

    /// After items left: an empty bucket has no newest item (the next
    /// push keeps it sorted, as for a new bucket).
    fn emptied(&mut self) {
        if self.items.is_empty() {
            self.last_ts = 0;
        }
    }

    /// The oldest item, sorting first if needed.
    fn front(&mut self) -> Option<u64> {
        if !self.sorted {
            // Stable: equal timestamps keep their arrival order.
            self.items.make_contiguous().sort_by_key(|e| e.0);
            self.sorted = true;
            // The newest now comes last, whatever arrived last.
            self.last_ts = self.items.back().map_or(0, |e| e.0);
        }
        self.items.front().map(|e| e.0)
    }
}

/// A time-bucketed priority queue of items by `(timestamp, arrival order)`
/// with a watermark.
///
/// Items go into buckets of 2^16 ns of event time held in a ring that
/// starts at the oldest bucket; a bucket is sorted (stably, so ties keep
/// their arrival order, and only if its items arrived out of order) when
/// it reaches the front. Late items (older than the front bucket) join
/// the front bucket; items too far ahead wait in a heap. Cost per item is
/// O(1) plus a share of a small sort, instead of a binary heap's
/// O(log n) cache misses over hundreds of thousands of held events.
pub struct ReorderBuffer<T> {
    /// Bucket number `base + i` at index `i`.
    ring: VecDeque<Bucket<T>>,
    base: u64,
    /// Items whose bucket is `>= base + MAX_BUCKETS`.
    far: BinaryHeap<Entry<T>>,
    spare: Vec<VecDeque<(u64, T)>>,
    len: usize,
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
            ring: VecDeque::new(),
            base: 0,
            far: BinaryHeap::new(),
            spare: Vec::new(),
            len: 0,
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
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn new_bucket(&mut self) -> Bucket<T> {
        Bucket::new(self.spare.pop().unwrap_or_default())
    }

    /// Put an item into the ring (its bucket is below `base + MAX_BUCKETS`).
    fn place(&mut self, ts: u64, item: T) {
        let b = (ts >> BUCKET_SHIFT).max(self.base);
        let i = (b - self.base) as usize;
        while self.ring.len() <= i {
            let nb = self.new_bucket();
            self.ring.push_back(nb);
        }
        self.ring[i].push(ts, item);
    }

    /// Add one item.
    pub fn push(&mut self, ts: u64, item: T) {
        self.newest_ts = self.newest_ts.max(ts);
        self.len += 1;
        let b = ts >> BUCKET_SHIFT;
        if self.ring.is_empty() && self.far.is_empty() {
            self.base = b;
        }
        if b >= self.base + MAX_BUCKETS {
            self.far.push(Entry {
                ts,
                order: self.next_order,
                item,
            });
            self.next_order += 1;
        } else {
            self.place(ts, item);
        }
    }

    /// Move far items that the ring now covers into it, oldest first.
    fn pull_far(&mut self) {
        while self
            .far
            .peek()
            .is_some_and(|e| (e.ts >> BUCKET_SHIFT) < self.base + MAX_BUCKETS)
        {
            if let Some(e) = self.far.pop() {
                self.place(e.ts, e.item);
            }
        }
    }

    /// Timestamp of the oldest item (the front bucket sorted, empty
    /// buckets before it dropped).
    fn oldest(&mut self) -> Option<u64> {
        loop {
            match self.ring.front_mut() {
                None => {
                    let e = self.far.peek()?;
                    self.base = e.ts >> BUCKET_SHIFT;
                    self.pull_far();
                }
                Some(front) => {
                    if let Some(ts) = front.front() {
                        return Some(ts);
                    }
                    if let Some(b) = self.ring.pop_front() {
                        if self.spare.len() < SPARE_BUCKETS {
                            self.spare.push(b.items);
                        }
                    }
                    self.base += 1;
                    if !self.far.is_empty() {
                        self.pull_far();
                    }
                }
            }
        }
    }

    fn take_oldest(&mut self) -> Option<(u64, T)> {
        let front = self.ring.front_mut()?;
        let e = front.items.pop_front()?;
        front.emptied();
        self.len -= 1;
        Some(e)
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
        let ts = self.oldest()?;
        let why = if ts <= watermark {
            Release::Ready
        } else if self.len > self.max_len {
            Release::Overflow
        } else {
            return None;
        };
        self.take_oldest().map(|(ts, item)| (ts, item, why))
    }

    /// Move the items due at `watermark` (`Release::Ready`) from the
    /// oldest bucket that holds any into `out`, oldest first, and return
    /// how many: what [`pop_due`](Self::pop_due) would release one by one,
    /// without looking for the oldest bucket again for each. Call it until
    /// it returns 0, then [`pop_due`](Self::pop_due) for what overflow
    /// releases.
    pub fn pop_due_run(&mut self, watermark: u64, out: &mut Vec<(u64, T)>) -> usize {
        match self.oldest() {
            Some(ts) if ts <= watermark => {}
            _ => return 0,
        }
        let Some(front) = self.ring.front_mut() else {
            return 0;
        };
        // Sorted by `oldest`: the due items are a prefix.
        let n = front.items.partition_point(|e| e.0 <= watermark);
        out.extend(front.items.drain(..n));
        front.emptied();
        self.len -= n;
        n
    }

    /// The oldest item regardless of the watermark (shutdown, rotation).
    pub fn pop_any(&mut self) -> Option<(u64, T)> {
        self.oldest()?;
        self.take_oldest()
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

    /// The bucket queue behaves exactly like a `(timestamp, arrival)`
    /// ordered map: near-sorted streams, ties, late items, items far
    /// ahead (beyond the ring), overflow, interleaved pushes and pops.
    #[test]
    fn matches_an_ordered_map_reference() {
        use std::collections::BTreeMap;
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for max_len in [5usize, 300, 1_000_000] {
            let mut r = ReorderBuffer::new(Duration::from_millis(1), max_len);
            let mut reference: BTreeMap<(u64, u64), u64> = BTreeMap::new();
            let mut got = Vec::new();
            let mut want = Vec::new();
            let mut t = 1_000_000_000_000u64;
            let mut id = 0u64;
            for round in 0..3000u64 {
                for _ in 0..rnd() % 20 {
                    t += rnd() % 3000;
                    let ts = match rnd() % 50 {
                        0 => t + 10_000_000_000 + rnd() % 1_000_000, // far ahead
                        1 => t.saturating_sub(rnd() % 50_000_000),   // very late
                        2 | 3 => t - t % 1000,                       // ties
                        4 if round % 500 == 7 => u64::MAX - rnd() % 3, // absurd
                        _ => t.saturating_sub(rnd() % 200_000),      // jitter
                    };
                    r.push(ts, id);
                    reference.insert((ts, id), id);
                    id += 1;
                }
                let wm = if rnd() % 7 == 0 {
                    t.saturating_sub(100_000)
                } else {
                    t.saturating_sub(1_000_000)
                };
                // Runs, then single pops for the overflow, on every other
                // round: both must release the same items in one order.
                let mut run = Vec::new();
                while round % 2 == 0 && r.pop_due_run(wm, &mut run) > 0 {
                    got.extend(run.drain(..).map(|(ts, v)| (ts, v, Release::Ready)));
                }
                while let Some(x) = r.pop_due(wm) {
                    got.push(x);
                }
                while let Some((&(ts, _), _)) = reference.iter().next() {
                    let why = if ts <= wm {
                        Release::Ready
                    } else if reference.len() > max_len {
                        Release::Overflow
                    } else {
                        break;
                    };
                    let ((ts, _), v) = reference.pop_first().unwrap();
                    want.push((ts, v, why));
                }
                assert_eq!(got.len(), want.len(), "round {round}");
                assert_eq!(r.len(), reference.len());
            }
            while let Some((ts, v)) = r.pop_any() {
                got.push((ts, v, Release::Ready));
            }
            while let Some(((ts, _), v)) = reference.pop_first() {
                want.push((ts, v, Release::Ready));
            }
            assert!(r.is_empty());
            assert_eq!(got, want, "max_len {max_len}");
        }
    }
}
