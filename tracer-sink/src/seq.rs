//! Per-agent datagram and event sequence tracking: gaps, late datagrams
//! that fill them, duplicates, and the bounds that keep a forged sequence
//! number from being trusted.
//!
//! Both ids that key an agent (`agent_id`, `boot_id`) are visible on the
//! wire, so anyone who can send UDP to the sink can send a datagram that
//! claims to be from a live agent. Without authentication such a datagram
//! cannot be told from a real one; what the tracker guarantees is that it
//! cannot do damage out of proportion:
//!
//! - **Forward jumps are bounded.** Relative to the agent's trusted
//!   position (the highest sequence accepted in order), a datagram may skip
//!   at most as many datagrams as the jump budget holds: [`MAX_SEQ_JUMP`]
//!   at most, refilled at [`SEQ_JUMP_REFILL_PER_S`] per second and spent by
//!   every accepted gap, so forgeries cannot walk the position ahead in
//!   many small steps either. The events it skips must fit in the skipped
//!   datagrams ([`MAX_RECORDS_PER_DATAGRAM`] each) and its event sequence
//!   must not go back. A datagram further back than [`MAX_SEQ_JUMP`] is
//!   just as suspect.
//! - **A suspect datagram changes nothing**: it is rejected (`seq_jump`),
//!   counted, and neither moves the position, nor counts loss, nor updates
//!   the clock state or the host name.
//! - **A real jump is followed after all** (a long network outage, a reset
//!   counter): when [`RESYNC_DATAGRAMS`] suspect datagrams continue each
//!   other over at least [`RESYNC_QUIET`] while nothing arrives at the
//!   trusted position, the tracker moves to the new position (a `resync`;
//!   the distance is not counted as loss, since it cannot be verified).
//!   An agent that sends nothing for [`RESYNC_QUIET`] can thus be taken
//!   over by a forger who keeps a consistent stream going; only
//!   authenticated datagrams close that.
//! - **The agent-side loss counter rises by at most [`MAX_LOST_STEP`] per
//!   datagram** ([`bounded_lost`]); a larger claim is cut and counted.
//! - **Gap tracking has a hard memory bound**: at most [`MAX_GAP_RANGES`]
//!   ranges per agent (and what the caller allows in total). At the bound a
//!   late datagram no longer splits its range: the range is marked
//!   *uncertain*, and later fills of it are accepted without lowering the
//!   loss counters (an exact duplicate inside it can no longer be
//!   recognised). Loss is then overstated, never understated, and a real
//!   late datagram is still accepted, never `stale`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tracer_codec::{HEADER_FIXED_LEN, MAX_DATAGRAM_LEN, RECORD_HEADER_LEN};

/// Largest number of datagrams one accepted datagram may skip (about 10 s
/// of the 1 M events/s design rate in MTU-sized datagrams). Also how far
/// back a late datagram may be.
pub const MAX_SEQ_JUMP: u64 = 1 << 20;

/// Rate (datagrams per second) at which the jump budget refills: about
/// 1.3 M events/s of real loss in MTU-sized datagrams, above the design
/// rate, so real loss never runs it dry.
pub const SEQ_JUMP_REFILL_PER_S: u64 = 1 << 17;

/// Most records one datagram can hold (every record has at least its
/// 4-byte header): the events a gap may skip per skipped datagram.
pub const MAX_RECORDS_PER_DATAGRAM: u64 =
    ((MAX_DATAGRAM_LEN - HEADER_FIXED_LEN) / RECORD_HEADER_LEN) as u64;

/// Largest rise of the agent's cumulative `lost_events` taken from one
/// datagram (16.7 M: an agent reports its losses at least every clock
/// interval, and losing more between two datagrams is not plausible).
pub const MAX_LOST_STEP: u64 = 1 << 24;

/// Consistent suspect datagrams needed to follow a real jump.
pub const RESYNC_DATAGRAMS: u64 = 8;

/// How long the trusted position must stay silent, while suspect
/// datagrams continue each other, before the tracker follows them. An
/// agent sends a clock event every clock interval (1 s by default), so a
/// live agent is never silent this long.
pub const RESYNC_QUIET: Duration = Duration::from_secs(3);

/// Datagrams a candidate stream may skip between two of its datagrams and
/// still count as continuing (loss and reordering on the way).
pub const CANDIDATE_SLACK: u64 = 64;

/// Largest number of gap ranges remembered per agent.
pub const MAX_GAP_RANGES: usize = 4096;

/// What one datagram did to an agent's sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqVerdict {
    /// Next in sequence (or the first datagram seen from this agent).
    InOrder,
    /// Ahead of sequence: `datagrams` datagrams carrying `events` events are missing.
    Gap {
        /// Datagrams skipped.
        datagrams: u64,
        /// Events skipped (from `first_event_seq`).
        events: u64,
    },
    /// A late datagram that fills a gap.
    LateFill {
        /// The gap had been counted as loss and the counters were lowered
        /// (gaps before the first datagram seen are not counted).
        counted: bool,
        /// It fell into an uncertain range (see the module doc): accepted,
        /// loss counters left as they were.
        uncertain: bool,
    },
    /// Already received: rejected.
    Duplicate,
    /// Older than every gap still remembered: rejected.
    Stale,
    /// A jump beyond the bounds: rejected, nothing changed.
    Suspect,
    /// The tracker followed a consistent stream of suspect datagrams to a
    /// new position; this datagram is accepted as the first there.
    Resync {
        /// The trusted position before (next expected seq).
        from: u64,
        /// The datagram's seq.
        to: u64,
    },
}

impl SeqVerdict {
    /// True when the datagram is written.
    pub fn accepted(self) -> bool {
        !matches!(
            self,
            SeqVerdict::Duplicate | SeqVerdict::Stale | SeqVerdict::Suspect
        )
    }

    /// True when the datagram is the newest of the trusted position (its
    /// clock state and host name are the agent's current ones).
    pub fn is_newest(self) -> bool {
        matches!(
            self,
            SeqVerdict::InOrder | SeqVerdict::Gap { .. } | SeqVerdict::Resync { .. }
        )
    }
}

/// A range of missing datagram sequence numbers, `[start, end)`.
#[derive(Debug, Clone, Copy)]
struct Missing {
    end: u64,
    /// False for the range before the first datagram seen (the sink may
    /// simply have started late): filling it corrects no loss counter.
    counted: bool,
    /// Some sequence numbers inside were received (not split out at the
    /// memory bound): a fill may be a duplicate.
    uncertain: bool,
}

/// Suspect datagrams that continue each other: maybe the agent really
/// jumped.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    first_at: Instant,
    next_seq: u64,
    next_event_seq: u64,
    count: u64,
}

/// Datagram and event sequence tracking of one agent.
#[derive(Debug)]
pub struct SeqTracker {
    started: bool,
    /// Highest trusted datagram seq + 1.
    next_seq: u64,
    /// `first_event_seq + event_count` of the highest trusted datagram.
    next_event_seq: u64,
    /// Missing datagram ranges by start.
    missing: BTreeMap<u64, Missing>,
    /// Every seq below this is either received or forgotten.
    floor: u64,
    /// Datagrams the next gaps may still skip.
    budget: u64,
    /// When the budget was last refilled.
    budget_at: Option<Instant>,
    candidate: Option<Candidate>,
    /// Net datagrams missing (gaps minus late fills).
    pub datagram_gaps: u64,
    /// Net events missing according to `first_event_seq`.
    pub event_gaps: u64,
}

impl Default for SeqTracker {
    fn default() -> Self {
        SeqTracker {
            started: false,
            next_seq: 0,
            next_event_seq: 0,
            missing: BTreeMap::new(),
            floor: 0,
            budget: MAX_SEQ_JUMP,
            budget_at: None,
            candidate: None,
            datagram_gaps: 0,
            event_gaps: 0,
        }
    }
}

/// True when `skipped_events` fit in `skipped_datagrams` datagrams plus
/// the one at hand.
fn events_fit(skipped_datagrams: u64, skipped_events: u64) -> bool {
    skipped_events <= skipped_datagrams.saturating_add(1) * MAX_RECORDS_PER_DATAGRAM
}

/// The agent's cumulative loss after a datagram reporting `reported`, from
/// `current`: it rises by at most [`MAX_LOST_STEP`] (a cumulative counter
/// never falls; an older, smaller value changes nothing). Returns the new
/// value and whether the claim was cut.
pub fn bounded_lost(current: u64, reported: u64) -> (u64, bool) {
    if reported <= current {
        (current, false)
    } else if reported - current > MAX_LOST_STEP {
        (current + MAX_LOST_STEP, true)
    } else {
        (reported, false)
    }
}

impl SeqTracker {
    /// Gap ranges held (the tracker's memory is about 48 bytes each).
    pub fn gap_ranges(&self) -> usize {
        self.missing.len()
    }

    /// Account one datagram received at `now`; the caller rejects it
    /// unless [`SeqVerdict::accepted`]. `may_grow` is false when the caller
    /// allows no more gap ranges (a bound over all agents).
    pub fn observe(
        &mut self,
        seq: u64,
        first_event_seq: u64,
        event_count: u64,
        now: Instant,
        may_grow: bool,
    ) -> SeqVerdict {
        let end_event = first_event_seq.saturating_add(event_count);
        if !self.started {
            self.started = true;
            self.budget_at = Some(now);
            self.next_seq = seq.saturating_add(1);
            self.next_event_seq = end_event;
            if seq > 0 {
                // Only the part a late datagram may still come from.
                self.missing.insert(
                    seq.saturating_sub(MAX_SEQ_JUMP),
                    Missing {
                        end: seq,
                        counted: false,
                        uncertain: false,
                    },
                );
            }
            return SeqVerdict::InOrder;
        }
        if seq >= self.next_seq {
            let datagrams = seq - self.next_seq;
            self.refill(now);
            let plausible = datagrams <= self.budget
                && first_event_seq >= self.next_event_seq
                && events_fit(datagrams, first_event_seq - self.next_event_seq);
            if !plausible {
                return self.suspect(seq, first_event_seq, end_event, now);
            }
            let events = first_event_seq - self.next_event_seq;
            self.budget -= datagrams;
            self.candidate = None;
            if datagrams > 0 {
                self.add_gap(self.next_seq, seq, may_grow);
            }
            self.next_seq = seq.saturating_add(1);
            self.next_event_seq = end_event;
            self.datagram_gaps += datagrams;
            self.event_gaps += events;
            self.prune();
            return if datagrams == 0 && events == 0 {
                SeqVerdict::InOrder
            } else {
                SeqVerdict::Gap { datagrams, events }
            };
        }
        if self.next_seq - seq > MAX_SEQ_JUMP {
            return self.suspect(seq, first_event_seq, end_event, now);
        }
        // Late: does it fall into a remembered gap?
        let hit = self
            .missing
            .range(..=seq)
            .next_back()
            .filter(|(_, m)| m.end > seq)
            .map(|(&start, &m)| (start, m));
        match hit {
            Some((start, m)) => {
                self.candidate = None;
                self.fill(start, m, seq, event_count, may_grow)
            }
            None if seq < self.floor => SeqVerdict::Stale,
            None => SeqVerdict::Duplicate,
        }
    }

    /// Refill the jump budget for the time since the last refill.
    fn refill(&mut self, now: Instant) {
        let Some(at) = self.budget_at else {
            self.budget_at = Some(now);
            return;
        };
        if self.budget >= MAX_SEQ_JUMP {
            self.budget_at = Some(now);
            return;
        }
        let ns = now.saturating_duration_since(at).as_nanos();
        let add = ns * u128::from(SEQ_JUMP_REFILL_PER_S) / 1_000_000_000;
        if add == 0 {
            return;
        }
        let add = u64::try_from(add).unwrap_or(u64::MAX);
        self.budget = self.budget.saturating_add(add).min(MAX_SEQ_JUMP);
        // Advance by the time the tokens stand for, so that frequent calls
        // do not round the refill away.
        self.budget_at = Some(if self.budget >= MAX_SEQ_JUMP {
            now
        } else {
            at + Duration::from_nanos(add.saturating_mul(1_000_000_000) / SEQ_JUMP_REFILL_PER_S)
        });
    }

    /// A datagram beyond the bounds: remember it as a possible new
    /// position, and follow it once it has proved consistent.
    fn suspect(
        &mut self,
        seq: u64,
        first_event_seq: u64,
        end_event: u64,
        now: Instant,
    ) -> SeqVerdict {
        let continues = self.candidate.is_some_and(|c| {
            seq >= c.next_seq
                && seq - c.next_seq <= CANDIDATE_SLACK
                && first_event_seq >= c.next_event_seq
                && events_fit(seq - c.next_seq, first_event_seq - c.next_event_seq)
        });
        let c = match (&mut self.candidate, continues) {
            (Some(c), true) => {
                c.count += 1;
                c.next_seq = seq.saturating_add(1);
                c.next_event_seq = end_event;
                *c
            }
            _ => *self.candidate.insert(Candidate {
                first_at: now,
                next_seq: seq.saturating_add(1),
                next_event_seq: end_event,
                count: 1,
            }),
        };
        if c.count < RESYNC_DATAGRAMS || now.saturating_duration_since(c.first_at) < RESYNC_QUIET {
            return SeqVerdict::Suspect;
        }
        let from = self.next_seq;
        // The old position's gaps can no longer be filled (their loss
        // stays counted); nothing below the new position is trusted.
        self.missing.clear();
        self.floor = seq;
        self.next_seq = seq.saturating_add(1);
        self.next_event_seq = end_event;
        // No jump credit right after a resync: a forger's stream cannot
        // pull the position straight back.
        self.budget = 0;
        self.budget_at = Some(now);
        self.candidate = None;
        SeqVerdict::Resync { from, to: seq }
    }

    /// Remember the gap `[start, end)` (counted loss), within the bounds.
    fn add_gap(&mut self, start: u64, end: u64, may_grow: bool) {
        if self.missing.len() < MAX_GAP_RANGES && may_grow {
            self.missing.insert(
                start,
                Missing {
                    end,
                    counted: true,
                    uncertain: false,
                },
            );
        } else if let Some(mut last) = self.missing.last_entry() {
            // Merge with the newest range: the datagrams received between
            // them become indistinguishable from missing ones.
            let m = last.get_mut();
            m.end = end;
            m.counted = true;
            m.uncertain = true;
        } else {
            // Nowhere to remember it: the loss stays counted, and a late
            // datagram of it will be rejected as stale.
            self.floor = end;
        }
    }

    /// A late datagram `seq` inside the range `start` / `m`.
    fn fill(
        &mut self,
        start: u64,
        m: Missing,
        seq: u64,
        event_count: u64,
        may_grow: bool,
    ) -> SeqVerdict {
        let lower = start < seq;
        let upper = seq + 1 < m.end;
        if lower && upper && (m.uncertain || self.missing.len() >= MAX_GAP_RANGES || !may_grow) {
            // Splitting would add a range: keep it whole.
            if let Some(r) = self.missing.get_mut(&start) {
                r.uncertain = true;
            }
        } else {
            self.missing.remove(&start);
            if lower {
                self.missing.insert(start, Missing { end: seq, ..m });
            }
            if upper {
                self.missing.insert(seq + 1, m);
            }
        }
        if m.uncertain {
            return SeqVerdict::LateFill {
                counted: false,
                uncertain: true,
            };
        }
        if m.counted {
            self.datagram_gaps = self.datagram_gaps.saturating_sub(1);
            self.event_gaps = self.event_gaps.saturating_sub(event_count);
        }
        SeqVerdict::LateFill {
            counted: m.counted,
            uncertain: false,
        }
    }

    /// Forget ranges no late datagram may come from any more (further back
    /// than [`MAX_SEQ_JUMP`]); their loss stays counted.
    fn prune(&mut self) {
        let horizon = self.next_seq.saturating_sub(MAX_SEQ_JUMP);
        while let Some(first) = self.missing.first_entry() {
            if first.get().end > horizon {
                break;
            }
            let (_, m) = first.remove_entry();
            self.floor = self.floor.max(m.end);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    /// Observe with the clock stopped at `t0` and growth allowed.
    fn obs(t: &mut SeqTracker, t0: Instant, seq: u64, first: u64, n: u64) -> SeqVerdict {
        t.observe(seq, first, n, t0, true)
    }

    #[test]
    fn in_order_stream_has_no_gaps() {
        let t0 = Instant::now();
        let mut t = SeqTracker::default();
        for s in 0..10 {
            assert_eq!(obs(&mut t, t0, s, s * 5, 5), SeqVerdict::InOrder);
        }
        assert_eq!((t.datagram_gaps, t.event_gaps), (0, 0));
    }

    #[test]
    fn gap_then_late_fill_then_duplicate() {
        let t0 = Instant::now();
        let mut t = SeqTracker::default();
        obs(&mut t, t0, 0, 0, 3);
        // seq 1 (events 3..7) and 2 (events 7..9) lost
        assert_eq!(
            obs(&mut t, t0, 3, 9, 1),
            SeqVerdict::Gap {
                datagrams: 2,
                events: 6
            }
        );
        assert_eq!((t.datagram_gaps, t.event_gaps), (2, 6));
        let fill = SeqVerdict::LateFill {
            counted: true,
            uncertain: false,
        };
        assert_eq!(obs(&mut t, t0, 2, 7, 2), fill);
        assert_eq!((t.datagram_gaps, t.event_gaps), (1, 4));
        assert_eq!(obs(&mut t, t0, 2, 7, 2), SeqVerdict::Duplicate);
        assert_eq!(obs(&mut t, t0, 3, 9, 1), SeqVerdict::Duplicate);
        assert_eq!(obs(&mut t, t0, 1, 3, 4), fill);
        assert_eq!((t.datagram_gaps, t.event_gaps), (0, 0));
        assert_eq!(obs(&mut t, t0, 0, 0, 3), SeqVerdict::Duplicate);
    }

    #[test]
    fn late_start_is_not_loss_but_accepts_earlier_datagrams() {
        let t0 = Instant::now();
        let mut t = SeqTracker::default();
        assert_eq!(obs(&mut t, t0, 100, 1000, 10), SeqVerdict::InOrder);
        assert_eq!(
            obs(&mut t, t0, 99, 990, 10),
            SeqVerdict::LateFill {
                counted: false,
                uncertain: false
            }
        );
        assert_eq!(obs(&mut t, t0, 99, 990, 10), SeqVerdict::Duplicate);
        assert_eq!((t.datagram_gaps, t.event_gaps), (0, 0));
    }

    #[test]
    fn forward_jumps_beyond_the_bound_are_suspect_and_change_nothing() {
        let t0 = Instant::now();
        let mut t = SeqTracker::default();
        obs(&mut t, t0, 0, 0, 1);
        for (seq, first) in [
            (1 << 62, 1 << 62),          // far ahead
            (1 + MAX_SEQ_JUMP + 1, 100), // just past the bound
            (1, 1 << 40),                // next datagram, events far ahead
        ] {
            assert_eq!(obs(&mut t, t0, seq, first, 1), SeqVerdict::Suspect);
        }
        assert_eq!((t.datagram_gaps, t.event_gaps, t.gap_ranges()), (0, 0, 0));
        assert_eq!(obs(&mut t, t0, 1, 1, 1), SeqVerdict::InOrder);
        // An event sequence going back is suspect too.
        assert_eq!(obs(&mut t, t0, 2, 0, 1), SeqVerdict::Suspect);
        // Far back is suspect, not a late fill.
        let mut u = SeqTracker::default();
        obs(&mut u, t0, 5 * MAX_SEQ_JUMP, 5 * MAX_SEQ_JUMP, 1);
        assert_eq!(obs(&mut u, t0, 7, 7, 1), SeqVerdict::Suspect);
        // Exactly at the bound is a (counted) gap.
        let mut v = SeqTracker::default();
        obs(&mut v, t0, 0, 0, 1);
        assert_eq!(
            obs(&mut v, t0, 1 + MAX_SEQ_JUMP, 1 + MAX_SEQ_JUMP, 1),
            SeqVerdict::Gap {
                datagrams: MAX_SEQ_JUMP,
                events: MAX_SEQ_JUMP
            }
        );
    }

    #[test]
    fn the_jump_budget_stops_walking_and_refills_with_time() {
        let t0 = Instant::now();
        let mut t = SeqTracker::default();
        obs(&mut t, t0, 0, 0, 1);
        // Half the budget twice is fine, a third step is not.
        let half = MAX_SEQ_JUMP / 2;
        let mut s = 1;
        for _ in 0..2 {
            s += half;
            assert!(matches!(obs(&mut t, t0, s, s, 1), SeqVerdict::Gap { .. }));
            s += 1;
        }
        assert_eq!(obs(&mut t, t0, s + half, s + half, 1), SeqVerdict::Suspect);
        // A second later SEQ_JUMP_REFILL_PER_S more may be skipped.
        let later = at(t0, 1000);
        let j = SEQ_JUMP_REFILL_PER_S;
        assert!(matches!(
            t.observe(s + j, s + j, 1, later, true),
            SeqVerdict::Gap { datagrams, .. } if datagrams == j
        ));
        // Refill does not round away with frequent calls.
        let mut u = SeqTracker::default();
        obs(&mut u, t0, 0, 0, 1);
        let mut s = 1 + MAX_SEQ_JUMP;
        assert!(matches!(obs(&mut u, t0, s, s, 1), SeqVerdict::Gap { .. }));
        for k in 1..=1000u64 {
            // One datagram lost every 10 µs (100 k/s, below the refill
            // rate), each step refilling less than one token.
            s += 2;
            let now = t0 + Duration::from_micros(10 * k);
            let v = u.observe(s, s, 1, now, true);
            assert!(matches!(v, SeqVerdict::Gap { .. }), "{k}: {v:?}");
        }
    }

    #[test]
    fn a_consistent_quiet_jump_is_followed_after_the_quiet_time() {
        let t0 = Instant::now();
        let mut t = SeqTracker::default();
        obs(&mut t, t0, 0, 0, 1);
        obs(&mut t, t0, 1, 1, 1);
        let far = 1 << 40;
        let mut got = Vec::new();
        for k in 0..RESYNC_DATAGRAMS + 2 {
            let now = at(t0, k * 500);
            got.push(t.observe(far + k, far + k, 1, now, true));
        }
        let n = (RESYNC_DATAGRAMS as usize - 1).max(RESYNC_QUIET.as_millis() as usize / 500);
        assert!(
            got[..n].iter().all(|v| *v == SeqVerdict::Suspect),
            "{got:?}"
        );
        assert_eq!(
            got[n],
            SeqVerdict::Resync {
                from: 2,
                to: far + n as u64
            }
        );
        assert_eq!(got[n + 1], SeqVerdict::InOrder);
        assert_eq!((t.datagram_gaps, t.event_gaps), (0, 0));
        // The old position is now behind the floor.
        assert_eq!(t.observe(2, 2, 1, at(t0, 9000), true), SeqVerdict::Suspect);
    }

    #[test]
    fn a_live_agent_is_never_resynced_away() {
        let t0 = Instant::now();
        let mut t = SeqTracker::default();
        let mut real = 0u64;
        let far = 1u64 << 50;
        for k in 0..200u64 {
            let now = at(t0, k * 100);
            // The real agent sends one datagram per second, the forger a
            // consistent stream of 10 per 100 ms.
            if k % 10 == 0 {
                assert!(t.observe(real, real, 1, now, true).is_newest());
                real += 1;
            }
            for j in 0..10 {
                let s = far + k * 10 + j;
                assert_eq!(t.observe(s, s, 1, now, true), SeqVerdict::Suspect);
            }
        }
        assert_eq!((t.datagram_gaps, t.event_gaps), (0, 0));
    }

    #[test]
    fn gap_memory_is_bounded_and_real_late_data_stays_accepted() {
        let t0 = Instant::now();
        let mut t = SeqTracker::default();
        obs(&mut t, t0, 0, 0, 1);
        // One jump as far as allowed, then a million random datagrams
        // inside the gap.
        let top = MAX_SEQ_JUMP;
        obs(&mut t, t0, top, top, 1);
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..1_000_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let s = 1 + x % (top - 1);
            let v = obs(&mut t, t0, s, s, 1);
            assert!(matches!(
                v,
                SeqVerdict::LateFill { .. } | SeqVerdict::Duplicate
            ));
            assert!(t.gap_ranges() <= MAX_GAP_RANGES);
        }
        // The loss counters never went below what is really missing.
        assert!(t.datagram_gaps > 0);
        // Every real datagram of the gap is still accepted, in order.
        let mut stale = 0;
        for s in 1..top {
            if obs(&mut t, t0, s, s, 1) == SeqVerdict::Stale {
                stale += 1;
            }
        }
        assert_eq!(stale, 0);
    }

    #[test]
    fn many_small_gaps_merge_at_the_bound_and_stay_fillable() {
        let t0 = Instant::now();
        let mut t = SeqTracker::default();
        obs(&mut t, t0, 0, 0, 1);
        let mut seq = 0;
        for _ in 0..MAX_GAP_RANGES + 10 {
            seq += 2; // lose one datagram each time
            obs(&mut t, t0, seq, seq, 1);
        }
        assert_eq!(t.gap_ranges(), MAX_GAP_RANGES);
        assert_eq!(t.datagram_gaps, MAX_GAP_RANGES as u64 + 10);
        // The oldest gap is still remembered exactly.
        assert_eq!(
            obs(&mut t, t0, 1, 1, 1),
            SeqVerdict::LateFill {
                counted: true,
                uncertain: false
            }
        );
        // The newest ones were merged: accepted, counters kept.
        assert_eq!(
            obs(&mut t, t0, seq - 1, seq - 1, 1),
            SeqVerdict::LateFill {
                counted: false,
                uncertain: true
            }
        );
        assert_eq!(t.datagram_gaps, MAX_GAP_RANGES as u64 + 9);
    }

    #[test]
    fn no_growth_allowed_merges_instead() {
        let t0 = Instant::now();
        let mut t = SeqTracker::default();
        obs(&mut t, t0, 0, 0, 1);
        assert!(matches!(
            t.observe(10, 10, 1, t0, true),
            SeqVerdict::Gap { .. }
        ));
        assert!(matches!(
            t.observe(20, 20, 1, t0, false),
            SeqVerdict::Gap { .. }
        ));
        assert_eq!(t.gap_ranges(), 1);
        // A split is refused too.
        assert!(matches!(
            t.observe(5, 5, 1, t0, false),
            SeqVerdict::LateFill { .. }
        ));
        assert_eq!(t.gap_ranges(), 1);
    }

    #[test]
    fn lost_events_rise_by_a_bounded_step() {
        assert_eq!(bounded_lost(5, 3), (5, false));
        assert_eq!(bounded_lost(5, 9), (9, false));
        assert_eq!(bounded_lost(0, 1 << 62), (MAX_LOST_STEP, true));
        assert_eq!(
            bounded_lost(MAX_LOST_STEP, MAX_LOST_STEP + 20),
            (MAX_LOST_STEP + 20, false)
        );
    }
}
