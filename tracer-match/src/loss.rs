//! Lost events placed in time: an agent numbers its events 0, 1, 2, ...
//! (the capture header's `event_seq`), so a number that never shows up is
//! an event lost on the way (a lost datagram). Numbers arrive in time
//! order, not number order (CPUs drain interleaved), so a missing number
//! is only declared lost once it has stayed missing for a timeout; the
//! loss is then placed at the time the hole opened.
//!
//! Agent-side losses (ring overruns) never got a number: only the ISB's
//! `isb_ifdrop` total tells of them, and not when (see `Matcher::finish`).

/// An open hole: numbers `[from, to)` missing since `opened_ns`.
#[derive(Debug, Clone, Copy)]
struct Hole {
    from: u64,
    to: u64,
    opened_ns: u64,
}

/// Missing event numbers of one agent.
#[derive(Debug, Clone, Default)]
pub struct SeqTracker {
    next: Option<u64>,
    holes: Vec<Hole>,
    /// Events declared lost so far.
    pub lost: u64,
}

impl SeqTracker {
    /// Note event `seq` seen at `now_ns`.
    pub fn see(&mut self, seq: u64, now_ns: u64) {
        let Some(next) = self.next else {
            self.next = Some(seq + 1);
            return;
        };
        if seq >= next {
            if seq > next {
                self.holes.push(Hole {
                    from: next,
                    to: seq,
                    opened_ns: now_ns,
                });
            }
            self.next = Some(seq + 1);
            return;
        }
        // A late number: fill it in its hole (holes are few: linear scan).
        if let Some(i) = self.holes.iter().position(|h| h.from <= seq && seq < h.to) {
            let h = self.holes[i];
            match (seq == h.from, seq + 1 == h.to) {
                (true, true) => {
                    self.holes.remove(i);
                }
                (true, false) => self.holes[i].from += 1,
                (false, true) => self.holes[i].to -= 1,
                (false, false) => {
                    self.holes[i].to = seq;
                    self.holes.insert(
                        i + 1,
                        Hole {
                            from: seq + 1,
                            to: h.to,
                            opened_ns: h.opened_ns,
                        },
                    );
                }
            }
        }
    }

    /// Is a hole that opened within `[lo, hi]` still open?
    pub fn open_within(&self, lo: u64, hi: u64) -> bool {
        self.holes.iter().any(|h| (lo..=hi).contains(&h.opened_ns))
    }

    /// Declare lost the holes open since before `older_than_ns`; calls
    /// `lost(opened_ns, count)` for each.
    pub fn expire(&mut self, older_than_ns: u64, mut lost: impl FnMut(u64, u64)) {
        let total = &mut self.lost;
        self.holes.retain(|h| {
            if h.opened_ns < older_than_ns {
                *total += h.to - h.from;
                lost(h.opened_ns, h.to - h.from);
                false
            } else {
                true
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn late_numbers_fill_holes_and_the_rest_is_lost_where_it_opened() {
        let mut t = SeqTracker::default();
        for (seq, ts) in [(10, 100), (13, 110), (11, 120), (20, 130), (15, 140)] {
            t.see(seq, ts);
        }
        // Missing: 12 (opened 110), 14 and 16..20 (opened 130).
        let mut got = Vec::new();
        t.expire(125, |at, n| got.push((at, n)));
        assert_eq!(got, vec![(110, 1)]);
        t.see(17, 150);
        t.expire(1000, |at, n| got.push((at, n)));
        assert_eq!(got, vec![(110, 1), (130, 1), (130, 1), (130, 2)]);
        assert_eq!(t.lost, 5);
    }
}
