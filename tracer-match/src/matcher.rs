//! The matching engine: fed events in global-time order, it links every
//! sender TX skb transmission to the receiver's RX skb holding its last
//! byte, builds the packet's life, and accounts latencies, unmatched skbs
//! by reason and causality violations, in memory bounded by the matching
//! window.
//!
//! How a transmission is matched (docs/matching.md has the long form):
//! - A transmission is one SND_SW event (or an SND_HW without SND_SW) of
//!   a TX skb, named on its host by (socket cookie, `tskey`); the SENDMSG
//!   and SCHED of that skb before it belong to it. A later SND_SW of the
//!   same skb, or one of bytes already sent, is a retransmission: a
//!   separate transmission, matched on its own.
//! - The receiver's RX skb is the one holding byte `tskey` (the byte the
//!   sender's stamps describe) on the same flow (same 4-tuple: both ends
//!   write it in the data's direction), arrived within ±window of the
//!   send. A GRO skb holds many TX skbs' bytes and matches each of them.
//! - When the byte was sent more than once, each RX skb goes to the
//!   transmission whose one-way delay is closest to the pair's usual one
//!   (the median of recent unambiguous matches): this stays right when
//!   the clocks disagree, where "the first RX after the send" would not.
//! - A transmission is decided `window` after it was sent (on the global
//!   axis): by then every RX skb within ±window has been read.

use std::collections::VecDeque;

use tracer_codec::{ClockEvent, RxEvent, RxStage, TcpAnomaly, TcpEvent, TxEvent, TxStage};

use crate::fasthash::FastMap;
use crate::flow::{FlowKey, SeqUnwrap};
use crate::input::{Ev, HostId, Input};
use crate::lifetime::{Life, Stage, STAGES};
use crate::receiver::{Hit, RxFlow, RxSkb};
use crate::stats::{Direction, HostStats, Reason, TopN};
use tracer_codec::sample;

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

/// A TX skb on its host: (host, socket cookie, tskey).
type TxKey = (HostId, u64, u32);

/// What is known of one TX skb.
#[derive(Debug, Default)]
struct TxSkb {
    /// SENDMSG time and first byte.
    sendmsg: Option<(u64, u32)>,
    /// A SCHED waiting for its SND_SW.
    sched: u64,
    /// Transmissions so far.
    sent: u32,
    /// Ids of its transmissions.
    ids: Vec<u64>,
    /// RX skbs its transmissions were matched to.
    claimed: Vec<u64>,
    last_ns: u64,
}

/// One transmission waiting for its decision.
#[derive(Debug, Clone)]
struct Attempt {
    id: u64,
    key: TxKey,
    flow: FlowKey,
    /// Send time: SND_SW, else the SND_HW event's time.
    t: u64,
    /// True when `t` is an SND_SW.
    sw: bool,
    sendmsg: Option<(u64, u32)>,
    sched: u64,
    tx_hw_ns: u64,
    index: u32,
    retransmit: bool,
    /// `tskey` unwrapped.
    b: i64,
    /// The sender's clock was locked at the send.
    locked: bool,
}

/// Everything about one flow (data direction), both ends.
#[derive(Debug)]
struct FlowState {
    unwrap: SeqUnwrap,
    hash: u64,
    rx: Vec<RxFlow>,
    /// TCP RETRANSMIT ranges: (time, sender host, start, end).
    retx: VecDeque<(u64, HostId, i64, i64)>,
    /// Highest byte transmitted so far.
    tx_high: Option<i64>,
    last_ns: u64,
}

impl FlowState {
    fn new(f: &FlowKey) -> Self {
        FlowState {
            unwrap: SeqUnwrap::new(),
            hash: sample::flow_hash(&f.src, &f.dst, f.sport, f.dport),
            rx: Vec::new(),
            retx: VecDeque::new(),
            tx_high: None,
            last_ns: 0,
        }
    }

    fn rx_of(&mut self, host: HostId) -> &mut RxFlow {
        let i = match self.rx.iter().position(|r| r.host == host) {
            Some(i) => i,
            None => {
                self.rx.push(RxFlow::new(host));
                self.rx.len() - 1
            }
        };
        &mut self.rx[i]
    }
}

/// Recent unambiguous one-way delays of a host pair: the yardstick for
/// retransmitted bytes. Its median includes the clock offset, which is
/// the point: a retransmission's RX skb is expected at the same offset.
#[derive(Debug, Clone, Default)]
struct Baseline {
    ring: Vec<i64>,
    next: usize,
}

const BASELINE_LEN: usize = 64;

impl Baseline {
    fn push(&mut self, v: i64) {
        if self.ring.len() < BASELINE_LEN {
            self.ring.push(v);
        } else {
            self.ring[self.next] = v;
        }
        self.next = (self.next + 1) % BASELINE_LEN;
    }

    fn median(&self) -> i64 {
        if self.ring.is_empty() {
            return 0;
        }
        let mut v = self.ring.clone();
        let mid = v.len() / 2;
        *v.select_nth_unstable(mid).1
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
    baselines: FastMap<(HostId, HostId), Baseline>,
    last_sweep: u64,
    /// Per host.
    pub(crate) hosts: Vec<HostStats>,
    /// Per direction.
    pub(crate) dirs: FastMap<(HostId, Option<HostId>), Direction>,
    /// The slowest packets (first to last stage).
    pub(crate) slowest: TopN,
    /// Most transmissions and RX skbs held at once (memory witness).
    pub(crate) peak_held: usize,
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
            baselines: FastMap::default(),
            last_sweep: 0,
            hosts: Vec::new(),
            dirs: FastMap::default(),
            peak_held: 0,
        }
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
            Ev::Other => hs.events[4] += 1,
        }
        self.decide_due(false);
        self.evict_tx(false);
        if self.now >= self.last_sweep + self.cfg.window_ns / 2 {
            self.sweep();
        }
    }

    fn tx_entry(&mut self, key: TxKey, ts: u64) -> &mut TxSkb {
        let tx_evict = &mut self.tx_evict;
        let e = self.tx.entry(key).or_insert_with(|| {
            tx_evict.push_back((ts, key));
            TxSkb::default()
        });
        e.last_ns = e.last_ns.max(ts);
        e
    }

    fn on_tx(&mut self, host: HostId, ts: u64, e: &TxEvent, locked: bool) {
        let key = (host, e.cookie, e.tskey);
        match e.stage() {
            Some(TxStage::Sendmsg) => self.tx_entry(key, ts).sendmsg = Some((ts, e.seq)),
            Some(TxStage::Sched) => self.tx_entry(key, ts).sched = ts,
            Some(TxStage::SndSw) => self.transmit(key, ts, e, true, locked),
            Some(TxStage::SndHw) => {
                // The hardware stamp of the transmission just made, if it
                // has none yet; else a transmission seen only by its SND_HW.
                let last = self.tx.get(&key).and_then(|s| s.ids.last().copied());
                let front = self.front_id;
                if let Some(a) = last
                    .and_then(|id| id.checked_sub(front))
                    .and_then(|i| self.pending.get_mut(i as usize))
                    .filter(|a| a.tx_hw_ns == 0)
                {
                    a.tx_hw_ns = e.hw_ns;
                } else {
                    self.transmit(key, ts, e, false, locked);
                }
            }
            Some(TxStage::Ack) | None => {}
        }
    }

    fn transmit(&mut self, key: TxKey, ts: u64, e: &TxEvent, sw: bool, locked: bool) {
        let flow = FlowKey::new(e.family, &e.saddr, e.sport, &e.daddr, e.dport);
        let window = self.cfg.window_ns;
        let fs = self
            .flows
            .entry(flow)
            .or_insert_with(|| FlowState::new(&flow));
        fs.last_ns = fs.last_ns.max(ts);
        let b = fs.unwrap.ext(e.tskey);
        let resent = fs.tx_high.is_some_and(|h| b <= h)
            || fs.retx.iter().any(|&(t, h, s, end)| {
                h == key.0 && s <= b && b < end && t <= ts && ts - t <= window
            });
        fs.tx_high = Some(fs.tx_high.map_or(b, |h| h.max(b)));
        let id = self.front_id + self.pending.len() as u64;
        let skb = self.tx_entry(key, ts);
        let index = skb.sent;
        let a = Attempt {
            id,
            key,
            flow,
            t: ts,
            sw,
            sendmsg: if index == 0 { skb.sendmsg } else { None },
            sched: std::mem::take(&mut skb.sched),
            tx_hw_ns: if sw { 0 } else { e.hw_ns },
            index,
            retransmit: index > 0 || resent,
            b,
            locked,
        };
        skb.sent += 1;
        skb.ids.push(id);
        self.pending.push_back(a);
    }

    fn on_rx(&mut self, host: HostId, ts: u64, e: &RxEvent, locked: bool) {
        if e.protocol != 6 {
            return; // UDP has no sequence numbers and no TX events
        }
        let flow = FlowKey::new(e.family, &e.saddr, e.sport, &e.daddr, e.dport);
        if self.owners.get(&(flow.dst, flow.v6)) != Some(&host) {
            self.owners.insert((flow.dst, flow.v6), host);
        }
        let Some(stage) = e.stage() else { return };
        let data = e.end_seq != e.seq;
        if !data
            && matches!(
                stage,
                RxStage::StackEntry | RxStage::TcpInput | RxStage::Copy
            )
        {
            return; // pure ACKs carry no bytes to match
        }
        let fs = self
            .flows
            .entry(flow)
            .or_insert_with(|| FlowState::new(&flow));
        fs.last_ns = fs.last_ns.max(ts);
        match stage {
            RxStage::StackEntry | RxStage::TcpInput | RxStage::Copy => {
                let start = fs.unwrap.ext(e.seq);
                let end = start + i64::from(e.end_seq.wrapping_sub(e.seq));
                let rx = fs.rx_of(host);
                let hit = Hit {
                    id: self.next_rx_id,
                    ts,
                    start,
                    end,
                    range: (e.seq, e.end_seq),
                    hw_ns: e.hw_ns,
                    locked,
                };
                self.next_rx_id += 1;
                match stage {
                    RxStage::StackEntry => rx.stack_entry(hit),
                    RxStage::TcpInput => rx.tcp_input(hit),
                    _ => rx.copy(ts, start, end),
                }
            }
            RxStage::DataReady => {
                let v = fs.unwrap.ext(e.end_seq);
                fs.rx_of(host).data_ready(ts, v);
            }
            RxStage::ReadDone => {
                let v = fs.unwrap.ext(e.end_seq);
                fs.rx_of(host).read_done(ts, v);
            }
        }
    }

    fn on_tcp(&mut self, host: HostId, ts: u64, e: &TcpEvent) {
        if e.anomaly() != Some(TcpAnomaly::Retransmit) || e.family == 0 {
            return;
        }
        self.host(host).retransmit_events += 1;
        // The socket's flow: local -> remote, the data's direction here.
        let flow = FlowKey::new(e.family, &e.saddr, e.sport, &e.daddr, e.dport);
        let fs = self
            .flows
            .entry(flow)
            .or_insert_with(|| FlowState::new(&flow));
        fs.last_ns = fs.last_ns.max(ts);
        let s = fs.unwrap.ext(e.seq);
        fs.retx
            .push_back((ts, host, s, s + i64::from(e.end_seq.wrapping_sub(e.seq))));
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

    fn decide(&mut self, a: Attempt) {
        let window = self.cfg.window_ns;
        let sender = a.key.0;
        let (lo, hi) = (a.t.saturating_sub(window), a.t.saturating_add(window));
        let fs = self.flows.get(&a.flow);
        let rx_i = fs.and_then(|fs| {
            fs.rx
                .iter()
                .position(|r| r.host != sender)
                .or((!fs.rx.is_empty()).then_some(0))
        });
        let receiver = match (fs, rx_i) {
            (Some(fs), Some(i)) => Some(fs.rx[i].host),
            _ => self.owners.get(&(a.flow.dst, a.flow.v6)).copied(),
        };
        let dir = self
            .dirs
            .entry((sender, receiver))
            .or_insert_with(|| Direction::new(sender, receiver));
        dir.flows.insert(a.flow);
        dir.attempts += 1;
        if a.retransmit {
            dir.retransmits += 1;
        }
        let Some(receiver) = receiver else {
            dir.unmatched.add(Reason::PeerNotTraced);
            return;
        };
        let skb = self.tx.get(&a.key);
        let claimed: &[u64] = skb.map_or(&[], |s| &s.claimed);
        let later: Vec<u64> = skb
            .map(|s| {
                s.ids
                    .iter()
                    .filter(|&&id| id > a.id)
                    .filter_map(|id| self.pending.get((id - self.front_id) as usize))
                    .map(|p| p.t)
                    .collect()
            })
            .unwrap_or_default();
        let mut best: Option<(u64, RxSkb)> = None;
        let mut candidates = 0;
        if let (Some(fs), Some(i)) = (fs, rx_i) {
            let free = |s: &&RxSkb| !claimed.contains(&s.id);
            candidates = fs.rx[i].holding(a.b, lo, hi).filter(free).count();
            if candidates == 1 && later.is_empty() {
                // The usual case: one RX skb, one transmission.
                best = fs.rx[i].holding(a.b, lo, hi).find(free).map(|s| (0, *s));
            } else if candidates > 0 {
                let base = self
                    .baselines
                    .get(&(sender, receiver))
                    .map_or(0, Baseline::median);
                let cost = |arrival: u64, t: u64| (arrival as i64 - t as i64 - base).unsigned_abs();
                for s in fs.rx[i].holding(a.b, lo, hi).filter(free) {
                    let c = cost(s.arrival(), a.t);
                    // Closer to a later transmission of the same bytes: theirs.
                    if later.iter().any(|&t| cost(s.arrival(), t) < c) {
                        continue;
                    }
                    if best.is_none_or(|(bc, _)| c < bc) {
                        best = Some((c, *s));
                    }
                }
            }
        }
        let Some((_, s)) = best else {
            let reason = self.unmatched_reason(&a, receiver);
            let retransmitted = !later.is_empty()
                || fs.is_some_and(|fs| {
                    fs.retx
                        .iter()
                        .any(|&(t, h, st, end)| h == sender && t > a.t && st <= a.b && a.b < end)
                });
            let Some(dir) = self.dirs.get_mut(&(sender, Some(receiver))) else {
                return;
            };
            dir.unmatched.add(reason);
            if reason == Reason::NoRx && retransmitted {
                dir.unmatched.no_rx_then_retransmitted += 1;
            }
            return;
        };
        let (Some(fs), Some(i)) = (fs, rx_i) else {
            return;
        };
        if candidates == 1 && later.is_empty() && a.index == 0 && s.stack_ns != 0 {
            self.baselines
                .entry((sender, receiver))
                .or_default()
                .push(s.stack_ns as i64 - a.t as i64);
        }
        let threshold = self.threshold;
        let (hash, tskey) = (fs.hash, a.key.2);
        // Under sampling, a socket-level event is the first to pass the
        // byte only if no granule in between could hide an earlier one.
        let exact =
            |v: i64| sample::all_sampled(hash, tskey, (v as u32).wrapping_sub(1), threshold);
        let app = fs.rx[i].app_stages(a.b, &s, exact);
        let nz = |v: u64| (v != 0).then_some(v);
        let mut at = [None; STAGES];
        at[Stage::Sendmsg as usize] = a.sendmsg.map(|(t, _)| t);
        at[Stage::Sched as usize] = nz(a.sched);
        at[Stage::SndSw as usize] = a.sw.then_some(a.t);
        at[Stage::StackEntry as usize] = nz(s.stack_ns);
        at[Stage::TcpInput as usize] = nz(s.tcp_ns);
        at[Stage::DataReady as usize] = app.data_ready;
        at[Stage::Copy as usize] = app.copy;
        at[Stage::ReadDone as usize] = app.read_done;
        let life = Life {
            sender,
            receiver,
            flow: a.flow,
            tskey,
            seq: a.sendmsg.map(|(_, s)| s),
            attempt: a.index,
            retransmit: a.retransmit,
            at,
            tx_hw_ns: a.tx_hw_ns,
            rx_hw_ns: s.hw_ns,
            rx_range: s.range,
            clocks_locked: a.locked && s.locked,
        };
        if let Some(skb) = self.tx.get_mut(&a.key) {
            skb.claimed.push(s.id);
        }
        if let Some(dir) = self.dirs.get_mut(&(sender, Some(receiver))) {
            dir.add_matched(&life);
        }
        self.slowest.offer(life.total() as i64, &life);
    }

    fn unmatched_reason(&self, a: &Attempt, receiver: HostId) -> Reason {
        let w = self.cfg.window_ns;
        let hash = self.flows.get(&a.flow).map(|f| f.hash).unwrap_or_default();
        if self.threshold < sample::ALL && !sample::byte(hash, a.key.2, self.threshold) {
            return Reason::SampledOut;
        }
        let Some(hs) = self.hosts.get(receiver as usize) else {
            return Reason::OutsideWindow;
        };
        if hs
            .rx_span
            .is_none_or(|(first, last)| a.t < first || a.t > last)
        {
            return Reason::OutsideWindow;
        }
        if hs.lost_near(a.t.saturating_sub(w), a.t.saturating_add(w)) {
            return Reason::LostEvents;
        }
        Reason::NoRx
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
            while fs.retx.front().is_some_and(|r| r.0 < before) {
                fs.retx.pop_front();
            }
            fs.rx.retain(|r| !r.is_empty());
            !(fs.rx.is_empty() && fs.retx.is_empty() && fs.last_ns.saturating_add(4 * w) < before)
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
    // States 2 and 3 are LOCKED and LOCKED_STABLE: before the first lock
    // the estimate describes a clock that is still being set.
    if e.state >= 2 {
        c.max_locked_error_ns = Some(c.max_locked_error_ns.unwrap_or(0).max(e.error_estimate_ns));
        c.max_locked_offset_ns = Some(
            c.max_locked_offset_ns
                .unwrap_or(0)
                .max(e.offset_ns.unsigned_abs()),
        );
    }
}
