//! Freshness with a key: what tells a replayed datagram from a late one
//! beyond one sink process and one agent-table entry (docs/security.md).
//!
//! A tag proves who made a datagram, not when: a datagram recorded on the
//! way can be sent again, and a per-incarnation replay window
//! ([`crate::peers::ReplayWindow`]) forgets everything when the sink
//! restarts or the agent's entry expires. So every version-3 datagram
//! carries, under its tag, the `sink_instance` of the newest
//! acknowledgement its agent took and the agent's CLOCK_MONOTONIC at
//! sending. This sink's instance is random per process: a datagram bound
//! to it was made after it started, and so cannot be a replay from
//! before. A datagram bound to another instance (or to none: the agent has
//! not heard from this sink yet) is taken only when it was sent after this
//! sink started, which the sink reads off the agent's own clock: once the
//! agent has sent one datagram bound to this sink (the anchor: its
//! `sent_mono_ns` and when it arrived here), any other datagram of the
//! same incarnation was sent `anchor.sent_mono_ns - sent_mono_ns` before
//! the anchor left. Until the anchor exists, such datagrams are held (and
//! the agent is sent an acknowledgement that binds it); when it comes
//! they are judged, when it does not come in [`HOLD_TIMEOUT`] they are
//! refused as `unconfirmed`. Incarnations whose agent expired keep the
//! top of their sequence, so their old datagrams stay refused.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tracer_codec::{DatagramHeaderRef, WIRE_VERSION};

use crate::agents::AgentKey;

/// Reject reasons of freshness, added to the sink's reasons.
pub const FRESHNESS_REASONS: &[&str] = &["auth_old_version", "stale", "unconfirmed"];

/// How long before this sink started a datagram bound elsewhere may have
/// been sent and still be taken: covers a datagram in flight when the
/// socket opened and the rate difference of the two hosts' clocks between
/// the datagram and the anchor (100 ppm over 100 s is 10 ms). A datagram
/// recorded less than this before the sink started can be replayed into
/// it once: the limit of this scheme.
pub const START_SLACK: Duration = Duration::from_millis(50);
/// Longest a datagram waits for its agent to bind to this sink. Agents
/// send at least one clock event a second and read acknowledgements every
/// poll, so a live agent binds within about a second.
pub const HOLD_TIMEOUT: Duration = Duration::from_secs(5);
/// Datagrams held per incarnation.
pub const MAX_HELD_PER_AGENT: usize = 256;
/// Bytes held over all incarnations (64 KiB datagrams at most).
pub const MAX_HELD_BYTES: usize = 16 << 20;
/// Incarnations remembered (anchor, retired sequence top). Only
/// authenticated datagrams create one, so only real agents count;
/// beyond this the oldest is forgotten.
pub const MAX_KNOWN: usize = 65_536;

/// A datagram waiting for its agent to bind to this sink.
#[derive(Debug, Clone)]
pub struct Held {
    /// The datagram as received.
    pub bytes: Vec<u8>,
    /// Where it came from.
    pub src: SocketAddr,
    /// When it arrived.
    pub arrived: Instant,
    /// The agent's clock when it was sent.
    sent_mono_ns: u64,
}

/// What to do with a datagram.
#[derive(Debug)]
pub enum Verdict {
    /// Take it; before it, take `released` (held datagrams of its
    /// incarnation now shown fresh, in arrival order). `stale` held ones
    /// were refused.
    Take {
        /// Held datagrams to take first.
        released: Vec<Held>,
        /// Held datagrams found stale.
        stale: u64,
    },
    /// Refuse it for this reason.
    Refuse(&'static str),
    /// Held: send its agent an acknowledgement that binds it (`first`:
    /// the first datagram held for this incarnation).
    Hold {
        /// First one held for its incarnation.
        first: bool,
    },
}

#[derive(Debug, Default)]
struct Known {
    /// (sent_mono_ns, arrival) of the newest datagram bound to this sink.
    anchor: Option<(u64, Instant)>,
    /// Sequence top (+1) when its agent expired from the table.
    retired_top: Option<u64>,
    held: Vec<Held>,
    /// Where its datagrams came from last (for binding acks).
    src: Option<SocketAddr>,
}

/// The freshness state of one sink process.
#[derive(Debug)]
pub struct Freshness {
    instance: u64,
    started: Instant,
    known: HashMap<AgentKey, Known>,
    order: VecDeque<AgentKey>,
    held_bytes: usize,
    /// Held datagrams of incarnations forgotten past [`MAX_KNOWN`], not
    /// yet reported by [`Freshness::expire_held`].
    evicted: Vec<(AgentKey, SocketAddr, u64)>,
}

impl Freshness {
    /// For a sink whose acknowledgements carry `instance`, started (its
    /// socket opened) at `started`.
    pub fn new(instance: u64, started: Instant) -> Self {
        Freshness {
            instance,
            started,
            known: HashMap::new(),
            order: VecDeque::new(),
            held_bytes: 0,
            evicted: Vec::new(),
        }
    }

    fn entry(&mut self, key: AgentKey) -> &mut Known {
        if !self.known.contains_key(&key) {
            while self.known.len() >= MAX_KNOWN {
                let Some(old) = self.order.pop_front() else {
                    break;
                };
                if let Some(k) = self.known.remove(&old) {
                    if let Some(last) = k.held.last() {
                        self.evicted.push((old, last.src, k.held.len() as u64));
                    }
                    self.held_bytes -= k.held.iter().map(|h| h.bytes.len()).sum::<usize>();
                }
            }
            self.order.push_back(key);
        }
        self.known.entry(key).or_default()
    }

    /// Whether a datagram its agent sent at `sent_mono_ns` left after this
    /// sink started, judged against the incarnation's `anchor`.
    fn sent_after_start(&self, anchor: (u64, Instant), sent_mono_ns: u64) -> bool {
        let (anchor_mono, anchor_arrived) = anchor;
        let anchor_at = anchor_arrived
            .saturating_duration_since(self.started)
            .as_nanos() as i128;
        let sent_at = anchor_at - (i128::from(anchor_mono) - i128::from(sent_mono_ns));
        sent_at >= -(START_SLACK.as_nanos() as i128)
    }

    /// Judge an authenticated datagram with header `h`.
    pub fn judge(
        &mut self,
        h: &DatagramHeaderRef<'_>,
        bytes: &[u8],
        src: SocketAddr,
        arrived: Instant,
    ) -> Verdict {
        if h.version < WIRE_VERSION {
            return Verdict::Refuse("auth_old_version");
        }
        let instance = self.instance;
        let k = self.entry(AgentKey::of(h));
        k.src = Some(src);
        if k.retired_top.is_some_and(|top| h.seq < top) {
            return Verdict::Refuse("replay");
        }
        if h.sink_instance == instance {
            // Bound to this process: made after it started. The newest
            // such datagram anchors the agent's clock to this sink's.
            if k.anchor.is_none_or(|(m, _)| h.sent_mono_ns >= m) {
                k.anchor = Some((h.sent_mono_ns, arrived));
            }
            let held = std::mem::take(&mut k.held);
            let anchor = k.anchor;
            self.held_bytes -= held.iter().map(|h| h.bytes.len()).sum::<usize>();
            let (released, stale): (Vec<Held>, Vec<Held>) = held
                .into_iter()
                .partition(|d| anchor.is_some_and(|a| self.sent_after_start(a, d.sent_mono_ns)));
            return Verdict::Take {
                released,
                stale: stale.len() as u64,
            };
        }
        if let Some(anchor) = k.anchor {
            return if self.sent_after_start(anchor, h.sent_mono_ns) {
                Verdict::Take {
                    released: Vec::new(),
                    stale: 0,
                }
            } else {
                Verdict::Refuse("stale")
            };
        }
        if k.held.len() >= MAX_HELD_PER_AGENT || self.held_bytes + bytes.len() > MAX_HELD_BYTES {
            return Verdict::Refuse("unconfirmed");
        }
        let k = self
            .known
            .get_mut(&AgentKey::of(h))
            .expect("entry made above");
        k.held.push(Held {
            bytes: bytes.to_vec(),
            src,
            arrived,
            sent_mono_ns: h.sent_mono_ns,
        });
        let first = k.held.len() == 1;
        self.held_bytes += bytes.len();
        Verdict::Hold { first }
    }

    /// The agent of `key` left the agent table with sequence top `top`
    /// (highest datagram sequence number + 1): its older datagrams stay
    /// refused.
    pub fn retire(&mut self, key: AgentKey, top: u64) {
        let k = self.entry(key);
        k.retired_top = Some(k.retired_top.map_or(top, |t| t.max(top)));
    }

    /// Incarnations with held datagrams and where to send them the
    /// acknowledgement that binds them.
    pub fn awaiting(&self) -> Vec<(AgentKey, SocketAddr)> {
        let mut v: Vec<(AgentKey, SocketAddr)> = self
            .known
            .iter()
            .filter(|(_, k)| !k.held.is_empty())
            .filter_map(|(key, k)| Some((*key, k.src?)))
            .collect();
        v.sort_by_key(|(k, _)| (k.agent_id, k.incarnation));
        v
    }

    /// Drop what waited longer than [`HOLD_TIMEOUT`] at `now` (and what
    /// was held for incarnations forgotten since): the number of datagrams
    /// per incarnation.
    pub fn expire_held(&mut self, now: Instant) -> Vec<(AgentKey, SocketAddr, u64)> {
        let mut out = std::mem::take(&mut self.evicted);
        for (key, k) in self.known.iter_mut() {
            let before = k.held.len();
            let Some(src) = k.held.last().map(|h| h.src) else {
                continue;
            };
            k.held.retain(|h| {
                let keep = now.saturating_duration_since(h.arrived) < HOLD_TIMEOUT;
                if !keep {
                    self.held_bytes -= h.bytes.len();
                }
                keep
            });
            if k.held.len() < before {
                out.push((*key, src, (before - k.held.len()) as u64));
            }
        }
        out.sort_by_key(|(k, _, _)| (k.agent_id, k.incarnation));
        out
    }

    /// Datagrams held now.
    pub fn held(&self) -> usize {
        self.known.values().map(|k| k.held.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracer_codec::{DatagramHeader, WIRE_VERSION_2};

    const ME: u64 = 0xaaaa;
    const OLD: u64 = 0xbbbb;

    fn header(seq: u64, sink_instance: u64, sent_mono_ns: u64) -> DatagramHeaderRef<'static> {
        DatagramHeader {
            version: WIRE_VERSION,
            agent_id: 1,
            boot_id: [2; 16],
            seq,
            lost_events: 0,
            first_event_seq: seq * 10,
            clock_source: 0,
            clock_state: 0,
            event_count: 10,
            flags: 1,
            incarnation: 3,
            sink_instance,
            sent_mono_ns,
            hostname: "h",
        }
    }

    fn src() -> SocketAddr {
        "10.0.0.1:4000".parse().unwrap()
    }

    /// A sink started at `t0`; the agent's monotonic clock reads
    /// [`AGENT0`] then.
    fn sink() -> (Freshness, Instant) {
        let t0 = Instant::now();
        (Freshness::new(ME, t0), t0)
    }

    fn taken(v: &Verdict) -> Option<usize> {
        match v {
            Verdict::Take { released, .. } => Some(released.len()),
            _ => None,
        }
    }

    const AGENT0: u64 = 1_000_000_000_000;
    const MS: u64 = 1_000_000;

    #[test]
    fn datagrams_bound_to_this_sink_are_taken() {
        let (mut f, t0) = sink();
        let v = f.judge(&header(0, ME, AGENT0), b"x", src(), t0);
        assert_eq!(taken(&v), Some(0));
    }

    #[test]
    fn unbound_datagrams_wait_for_the_anchor_then_fresh_ones_pass_and_old_ones_do_not() {
        let (mut f, t0) = sink();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // Recorded 10 s before this sink started, bound to its predecessor.
        let replay = header(5, OLD, AGENT0 - 10_000 * MS);
        // Sent 100 ms after the start, before the agent heard from us.
        let late = header(100, OLD, AGENT0 + 100 * MS);
        assert!(matches!(
            f.judge(&replay, b"r", src(), at(150)),
            Verdict::Hold { first: true }
        ));
        assert!(matches!(
            f.judge(&late, b"l", src(), at(160)),
            Verdict::Hold { first: false }
        ));
        assert_eq!(f.held(), 2);
        assert_eq!(f.awaiting(), vec![(AgentKey::of(&late), src())]);
        // The agent's first datagram bound to us, sent 300 ms after the
        // start, arrives 1 ms later: it anchors the agent's clock.
        let v = f.judge(&header(101, ME, AGENT0 + 300 * MS), b"b", src(), at(301));
        let Verdict::Take { released, stale } = v else {
            panic!("{v:?}")
        };
        assert_eq!(stale, 1, "the replay is refused");
        assert_eq!(released.len(), 1);
        assert_eq!(released[0].bytes, b"l");
        assert_eq!(f.held(), 0);
        // With an anchor, unbound datagrams are judged at once.
        let v = f.judge(&header(102, OLD, AGENT0 + 290 * MS), b"x", src(), at(310));
        assert_eq!(taken(&v), Some(0));
        let v = f.judge(&header(6, OLD, AGENT0 - 9_000 * MS), b"x", src(), at(320));
        assert!(matches!(v, Verdict::Refuse("stale")), "{v:?}");
        // Sent just before the start: within the slack, taken; beyond, not.
        let just = AGENT0 - (START_SLACK.as_nanos() as u64) / 2;
        assert_eq!(
            taken(&f.judge(&header(7, 0, just), b"x", src(), at(330))),
            Some(0)
        );
        let before = AGENT0 - 2 * START_SLACK.as_nanos() as u64;
        assert!(matches!(
            f.judge(&header(8, 0, before), b"x", src(), at(340)),
            Verdict::Refuse("stale")
        ));
    }

    #[test]
    fn held_datagrams_of_an_agent_that_never_binds_are_dropped_after_the_timeout() {
        let (mut f, t0) = sink();
        for seq in 0..3 {
            f.judge(&header(seq, OLD, AGENT0), b"r", src(), t0);
        }
        assert!(f.expire_held(t0 + HOLD_TIMEOUT / 2).is_empty());
        let gone = f.expire_held(t0 + HOLD_TIMEOUT);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].2, 3);
        assert_eq!((f.held(), f.held_bytes), (0, 0));
    }

    #[test]
    fn holding_is_bounded() {
        let (mut f, t0) = sink();
        for seq in 0..MAX_HELD_PER_AGENT as u64 {
            assert!(matches!(
                f.judge(&header(seq, 0, AGENT0), b"r", src(), t0),
                Verdict::Hold { .. }
            ));
        }
        let v = f.judge(&header(9999, 0, AGENT0), b"r", src(), t0);
        assert!(matches!(v, Verdict::Refuse("unconfirmed")), "{v:?}");
    }

    #[test]
    fn an_expired_incarnation_keeps_its_old_datagrams_refused() {
        let (mut f, t0) = sink();
        let h = header(40, ME, AGENT0);
        assert_eq!(taken(&f.judge(&h, b"x", src(), t0)), Some(0));
        f.retire(AgentKey::of(&h), 41);
        let v = f.judge(&header(12, ME, AGENT0 - MS), b"x", src(), t0);
        assert!(matches!(v, Verdict::Refuse("replay")), "{v:?}");
        // The agent itself, still alive, goes on above the top.
        assert_eq!(
            taken(&f.judge(&header(41, ME, AGENT0 + MS), b"x", src(), t0)),
            Some(0)
        );
    }

    #[test]
    fn older_versions_carry_no_binding_and_are_refused() {
        let (mut f, t0) = sink();
        let mut h = header(0, ME, AGENT0);
        h.version = WIRE_VERSION_2;
        assert!(matches!(
            f.judge(&h, b"x", src(), t0),
            Verdict::Refuse("auth_old_version")
        ));
    }
}
