//! The receiver's side of one flow on one host: its recent RX skbs by
//! sequence range, and the socket-level stages (DATA_READY, COPY,
//! READ_DONE) by time, kept for the matching window and then dropped.
//!
//! RX skbs are assembled as the dissector does (docs/reading-a-trace.md,
//! "One skb's frames, linked"): STACK_ENTRY starts an skb, TCP_INPUT joins
//! the latest skb of the same range that lacks it (or starts one when
//! STACK_ENTRY was not recorded). The later stages are resolved per byte
//! when a sender's skb is matched: see [`RxFlow::app_stages`].

use std::collections::{BTreeMap, VecDeque};

use crate::input::HostId;

/// An RX skb's range can be at most this long (BIG TCP included): how
/// far past a byte the search for the skb holding it looks.
pub const MAX_SKB_SPAN: i64 = 4 << 20;

/// Index entries gathering the items holding one byte may look at (the
/// dissector's PEER_MAX_EXAMINED): past it the byte is [`Crowded`]. It
/// keeps a crafted trace (thousands of copies of one byte, nested ranges)
/// linear; no real trace comes near it (a 64 KB GRO skb over 1448-byte
/// sends looks at about 90).
pub const MAX_COPY_SCAN: usize = 512;

/// More than [`MAX_COPY_SCAN`] entries lie where the items holding a byte
/// could be: which is whose is not worked out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crowded;

/// The entries of `map` (keyed by (end, id), ranges of at most `max_len`
/// bytes) whose range holds byte `b`, by `start(value)`; [`Crowded`] when
/// more than [`MAX_COPY_SCAN`] entries end where one holding `b` could.
pub fn scan_holding<V>(
    map: &BTreeMap<(i64, u64), V>,
    b: i64,
    max_len: i64,
    start: impl Fn(&V) -> i64,
) -> Result<Vec<(u64, &V)>, Crowded> {
    let mut out = Vec::new();
    // One holding b ends in (b, b + max_len].
    for (n, (&(_, id), v)) in map.range((b + 1, 0)..(b + 1 + max_len, 0)).enumerate() {
        if n == MAX_COPY_SCAN {
            return Err(Crowded);
        }
        if start(v) <= b {
            out.push((id, v));
        }
    }
    Ok(out)
}

/// One received skb (a GRO skb may carry many TX skbs).
#[derive(Debug, Clone, Copy)]
pub struct RxSkb {
    /// Unique id (claims by TX attempts).
    pub id: u64,
    /// First byte (unwrapped).
    pub start: i64,
    /// After the last byte (unwrapped).
    pub end: i64,
    /// Raw 32-bit range, for reports.
    pub range: (u32, u32),
    /// STACK_ENTRY global time, 0 if not recorded.
    pub stack_ns: u64,
    /// TCP_INPUT global time, 0 if not recorded.
    pub tcp_ns: u64,
    /// Hardware RX stamp (raw PHC ns), 0 if none.
    pub hw_ns: u64,
    /// The receiver's clock was locked when the skb arrived.
    pub locked: bool,
}

/// One STACK_ENTRY or TCP_INPUT of an skb, as the flow side takes it.
#[derive(Debug, Clone, Copy)]
pub struct Hit {
    /// Id for a new skb.
    pub id: u64,
    /// Global time.
    pub ts: u64,
    /// First byte (unwrapped).
    pub start: i64,
    /// After the last byte (unwrapped).
    pub end: i64,
    /// Raw 32-bit range.
    pub range: (u32, u32),
    /// Hardware RX stamp, 0 if none.
    pub hw_ns: u64,
    /// The host's clock was locked (LOCKED or LOCKED_STABLE).
    pub locked: bool,
}

impl RxSkb {
    /// When it reached the receiver's stack: STACK_ENTRY, else TCP_INPUT.
    pub fn arrival(&self) -> u64 {
        if self.stack_ns != 0 {
            self.stack_ns
        } else {
            self.tcp_ns
        }
    }
}

/// A socket-level event: its time and the unwrapped sequence number it
/// reports (`rcv_nxt` at DATA_READY, `copied_seq` at READ_DONE).
type SeqAt = (u64, i64);

/// The receiver side of one flow on one host.
#[derive(Debug)]
pub struct RxFlow {
    /// The receiving host.
    pub host: HostId,
    skbs: BTreeMap<(i64, u64), RxSkb>,
    /// The longest skb held so far (at most [`MAX_SKB_SPAN`]).
    max_len: i64,
    by_time: VecDeque<(u64, i64, u64)>,
    data_ready: VecDeque<SeqAt>,
    read_done: VecDeque<SeqAt>,
    /// COPY events: (time, start, end) of the queue skb copied.
    copies: VecDeque<(u64, i64, i64)>,
}

/// The receiver's socket-level stages of one byte.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AppStages {
    /// DATA_READY that made the byte readable.
    pub data_ready: Option<u64>,
    /// COPY of the queue skb holding it, in the read that returned it.
    pub copy: Option<u64>,
    /// READ_DONE of the read that returned it.
    pub read_done: Option<u64>,
}

impl RxFlow {
    /// An empty flow side.
    pub fn new(host: HostId) -> Self {
        RxFlow {
            host,
            skbs: BTreeMap::new(),
            max_len: 1,
            by_time: VecDeque::new(),
            data_ready: VecDeque::new(),
            read_done: VecDeque::new(),
            copies: VecDeque::new(),
        }
    }

    /// RX skbs held.
    pub fn len(&self) -> usize {
        self.skbs.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.skbs.is_empty()
            && self.data_ready.is_empty()
            && self.read_done.is_empty()
            && self.copies.is_empty()
    }

    /// A STACK_ENTRY.
    pub fn stack_entry(&mut self, h: Hit) {
        self.insert(h, true);
    }

    /// A TCP_INPUT: joins the latest skb of that range without one, else
    /// starts an skb (its STACK_ENTRY unrecorded).
    pub fn tcp_input(&mut self, h: Hit) {
        let joined = self
            .skbs
            .range_mut((h.end, 0)..=(h.end, u64::MAX))
            .rev()
            .take(MAX_COPY_SCAN)
            .find(|(_, s)| s.start == h.start && s.tcp_ns == 0);
        if let Some((_, s)) = joined {
            s.tcp_ns = h.ts;
            if s.hw_ns == 0 {
                s.hw_ns = h.hw_ns;
            }
            return;
        }
        self.insert(h, false);
    }

    fn insert(&mut self, h: Hit, stack: bool) {
        self.max_len = self.max_len.max((h.end - h.start).min(MAX_SKB_SPAN));
        self.skbs.insert(
            (h.end, h.id),
            RxSkb {
                id: h.id,
                start: h.start,
                end: h.end,
                range: h.range,
                stack_ns: if stack { h.ts } else { 0 },
                tcp_ns: if stack { 0 } else { h.ts },
                hw_ns: h.hw_ns,
                locked: h.locked,
            },
        );
        self.by_time.push_back((h.ts, h.end, h.id));
    }

    /// A DATA_READY at `ts` with `rcv_nxt`.
    pub fn data_ready(&mut self, ts: u64, rcv_nxt: i64) {
        self.data_ready.push_back((ts, rcv_nxt));
    }

    /// A READ_DONE at `ts` with `copied_seq`.
    pub fn read_done(&mut self, ts: u64, copied_seq: i64) {
        self.read_done.push_back((ts, copied_seq));
    }

    /// A COPY at `ts` of the queue skb `[start, end)`.
    pub fn copy(&mut self, ts: u64, start: i64, end: i64) {
        self.copies.push_back((ts, start, end));
    }

    /// The RX skbs holding byte `b`, arrived within `[lo_ns, hi_ns]`.
    pub fn holding(&self, b: i64, lo_ns: u64, hi_ns: u64) -> Result<Vec<RxSkb>, Crowded> {
        Ok(scan_holding(&self.skbs, b, self.max_len, |s| s.start)?
            .into_iter()
            .map(|(_, s)| *s)
            .filter(|s| (lo_ns..=hi_ns).contains(&s.arrival()))
            .collect())
    }

    /// The socket-level stages of byte `b` as seen through RX skb `skb`:
    /// - DATA_READY: the first one whose `rcv_nxt` passed `b`;
    /// - READ_DONE: the first one whose `copied_seq` passed `b`;
    /// - COPY: the last copy of a queue skb holding `b` at or before that
    ///   READ_DONE (a queue skb read in two reads is copied twice).
    ///
    /// A byte reaches the socket once, so only one RX skb holding it gets
    /// these stages: the last one that arrived before the byte became
    /// readable, preferring one TCP took in (TCP_INPUT recorded). A
    /// duplicate that arrived after the bytes were delivered, or a copy
    /// dropped between the stack's entry and TCP (netfilter) whose
    /// retransmission delivered the bytes, gets none. Each stage is kept
    /// only if it is not earlier than the one before it.
    /// `exact(value)` says whether the event that passed `b` with `value`
    /// can be the first one (under sampling, an earlier one may have
    /// been left out); when it cannot be, the stage is left unknown.
    pub fn app_stages(&self, b: i64, skb: &RxSkb, exact: impl Fn(i64) -> bool) -> AppStages {
        let first_past = |q: &VecDeque<SeqAt>| {
            let i = q.partition_point(|(_, v)| *v <= b);
            q.get(i).copied().filter(|(_, v)| exact(*v))
        };
        let ready = first_past(&self.data_ready);
        let read = first_past(&self.read_done);
        if let Some(by) = ready.or(read).map(|(ts, _)| ts) {
            let Ok(holding) = self.holding(b, 0, by) else {
                return AppStages::default();
            };
            let deliverer = holding
                .into_iter()
                .max_by_key(|s| (s.tcp_ns != 0, s.arrival(), s.id));
            if deliverer.map(|d| d.id) != Some(skb.id) {
                return AppStages::default();
            }
        }
        let mut out = AppStages::default();
        let mut floor = skb.arrival();
        if let Some((ts, _)) = ready.filter(|(ts, _)| *ts >= floor) {
            out.data_ready = Some(ts);
            floor = ts;
        }
        let read = read.filter(|(ts, _)| *ts >= floor);
        let ceiling = read.map_or(u64::MAX, |(ts, _)| ts);
        let upto = self.copies.partition_point(|(ts, _, _)| *ts <= ceiling);
        out.copy = self
            .copies
            .range(..upto)
            .rev()
            .take_while(|(ts, _, _)| *ts >= floor)
            .find(|(_, s, e)| *s <= b && b < *e)
            .map(|(ts, _, _)| *ts);
        out.read_done = read.map(|(ts, _)| ts);
        out
    }

    /// Drop what is older than `before_ns`.
    pub fn evict(&mut self, before_ns: u64) {
        while let Some(&(ts, end, id)) = self.by_time.front() {
            if ts >= before_ns {
                break;
            }
            self.by_time.pop_front();
            self.skbs.remove(&(end, id));
        }
        while self.data_ready.front().is_some_and(|e| e.0 < before_ns) {
            self.data_ready.pop_front();
        }
        while self.read_done.front().is_some_and(|e| e.0 < before_ns) {
            self.read_done.pop_front();
        }
        while self.copies.front().is_some_and(|e| e.0 < before_ns) {
            self.copies.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(id: u64, ts: u64, start: i64, end: i64) -> Hit {
        Hit {
            id,
            ts,
            start,
            end,
            range: (start as u32, end as u32),
            hw_ns: 0,
            locked: true,
        }
    }

    #[test]
    fn tcp_input_joins_its_stack_entry_and_ranges_find_bytes() {
        let mut f = RxFlow::new(1);
        f.stack_entry(hit(1, 100, 1000, 5000));
        f.stack_entry(hit(2, 110, 5000, 9000));
        f.tcp_input(hit(3, 120, 1000, 5000));
        f.tcp_input(hit(4, 130, 9000, 9500)); // no STACK_ENTRY
        assert_eq!(f.len(), 3);
        let hit: Vec<u64> = f
            .holding(4999, 0, 1000)
            .unwrap()
            .iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(hit, [1]);
        assert_eq!(f.holding(4999, 0, 1000).unwrap()[0].tcp_ns, 120);
        assert_eq!(f.holding(5000, 0, 1000).unwrap()[0].id, 2);
        assert_eq!(f.holding(9100, 0, 1000).unwrap()[0].arrival(), 130);
        assert_eq!(f.holding(9500, 0, 1000).unwrap().len(), 0);
        assert_eq!(
            f.holding(4999, 105, 1000).unwrap().len(),
            0,
            "arrived too early"
        );
        f.evict(111);
        assert_eq!(f.len(), 1);
    }

    #[test]
    fn socket_stages_per_byte() {
        let mut f = RxFlow::new(1);
        f.stack_entry(hit(1, 100, 0, 3000));
        f.tcp_input(hit(9, 101, 0, 3000));
        f.data_ready(105, 3000);
        // Two reads of the one queue skb: 0..2000 then 2000..3000.
        f.copy(110, 0, 3000);
        f.read_done(112, 2000);
        f.copy(120, 0, 3000);
        f.read_done(125, 3000);
        // A duplicate of the skb, arrived after its bytes were delivered.
        f.stack_entry(hit(2, 200, 0, 3000));
        let all = |_| true;
        let skb = |id| {
            f.holding(2999, 0, 1000)
                .unwrap()
                .into_iter()
                .find(|s| s.id == id)
                .unwrap()
        };
        let a = f.app_stages(1999, &skb(1), all);
        assert_eq!(
            (a.data_ready, a.copy, a.read_done),
            (Some(105), Some(110), Some(112))
        );
        let b = f.app_stages(2999, &skb(1), all);
        assert_eq!(
            (b.data_ready, b.copy, b.read_done),
            (Some(105), Some(120), Some(125))
        );
        assert_eq!(f.app_stages(2999, &skb(2), all), AppStages::default());
        // Under sampling, an inexact first event is left unknown.
        let s = f.app_stages(2999, &skb(1), |v| v != 3000);
        assert_eq!(
            s,
            AppStages {
                data_ready: None,
                copy: Some(120),
                read_done: None
            }
        );
    }

    #[test]
    fn the_copy_that_tcp_took_in_delivers_the_byte() {
        // The first copy reached the stack but was dropped before TCP
        // (netfilter); its retransmission was taken in and delivered.
        let mut f = RxFlow::new(1);
        f.stack_entry(hit(1, 100, 0, 1000));
        f.stack_entry(hit(2, 300, 0, 1000));
        f.tcp_input(hit(3, 301, 0, 1000));
        f.data_ready(302, 1000);
        f.read_done(310, 1000);
        let skb = |id| {
            f.holding(999, 0, 1000)
                .unwrap()
                .into_iter()
                .find(|s| s.id == id)
                .unwrap()
        };
        assert_eq!(f.app_stages(999, &skb(1), |_| true), AppStages::default());
        let got = f.app_stages(999, &skb(2), |_| true);
        assert_eq!((got.data_ready, got.read_done), (Some(302), Some(310)));
    }
}
