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

use std::collections::{BTreeMap, VecDeque};

use tracer_codec::{
    ClockEvent, ClockState, RxEvent, RxStage, TcpAnomaly, TcpEvent, TxEvent, TxStage,
};

use crate::fasthash::FastMap;
use crate::flow::{FlowKey, SeqUnwrap};
use crate::input::{Ev, HostId, Input};
use crate::lifetime::{Life, Stage, STAGES};
use crate::pairs::PairWriter;
use crate::receiver::{scan_holding, Hit, RxFlow, RxSkb, MAX_SKB_SPAN};
use crate::stats::{Ambiguity, Direction, HostStats, Reason, TopN};
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
    /// SENDMSG tagged an skb already sent: no first transmission of it
    /// was stamped.
    tagged_sent: bool,
    /// A SCHED waiting for its SND_SW.
    sched: u64,
    /// Transmissions so far.
    sent: u32,
    /// Ids of its transmissions.
    ids: Vec<u64>,
    last_ns: u64,
}

/// A recorded transmission in its flow's byte index.
#[derive(Debug, Clone, Copy)]
struct Sent {
    /// First byte (unwrapped).
    start: i64,
    /// Send time (global).
    t: u64,
    /// Sending host.
    host: HostId,
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
    /// The byte followed: the last one the skb held at the send
    /// (unwrapped); `tskey` for a version-1 event.
    b: i64,
    /// The bytes the skb held at the send, when recorded.
    range: Option<(u32, u32)>,
    /// The sender's clock was locked at the send.
    locked: bool,
}

/// Everything about one flow (data direction), both ends.
#[derive(Debug)]
struct FlowState {
    unwrap: SeqUnwrap,
    hash: u64,
    rx: Vec<RxFlow>,
    /// TCP RETRANSMIT ranges by (end, number): (time, sender host, start).
    retx: BTreeMap<(i64, u64), (u64, HostId, i64)>,
    /// The next RETRANSMIT's number.
    retx_next: u64,
    /// The longest RETRANSMIT range seen (at most [`MAX_SKB_SPAN`]).
    retx_max_len: i64,
    /// Recorded transmissions by (end, id): which ones held a byte.
    sends: BTreeMap<(i64, u64), Sent>,
    /// The longest transmission seen (at most [`MAX_SKB_SPAN`]).
    sends_max_len: i64,
    /// End of the highest byte transmitted so far (exclusive).
    tx_high: Option<i64>,
    last_ns: u64,
}

impl FlowState {
    fn new(f: &FlowKey) -> Self {
        FlowState {
            unwrap: SeqUnwrap::new(),
            hash: sample::flow_hash(&f.src, &f.dst, f.sport, f.dport),
            rx: Vec::new(),
            retx: BTreeMap::new(),
            retx_next: 0,
            retx_max_len: 1,
            sends: BTreeMap::new(),
            sends_max_len: 1,
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
            Some(TxStage::Sendmsg) => {
                let skb = self.tx_entry(key, ts);
                skb.sendmsg = Some((ts, e.seq));
                skb.tagged_sent = e.tagged_sent();
                if e.tagged_sent() {
                    self.host(host).sendmsg_already_sent += 1;
                }
            }
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
        // The bytes this transmission carried: the range read from the
        // skb at the send (version 2), else the tagged byte alone.
        let range = e.range().filter(|&(s, end)| s != end);
        let (start, end) = match range {
            Some((s, end)) => {
                let s_ = fs.unwrap.ext(s);
                (s_, s_ + i64::from(end.wrapping_sub(s)))
            }
            None => {
                let b = fs.unwrap.ext(e.tskey);
                (b, b + 1)
            }
        };
        let b = end - 1;
        // A byte crowded by RETRANSMITs was surely sent before.
        let resent = fs.tx_high.is_some_and(|h| b < h)
            || scan_holding(&fs.retx, b, fs.retx_max_len, |r| r.2).map_or(true, |held| {
                held.iter()
                    .any(|&(_, &(t, h, _))| h == key.0 && t <= ts && ts - t <= window)
            });
        fs.sends_max_len = fs.sends_max_len.max((end - start).min(MAX_SKB_SPAN));
        fs.tx_high = Some(fs.tx_high.map_or(end, |h| h.max(end)));
        let id = self.front_id + self.pending.len() as u64;
        fs.sends.insert(
            (end, id),
            Sent {
                start,
                t: ts,
                host: key.0,
            },
        );
        let skb = self.tx_entry(key, ts);
        let index = skb.sent;
        // The tag's byte is not in what this send carried: TCP moved it
        // into an earlier skb (tcp_grow_skb() takes the head of the next,
        // tagged skb and leaves the tag behind), which left unstamped.
        let moved = range.is_some_and(|(s, end)| e.tskey.wrapping_sub(s) >= end.wrapping_sub(s));
        // A first transmission that nobody stamped is never shown as one:
        // the SENDMSG of a tag on an skb already sent, or of bytes an
        // earlier transmission carried, does not start this one's life,
        // nor does a SENDMSG whose byte left in another skb.
        let retransmit = index > 0 || resent || skb.tagged_sent;
        let own_sendmsg = !retransmit && !moved;
        let a = Attempt {
            id,
            key,
            flow,
            t: ts,
            sw,
            sendmsg: if own_sendmsg { skb.sendmsg } else { None },
            sched: std::mem::take(&mut skb.sched),
            tx_hw_ns: if sw { 0 } else { e.hw_ns },
            index,
            retransmit,
            b,
            range,
            locked,
        };
        skb.sent += 1;
        skb.ids.push(id);
        self.pending.push_back(a);
        if moved && index == 0 {
            self.host(key.0).tags_moved += 1;
        }
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
        let len = i64::from(e.end_seq.wrapping_sub(e.seq));
        fs.retx.insert((s + len, fs.retx_next), (ts, host, s));
        fs.retx_next += 1;
        fs.retx_max_len = fs.retx_max_len.max(len.min(MAX_SKB_SPAN));
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
        // Every recorded transmission and every reception of byte `b`
        // within the window, each in its own host's time order.
        let mut sends: Vec<(u64, u64)> = Vec::new();
        let mut rxs: Vec<RxSkb> = Vec::new();
        if let (Some(fs), Some(i)) = (fs, rx_i) {
            let copies = scan_holding(&fs.sends, a.b, fs.sends_max_len, |s| s.start)
                .and_then(|held| Ok((held, fs.rx[i].holding(a.b, lo, hi)?)));
            let Ok((held, received)) = copies else {
                // Too many entries where its copies could be to tell
                // them apart at a bounded cost (a crafted trace): the
                // dissector's rule too.
                if let Some(dir) = self.dirs.get_mut(&(sender, Some(receiver))) {
                    dir.ambiguous.add(Ambiguity::TooManyCopies);
                }
                return;
            };
            sends = held
                .into_iter()
                .filter(|(_, s)| s.host == sender && (lo..=hi).contains(&s.t))
                .map(|(id, s)| (s.t, id))
                .collect();
            sends.sort_unstable();
            rxs = received;
            rxs.sort_unstable_by_key(|s| (s.arrival(), s.id));
        }
        let rank = sends.iter().position(|&(_, id)| id == a.id);
        let best = match rank {
            Some(k) if !rxs.is_empty() && rxs.len() == sends.len() => Some(rxs[k]),
            _ => None,
        };
        if best.is_none() && !rxs.is_empty() {
            // Copies of the byte reached the stack, but not one per
            // recorded transmission: which is whose cannot be told.
            let why = if rxs.len() > sends.len() {
                Ambiguity::UnrecordedSend
            } else {
                Ambiguity::LostCopy
            };
            tracing::debug!(
                flow = %a.flow,
                byte = a.b,
                tskey = a.key.2,
                range = ?a.range,
                sends = ?sends,
                receptions = ?rxs.iter().map(|r| (r.arrival(), r.range)).collect::<Vec<_>>(),
                ?why,
                "ambiguous transmission"
            );
            if let Some(dir) = self.dirs.get_mut(&(sender, Some(receiver))) {
                dir.ambiguous.add(why);
            }
            return;
        }
        let Some(s) = best else {
            let reason = self.unmatched_reason(&a, receiver);
            let retransmitted = sends.iter().any(|&(t, _)| t > a.t)
                || fs.is_some_and(|fs| {
                    scan_holding(&fs.retx, a.b, fs.retx_max_len, |r| r.2).map_or(true, |held| {
                        held.iter().any(|&(_, &(t, h, _))| h == sender && t > a.t)
                    })
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
            tx_range: a.range,
            clocks_locked: a.locked && s.locked,
        };
        if let Some(out) = self.pairs.as_mut() {
            out.push(&life);
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
