//! The matching engine: fed events in global-time order, it links every
//! sender TX skb transmission to the receiver's RX skb holding its last
//! byte, builds the packet's life, and accounts latencies, unmatched skbs
//! by reason and causality violations, in memory bounded by the matching
//! window.
//!
//! How a transmission is matched (docs/matching.md has the long form):
//! pairs are made by bytes, not by tags.
//! - A transmission is one SND_SW event (or an SND_HW without SND_SW) of
//!   a tagged TX skb, with the byte range the skb really held at that
//!   moment (version-2 TX events; a version-1 event stands for its
//!   `tskey` byte alone). It follows its last byte `b`. The SENDMSG and
//!   SCHED of that skb before it belong to it.
//! - Its reception is an RX skb holding `b` on the same flow (same
//!   4-tuple: both ends write it in the data's direction), that reached
//!   the receiver's stack within ±window of the send. A GRO skb holds many
//!   TX skbs' bytes and matches each of them.
//! - Each byte may travel several times (retransmissions, bytes TCP moved
//!   into an earlier skb, a tag on an skb already sent). The recorded
//!   transmissions holding `b` and the receptions holding `b` within the
//!   window are paired in order, first with first, when there are as many
//!   of each: a path does not reorder copies of one byte. When their
//!   numbers differ, a transmission whose copy never reached the stack, or
//!   one nobody stamped, hides which is which: the transmission is counted
//!   as ambiguous, by reason, never guessed. This needs no clock: it holds
//!   however far apart the two clocks are.
//! - A transmission is decided `window` after it was sent (on the global
//!   axis): by then every RX skb within ±window has been read.

use std::collections::VecDeque;

use tracer_codec::{sample, ClockEvent, ClockState};

use crate::fasthash::FastMap;
use crate::flow::FlowKey;
use crate::input::{Ev, HostId, Input};
use crate::pairs::PairWriter;
use crate::stats::{Direction, HostStats, TopN};

mod decide;
mod ingest;
mod state;

use state::{Attempt, FlowState, TxKey, TxSkb};

/// How matching is done.
#[derive(Debug, Clone, Copy)]
pub struct MatchConfig {
    /// An RX skb matches a transmission only if it arrived within this
    /// much of the send, on the global axis (ns). It must exceed the
    /// longest one-way delay plus the largest clock disagreement; memory
    /// grows with it (events of about three windows are held).
    pub window_ns: u64,
    /// The agents' `--sample-every N` (1: no sampling), to tell skbs the
    /// receiver never recorded from lost ones.
    pub sample_every: u32,
    /// Lives of the slowest packets kept for the report.
    pub slowest: usize,
}

impl Default for MatchConfig {
    fn default() -> Self {
        MatchConfig {
            window_ns: 250_000_000,
            sample_every: 1,
            slowest: 20,
        }
    }
}

/// The engine. Feed it with [`Matcher::push`], then [`Matcher::finish`].
pub struct Matcher {
    cfg: MatchConfig,
    threshold: u64,
    now: u64,
    flows: FastMap<FlowKey, FlowState>,
    tx: FastMap<TxKey, TxSkb>,
    tx_evict: VecDeque<(u64, TxKey)>,
    pending: VecDeque<Attempt>,
    /// Id of `pending[0]` (ids are consecutive).
    front_id: u64,
    next_rx_id: u64,
    /// Address -> the host receiving on it (seen as an RX destination).
    owners: FastMap<([u8; 16], bool), HostId>,
    last_sweep: u64,
    /// Per host.
    pub(crate) hosts: Vec<HostStats>,
    /// Per direction.
    pub(crate) dirs: FastMap<(HostId, Option<HostId>), Direction>,
    /// The slowest packets (first to last stage).
    pub(crate) slowest: TopN,
    /// Most transmissions and RX skbs held at once (memory witness).
    pub(crate) peak_held: usize,
    /// Where each matched pair is written, if asked (`--pairs`).
    pub(crate) pairs: Option<PairWriter>,
}

impl Matcher {
    /// A matcher.
    pub fn new(cfg: MatchConfig) -> Self {
        Matcher {
            threshold: sample::threshold(cfg.sample_every),
            slowest: TopN::new(cfg.slowest),
            cfg,
            now: 0,
            flows: FastMap::default(),
            tx: FastMap::default(),
            tx_evict: VecDeque::new(),
            pending: VecDeque::new(),
            front_id: 0,
            next_rx_id: 0,
            owners: FastMap::default(),
            last_sweep: 0,
            hosts: Vec::new(),
            dirs: FastMap::default(),
            peak_held: 0,
            pairs: None,
        }
    }

    /// Hand every matched pair to `out` as it is decided (`--pairs`).
    pub fn write_pairs(&mut self, out: PairWriter) {
        self.pairs = Some(out);
    }

    /// The configuration.
    pub fn config(&self) -> &MatchConfig {
        &self.cfg
    }

    fn host(&mut self, h: HostId) -> &mut HostStats {
        let i = h as usize;
        if self.hosts.len() <= i {
            self.hosts.resize_with(i + 1, HostStats::default);
        }
        &mut self.hosts[i]
    }

    /// One event, in (nearly) global-time order.
    pub fn push(&mut self, input: &Input) {
        let ts = input.ts_ns;
        self.now = self.now.max(ts);
        let hs = self.host(input.host);
        hs.see(ts);
        hs.tracker(input.agent_id).see(input.event_seq, ts);
        if hs.clock.updates == 0 {
            // Until its first CLOCK event, the source its datagrams name.
            hs.clock.source = Some(input.clock_source);
        }
        match &input.ev {
            Ev::Tx(e) => {
                hs.events[0] += 1;
                self.on_tx(input.host, ts, e, input.clock_locked);
            }
            Ev::Rx(e) => {
                hs.events[1] += 1;
                hs.see_rx(ts);
                self.on_rx(input.host, ts, e, input.clock_locked);
            }
            Ev::Tcp(e) => {
                hs.events[2] += 1;
                self.on_tcp(input.host, ts, e);
            }
            Ev::Clock(e) => {
                hs.events[3] += 1;
                on_clock(hs, e);
            }
            Ev::Cpu(e) => {
                hs.events[4] += 1;
                hs.cpu.add(e);
            }
            Ev::Other => hs.events[5] += 1,
        }
        self.decide_due(false);
        self.evict_tx(false);
        if self.now >= self.last_sweep + self.cfg.window_ns / 2 {
            self.sweep();
        }
    }

    /// Decide the transmissions whose window has passed (all, at the end).
    fn decide_due(&mut self, all: bool) {
        while let Some(a) = self.pending.front() {
            if !all && a.t.saturating_add(self.cfg.window_ns) >= self.now {
                break;
            }
            let Some(a) = self.pending.pop_front() else {
                break;
            };
            self.front_id += 1;
            self.decide(a);
        }
    }

    /// Forget TX skbs whose last event is two windows old and whose
    /// transmissions are all decided.
    fn evict_tx(&mut self, all: bool) {
        let horizon = 2 * self.cfg.window_ns;
        while let Some(&(t, key)) = self.tx_evict.front() {
            if !all && t.saturating_add(horizon) >= self.now {
                break;
            }
            self.tx_evict.pop_front();
            let Some(skb) = self.tx.get(&key) else {
                continue;
            };
            let decided = skb.ids.last().is_none_or(|&id| id < self.front_id);
            if !all && (skb.last_ns.saturating_add(horizon) >= self.now || !decided) {
                self.tx_evict.push_back((skb.last_ns.max(t + 1), key));
                continue;
            }
            if skb.sent == 0 && skb.sendmsg.is_some() {
                self.host(key.0).sendmsg_never_sent += 1;
            }
            self.tx.remove(&key);
        }
    }

    /// Drop receiver state older than two windows, declare long-missing
    /// event numbers lost, forget idle flows.
    fn sweep(&mut self) {
        let w = self.cfg.window_ns;
        self.last_sweep = self.now;
        let before = self.now.saturating_sub(2 * w);
        let mut held = self.pending.len();
        self.flows.retain(|_, fs| {
            for r in &mut fs.rx {
                r.evict(before);
                held += r.len();
            }
            fs.retx.retain(|_, r| r.0 >= before);
            fs.sends.retain(|_, s| s.t >= before);
            held += fs.sends.len();
            fs.rx.retain(|r| !r.is_empty());
            !(fs.rx.is_empty()
                && fs.retx.is_empty()
                && fs.sends.is_empty()
                && fs.last_ns.saturating_add(4 * w) < before)
        });
        self.peak_held = self.peak_held.max(held);
        let now = self.now;
        for hs in &mut self.hosts {
            expire_losses(hs, now.saturating_sub(w));
            while hs
                .recent_losses
                .front()
                .is_some_and(|(t, _)| t.saturating_add(3 * w) < now)
            {
                hs.recent_losses.pop_front();
            }
        }
    }

    /// Decide everything still pending; the input has ended.
    pub fn finish_input(&mut self) {
        self.peak_held = self.peak_held.max(self.pending.len());
        self.decide_due(true);
        self.evict_tx(true);
        for hs in &mut self.hosts {
            expire_losses(hs, u64::MAX);
        }
    }

    /// Move up to `events` of the `no_rx` skbs sent to `receiver` to
    /// `lost_events`: the receiver reported losses (ISB) without a time.
    pub(crate) fn blame_unplaced_losses(&mut self, receiver: HostId, events: u64) {
        let mut left = events;
        for d in self.dirs.values_mut() {
            if d.receiver != Some(receiver) || left == 0 {
                continue;
            }
            let n = d.unmatched.no_rx.min(left);
            d.unmatched.no_rx -= n;
            d.unmatched.no_rx_then_retransmitted =
                d.unmatched.no_rx_then_retransmitted.min(d.unmatched.no_rx);
            d.unmatched.lost_events += n;
            left -= n;
        }
    }
}

fn expire_losses(hs: &mut HostStats, older_than: u64) {
    let mut found = Vec::new();
    for (_, t) in &mut hs.seq {
        t.expire(older_than, |at, n| found.push((at, n)));
    }
    for (at, n) in found {
        hs.located_losses += n;
        hs.recent_losses.push_back((at, n));
    }
}

fn on_clock(hs: &mut HostStats, e: &ClockEvent) {
    let c = &mut hs.clock;
    c.updates += 1;
    c.source = Some(e.source);
    c.state = Some(e.state);
    c.last_error_ns = Some(e.error_estimate_ns);
    // Before the first lock the estimate describes a clock that is still
    // being set; in HOLDOVER one whose reference it does not follow.
    if ClockState::is_locked_code(e.state) {
        c.max_locked_error_ns = Some(c.max_locked_error_ns.unwrap_or(0).max(e.error_estimate_ns));
        c.max_locked_offset_ns = Some(
            c.max_locked_offset_ns
                .unwrap_or(0)
                .max(e.offset_ns.unsigned_abs()),
        );
    }
}
