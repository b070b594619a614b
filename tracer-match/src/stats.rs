//! What the matcher accumulates per direction (sender -> receiver host)
//! and per host, in bounded memory (histograms, counters, a few kept
//! packets).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::cpu::CpuCosts;
use crate::fasthash::FastSet;
use crate::flow::FlowKey;
use crate::hist::Hist;
use crate::input::HostId;
use crate::lifetime::{Life, GAPS};
use crate::loss::SeqTracker;

/// Why a sender's skb found no reception.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The receiver was tracing, nothing lost, and no RX skb held the
    /// byte: lost on the way (or its addresses/ports were rewritten).
    NoRx,
    /// The byte lies in a granule the receiver does not record at the
    /// sampling rate given with `--sample-every`.
    SampledOut,
    /// Sent before the receiver's first RX event or after its last.
    OutsideWindow,
    /// The receiver lost events near that time (numbers missing from its
    /// event sequence, or losses its ISB reports without a time).
    LostEvents,
    /// No traced host receives on the flow's destination address.
    PeerNotTraced,
}

/// Why a transmission whose byte did reach the receiver's stack was not
/// paired: the copies of that byte cannot be told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ambiguity {
    /// More copies of the byte reached the stack than transmissions of it
    /// were recorded: one went out untagged (bytes TCP moved out of the
    /// tagged skb, a tag on an skb already sent, a lost TX event), so the
    /// first recorded send may not be the first copy received.
    UnrecordedSend,
    /// Fewer copies reached the stack than were recorded sent: one was
    /// lost before the receiver's stack, and which one is not known.
    LostCopy,
    /// More than [`crate::receiver::MAX_COPY_SCAN`] transmissions or
    /// receptions lie where the byte's copies could be (thousands of
    /// copies of one byte, nested ranges: a crafted trace); not worked
    /// out, so that no trace costs more than linear time.
    TooManyCopies,
}

/// Transmissions counted as ambiguous, by reason.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Ambiguous {
    /// See [`Ambiguity::UnrecordedSend`].
    pub unrecorded_send: u64,
    /// See [`Ambiguity::LostCopy`].
    pub lost_copy: u64,
    /// See [`Ambiguity::TooManyCopies`].
    pub too_many_copies: u64,
}

impl Ambiguous {
    /// Count one.
    pub fn add(&mut self, why: Ambiguity) {
        match why {
            Ambiguity::UnrecordedSend => self.unrecorded_send += 1,
            Ambiguity::LostCopy => self.lost_copy += 1,
            Ambiguity::TooManyCopies => self.too_many_copies += 1,
        }
    }

    /// All of them.
    pub fn total(&self) -> u64 {
        self.unrecorded_send + self.lost_copy + self.too_many_copies
    }
}

/// Unmatched sender skbs by reason.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Unmatched {
    /// See [`Reason::NoRx`].
    pub no_rx: u64,
    /// Of `no_rx`: skbs sent again later (lost in the network, most likely).
    pub no_rx_then_retransmitted: u64,
    /// See [`Reason::SampledOut`].
    pub sampled_out: u64,
    /// See [`Reason::OutsideWindow`].
    pub outside_window: u64,
    /// See [`Reason::LostEvents`].
    pub lost_events: u64,
    /// See [`Reason::PeerNotTraced`].
    pub peer_not_traced: u64,
}

impl Unmatched {
    /// Count one.
    pub fn add(&mut self, r: Reason) {
        match r {
            Reason::NoRx => self.no_rx += 1,
            Reason::SampledOut => self.sampled_out += 1,
            Reason::OutsideWindow => self.outside_window += 1,
            Reason::LostEvents => self.lost_events += 1,
            Reason::PeerNotTraced => self.peer_not_traced += 1,
        }
    }

    /// All of them.
    pub fn total(&self) -> u64 {
        self.no_rx
            + self.sampled_out
            + self.outside_window
            + self.lost_events
            + self.peer_not_traced
    }
}

/// A kept packet ordered by a key (largest kept).
#[derive(Debug, Clone)]
pub struct Kept {
    key: i64,
    order: u64,
    /// The packet.
    pub life: Life,
}

impl PartialEq for Kept {
    fn eq(&self, o: &Self) -> bool {
        (self.key, self.order) == (o.key, o.order)
    }
}
impl Eq for Kept {}
impl PartialOrd for Kept {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Kept {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.key, Reverse(self.order)).cmp(&(o.key, Reverse(o.order)))
    }
}

/// The `n` packets with the largest key.
#[derive(Debug, Clone, Default)]
pub struct TopN {
    n: usize,
    heap: BinaryHeap<Reverse<Kept>>,
    order: u64,
}

impl TopN {
    /// Keep up to `n`.
    pub fn new(n: usize) -> Self {
        TopN {
            n,
            ..TopN::default()
        }
    }

    /// Offer one packet.
    pub fn offer(&mut self, key: i64, life: &Life) {
        if self.n == 0 {
            return;
        }
        if self.heap.len() >= self.n {
            if let Some(Reverse(min)) = self.heap.peek() {
                if min.key >= key {
                    return;
                }
            }
            self.heap.pop();
        }
        self.order += 1;
        self.heap.push(Reverse(Kept {
            key,
            order: self.order,
            life: life.clone(),
        }));
    }

    /// The kept packets, largest key first.
    pub fn sorted(&self) -> Vec<&Life> {
        let mut v: Vec<&Kept> = self.heap.iter().map(|r| &r.0).collect();
        v.sort_by(|a, b| b.cmp(a));
        v.into_iter().map(|k| &k.life).collect()
    }
}

/// One direction: sender host -> receiver host (`None`: a peer no traced
/// host receives for).
#[derive(Debug, Clone)]
pub struct Direction {
    /// Sending host.
    pub sender: HostId,
    /// Receiving host.
    pub receiver: Option<HostId>,
    /// Flows seen.
    pub flows: FastSet<FlowKey>,
    /// Sender skbs (transmissions: each SND_SW is one).
    pub attempts: u64,
    /// Of them, retransmissions.
    pub retransmits: u64,
    /// Matched to an RX skb.
    pub matched: u64,
    /// Matched retransmissions.
    pub matched_retransmits: u64,
    /// Matched, but the RX skb's STACK_ENTRY was not recorded (no one-way).
    pub matched_without_stack_entry: u64,
    /// Unmatched, by reason.
    pub unmatched: Unmatched,
    /// Neither matched nor unmatched: copies of the byte reached the
    /// receiver, but not one per recorded transmission.
    pub ambiguous: Ambiguous,
    /// One-way latency (SND_SW -> STACK_ENTRY), ns.
    pub one_way: Hist,
    /// Hardware one-way latency, ns.
    pub one_way_hw: Hist,
    /// Each gap of the life, ns.
    pub gaps: Vec<Hist>,
    /// Receives before their send (one-way < 0).
    pub violations: u64,
    /// Of them, with a clock not locked at either end (expected: the
    /// servo had not converged yet).
    pub violations_unlocked: u64,
    /// Packets with both clocks locked (that had a one-way latency).
    pub locked: u64,
    /// Smallest one-way latency among them.
    pub min_locked: Option<i64>,
    /// The packet with the most negative one-way latency.
    pub worst: Option<Life>,
    /// The packet with the smallest one-way latency (the offset bound).
    pub fastest: Option<Life>,
    /// The packet with the smallest one-way latency on locked clocks (the
    /// one behind `min_locked`).
    pub fastest_locked: Option<Life>,
}

impl Direction {
    /// An empty direction.
    pub fn new(sender: HostId, receiver: Option<HostId>) -> Self {
        Direction {
            sender,
            receiver,
            flows: FastSet::default(),
            attempts: 0,
            retransmits: 0,
            matched: 0,
            matched_retransmits: 0,
            matched_without_stack_entry: 0,
            unmatched: Unmatched::default(),
            ambiguous: Ambiguous::default(),
            one_way: Hist::new(),
            one_way_hw: Hist::new(),
            gaps: vec![Hist::new(); GAPS],
            violations: 0,
            violations_unlocked: 0,
            locked: 0,
            min_locked: None,
            worst: None,
            fastest: None,
            fastest_locked: None,
        }
    }

    /// Account one matched packet.
    pub fn add_matched(&mut self, life: &Life) {
        self.matched += 1;
        if life.retransmit {
            self.matched_retransmits += 1;
        }
        for (i, h) in self.gaps.iter_mut().enumerate() {
            if let Some(g) = life.gap(i) {
                h.add(g);
            }
        }
        if let Some(hw) = life.one_way_hw() {
            self.one_way_hw.add(hw);
        }
        let Some(ow) = life.one_way() else {
            self.matched_without_stack_entry += 1;
            return;
        };
        self.one_way.add(ow);
        if life.clocks_locked {
            self.locked += 1;
            if self.min_locked.is_none_or(|m| ow < m) {
                self.fastest_locked = Some(life.clone());
            }
            self.min_locked = Some(self.min_locked.map_or(ow, |m| m.min(ow)));
        }
        if ow < 0 {
            self.violations += 1;
            if !life.clocks_locked {
                self.violations_unlocked += 1;
            }
            if self
                .worst
                .as_ref()
                .and_then(Life::one_way)
                .is_none_or(|w| ow < w)
            {
                self.worst = Some(life.clone());
            }
        }
        if self
            .fastest
            .as_ref()
            .and_then(Life::one_way)
            .is_none_or(|w| ow < w)
        {
            self.fastest = Some(life.clone());
        }
    }
}

/// What a host's agent says about its clock (its CLOCK events).
#[derive(Debug, Clone, Copy, Default)]
pub struct ClockClaims {
    /// CLOCK events seen.
    pub updates: u64,
    /// Clock source (wire value) of the last event of the host.
    pub source: Option<u8>,
    /// Servo state (wire value) of the last CLOCK event.
    pub state: Option<u8>,
    /// Error estimate of the last CLOCK event, ns.
    pub last_error_ns: Option<u64>,
    /// Largest error estimate after the servo first locked, ns.
    pub max_locked_error_ns: Option<u64>,
    /// Largest |offset| the servo measured after it first locked, ns.
    pub max_locked_offset_ns: Option<u64>,
}

/// Per host.
#[derive(Debug, Clone, Default)]
pub struct HostStats {
    /// Events of the kinds used: TX, RX, TCP, CLOCK, CPU, other.
    pub events: [u64; 6],
    /// First and last event time.
    pub span: Option<(u64, u64)>,
    /// First and last RX event time (the window it could receive in).
    pub rx_span: Option<(u64, u64)>,
    /// Its clock claims.
    pub clock: ClockClaims,
    /// Its CPU events, summed per CPU.
    pub cpu: CpuCosts,
    /// Event-number trackers per agent id.
    pub seq: Vec<(u64, SeqTracker)>,
    /// Lost events placed in time: (when, how many), recent only.
    pub recent_losses: VecDeque<(u64, u64)>,
    /// All lost events placed in time.
    pub located_losses: u64,
    /// TX skbs tagged at SENDMSG that were never sent under that tag
    /// (a later sendmsg appended to the skb and took the tag over).
    pub sendmsg_never_sent: u64,
    /// SENDMSG tags the kernel put on an skb already sent (the whole write
    /// went out inside the call): their first transmission is unstamped.
    pub sendmsg_already_sent: u64,
    /// Tags whose first stamped send did not carry their byte: TCP had
    /// moved it into an earlier skb, which left unstamped.
    pub tags_moved: u64,
    /// TCP RETRANSMIT events it recorded.
    pub retransmit_events: u64,
}

impl HostStats {
    /// Note an event at `ts`.
    pub fn see(&mut self, ts: u64) {
        self.span = Some(match self.span {
            None => (ts, ts),
            Some((a, b)) => (a.min(ts), b.max(ts)),
        });
    }

    /// Note an RX event at `ts`.
    pub fn see_rx(&mut self, ts: u64) {
        self.rx_span = Some(match self.rx_span {
            None => (ts, ts),
            Some((a, b)) => (a.min(ts), b.max(ts)),
        });
    }

    /// The tracker of an agent.
    pub fn tracker(&mut self, agent: u64) -> &mut SeqTracker {
        let i = match self.seq.iter().position(|(a, _)| *a == agent) {
            Some(i) => i,
            None => {
                self.seq.push((agent, SeqTracker::default()));
                self.seq.len() - 1
            }
        };
        &mut self.seq[i].1
    }

    /// Did this host lose events within `[lo, hi]`?
    pub fn lost_near(&self, lo: u64, hi: u64) -> bool {
        self.recent_losses
            .iter()
            .any(|(t, _)| (lo..=hi).contains(t))
            || self.seq.iter().any(|(_, s)| s.open_within(lo, hi))
    }
}
