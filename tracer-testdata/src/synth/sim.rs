//! The simulation: a discrete-event loop in true time whose events come
//! out, stamped by each host's clock, in stamped-time order through a
//! small heap.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use tracer_codec::{sample, ClockEvent, RxEvent, RxStage, TcpAnomaly, TcpEvent, TxEvent, TxStage};

use super::config::SynthConfig;
use tracer_match::input::Ev;

/// One event of a synthetic trace.
#[derive(Debug, Clone)]
pub struct SynthEvent {
    /// Host index (0 or 1).
    pub host: usize,
    /// Stamped global time, ns.
    pub ts_ns: u64,
    /// The agent's event number.
    pub event_seq: u64,
    /// The host's clock was locked at the event.
    pub locked: bool,
    /// The event.
    pub ev: Ev,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Action {
    /// Send TX skb `i` of direction `d` (`attempt` 0: first time).
    Send { d: usize, i: u64, attempt: u32 },
    /// An RX skb `[start, end)` of direction `d` reaches the receiver.
    Arrive { d: usize, start: u32, len: u32 },
    /// A CLOCK event of host `h`.
    Clock { h: usize },
}

/// Receiver state of one direction.
#[derive(Debug, Default)]
struct Rcv {
    /// Next in-order byte, relative to the ISN.
    nxt: u64,
    /// Out-of-order RX skbs: relative start -> relative end.
    ofo: BTreeMap<u64, u64>,
}

/// The simulation, an iterator of events in stamped-time order.
pub struct Synth {
    cfg: SynthConfig,
    actions: BinaryHeap<Reverse<(u64, u64, Action)>>,
    out: BinaryHeap<Reverse<Pending>>,
    order: u64,
    now: u64,
    rcv: [Rcv; 2],
    next_seq: [u64; 2],
    /// Events produced per host, numbered or not.
    produced: [u64; 2],
    /// Events lost on the way, per host.
    pub dropped: [u64; 2],
    /// Events delivered, per host.
    pub delivered: [u64; 2],
    max_skew: u64,
    end_ns: u64,
}

/// An emitted event waiting for its turn: (stamped time, order, host,
/// clock locked, event).
type Pending = (u64, u64, usize, bool, EvBox);

/// Ev in the heap (ordered by the fields before it only).
#[derive(Debug, Clone)]
struct EvBox(Ev);
impl PartialEq for EvBox {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for EvBox {}
impl PartialOrd for EvBox {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for EvBox {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

/// A small deterministic hash for jitter.
fn mixu(x: u64) -> u64 {
    let mut h = x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 31;
    h.wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ (h >> 29)
}

fn addr16(a: [u8; 4]) -> [u8; 16] {
    let mut r = [0u8; 16];
    r[..4].copy_from_slice(&a);
    r
}

impl Synth {
    /// A simulation of `cfg`.
    pub fn new(cfg: SynthConfig) -> Self {
        let mut s = Synth {
            actions: BinaryHeap::new(),
            out: BinaryHeap::new(),
            order: 0,
            now: 0,
            rcv: Default::default(),
            next_seq: [0, 0],
            produced: [0, 0],
            dropped: [0, 0],
            delivered: [0, 0],
            max_skew: (0..2)
                .map(|h| {
                    let o = cfg.clock_offset_ns[h];
                    o.unsigned_abs().max((o + cfg.unlocked[h].1).unsigned_abs())
                })
                .max()
                .unwrap_or(0),
            end_ns: cfg.start_ns + cfg.skbs * cfg.interval_ns + cfg.rto_ns * 2 + cfg.one_way_ns * 4,
            cfg,
        };
        let start = s.cfg.start_ns;
        s.schedule(
            start,
            Action::Send {
                d: 0,
                i: 0,
                attempt: 0,
            },
        );
        if s.cfg.both_ways {
            s.schedule(
                start + s.cfg.interval_ns / 2,
                Action::Send {
                    d: 1,
                    i: 0,
                    attempt: 0,
                },
            );
        }
        s.schedule(start - 1_000_000, Action::Clock { h: 0 });
        s.schedule(start - 1_000_000, Action::Clock { h: 1 });
        s
    }

    fn schedule(&mut self, t: u64, a: Action) {
        self.order += 1;
        self.actions.push(Reverse((t, self.order, a)));
    }

    /// Emit an event of host `h` that happened at true time `t`.
    fn emit(&mut self, h: usize, t: u64, ev: Ev) {
        let (until, extra) = self.cfg.unlocked[h];
        let locked = t >= self.cfg.start_ns + until;
        let off = self.cfg.clock_offset_ns[h] + if locked { 0 } else { extra };
        let ts = (t as i64 + off) as u64;
        let ev = match ev {
            Ev::Tx(mut e) => {
                e.global_ns = ts;
                e.mono_ns = t;
                Ev::Tx(e)
            }
            Ev::Rx(mut e) => {
                e.global_ns = ts;
                e.mono_ns = t;
                Ev::Rx(e)
            }
            Ev::Tcp(mut e) => {
                e.global_ns = ts;
                e.mono_ns = t;
                Ev::Tcp(e)
            }
            Ev::Clock(mut e) => {
                e.global_ns = ts;
                e.mono_ns = t;
                Ev::Clock(e)
            }
            Ev::Cpu(mut e) => {
                e.global_ns = ts;
                e.mono_ns = t;
                Ev::Cpu(e)
            }
            Ev::Other => Ev::Other,
        };
        self.order += 1;
        self.out
            .push(Reverse((ts, self.order, h, locked, EvBox(ev))));
    }

    /// Sender host, receiver host, ports and addresses of direction `d`.
    fn ends(&self, d: usize) -> (usize, usize, [u8; 16], [u8; 16], u16, u16) {
        let (s, r) = if d == 0 { (0, 1) } else { (1, 0) };
        (
            s,
            r,
            addr16(self.cfg.addrs[s]),
            addr16(self.cfg.addrs[r]),
            self.cfg.ports[s],
            self.cfg.ports[r],
        )
    }

    fn tx(&self, d: usize, stage: TxStage, seq: u32, tskey: u32) -> Ev {
        let (s, _, sa, da, sp, dp) = self.ends(d);
        // Version-2 events: every stage carries the skb's range.
        Ev::Tx(TxEvent {
            cookie: 0x1000 + s as u64,
            tskey,
            seq,
            end_seq: tskey.wrapping_add(1),
            tx_flags: tracer_codec::TX_FLAG_RANGE,
            stage: stage as u8,
            family: 4,
            sport: sp,
            dport: dp,
            saddr: sa,
            daddr: da,
            ..TxEvent::default()
        })
    }

    fn rx(&self, d: usize, stage: RxStage, seq: u32, end_seq: u32, len: u32) -> Ev {
        let (s, _, sa, da, sp, dp) = self.ends(d);
        Ev::Rx(RxEvent {
            cookie: 0x2000 + s as u64,
            seq,
            end_seq,
            len,
            stage: stage as u8,
            family: 4,
            protocol: 6,
            sport: sp,
            dport: dp,
            saddr: sa,
            daddr: da,
            ..RxEvent::default()
        })
    }

    fn flow_hash(&self, d: usize) -> u64 {
        let (_, _, sa, da, sp, dp) = self.ends(d);
        sample::flow_hash(&sa, &da, sp, dp)
    }

    fn step(&mut self) -> bool {
        let Some(Reverse((t, _, a))) = self.actions.pop() else {
            return false;
        };
        self.now = t;
        let cfg = self.cfg.clone();
        match a {
            Action::Clock { h } => {
                self.emit(
                    h,
                    t,
                    Ev::Clock(ClockEvent {
                        mono_ns: 0,
                        global_ns: 0,
                        ref_ns: t,
                        offset_ns: cfg.clock_offset_ns[h],
                        freq_ppb: 0.0,
                        delay_ns: 20_000,
                        uncertainty_ns: cfg.clock_claim_ns[h] / 2,
                        error_estimate_ns: cfg.clock_claim_ns[h],
                        source: 2,
                        state: if t >= cfg.start_ns + cfg.unlocked[h].0 {
                            3
                        } else {
                            0
                        },
                    }),
                );
                if t < self.end_ns {
                    self.schedule(t + 100_000_000, Action::Clock { h });
                }
            }
            Action::Send { d, i, attempt } => {
                let (s, _, _, _, _, _) = self.ends(d);
                let seq = cfg.isn[d].wrapping_add((i * u64::from(cfg.skb_len)) as u32);
                let tskey = seq.wrapping_add(cfg.skb_len - 1);
                let hash = self.flow_hash(d);
                let tagged = sample::byte(hash, tskey, sample::threshold(cfg.sample_every[s]));
                if tagged {
                    if attempt == 0 {
                        self.emit(s, t - 3_000, self.tx(d, TxStage::Sendmsg, seq, tskey));
                    } else {
                        let mut e = TcpEvent {
                            cookie: 0x1000 + s as u64,
                            seq,
                            end_seq: seq.wrapping_add(cfg.skb_len),
                            ..TcpEvent::default()
                        };
                        let (_, _, sa, da, sp, dp) = self.ends(d);
                        e.anomaly = TcpAnomaly::Retransmit as u8;
                        (e.saddr, e.daddr, e.sport, e.dport) = (sa, da, sp, dp);
                        self.emit(s, t - 2_000, Ev::Tcp(e));
                    }
                    self.emit(s, t - 1_000, self.tx(d, TxStage::Sched, seq, tskey));
                    self.emit(s, t, self.tx(d, TxStage::SndSw, seq, tskey));
                }
                let arrive = t + cfg.one_way_ns + mixu(i ^ (d as u64) << 40) % cfg.jitter_ns.max(1);
                if attempt > 0 {
                    // A retransmission travels alone.
                    self.schedule(
                        arrive,
                        Action::Arrive {
                            d,
                            start: seq,
                            len: cfg.skb_len,
                        },
                    );
                } else {
                    let g = u64::from(cfg.gro.max(1));
                    let group = i / g;
                    let last_of_group = i % g == g - 1 || i + 1 == cfg.skbs;
                    let lost =
                        cfg.lose_one_in > 0 && group % cfg.lose_one_in == cfg.lose_one_in - 1;
                    if lost {
                        self.schedule(t + cfg.rto_ns, Action::Send { d, i, attempt: 1 });
                    } else if last_of_group {
                        let first = group * g;
                        let start =
                            cfg.isn[d].wrapping_add((first * u64::from(cfg.skb_len)) as u32);
                        let len = ((i + 1 - first) * u64::from(cfg.skb_len)) as u32;
                        self.schedule(arrive, Action::Arrive { d, start, len });
                    }
                    if i + 1 < cfg.skbs {
                        self.schedule(
                            t + cfg.interval_ns,
                            Action::Send {
                                d,
                                i: i + 1,
                                attempt: 0,
                            },
                        );
                    }
                }
            }
            Action::Arrive { d, start, len } => {
                let (_, r, _, _, _, _) = self.ends(d);
                let thr = sample::threshold(cfg.sample_every[r]);
                let hash = self.flow_hash(d);
                let end = start.wrapping_add(len);
                let rel = u64::from(start.wrapping_sub(cfg.isn[d]));
                let relend = rel + u64::from(len);
                let in_range = |s: u32, e: u32| sample::range(hash, s, e, thr);
                if in_range(start, end) {
                    self.emit(r, t, self.rx(d, RxStage::StackEntry, start, end, len));
                    self.emit(r, t + 1_000, self.rx(d, RxStage::TcpInput, start, end, len));
                }
                let rc = &mut self.rcv[d];
                if relend <= rc.nxt {
                    return true; // a duplicate
                }
                if rel > rc.nxt {
                    rc.ofo.insert(rel, relend);
                    return true;
                }
                let mut delivered = vec![(rel, relend)];
                rc.nxt = relend;
                while let Some((&s, &e)) = rc.ofo.iter().next() {
                    if s > rc.nxt {
                        break;
                    }
                    rc.ofo.remove(&s);
                    if e > rc.nxt {
                        delivered.push((s, e));
                        rc.nxt = e;
                    }
                }
                let nxt = cfg.isn[d].wrapping_add(rc.nxt as u32);
                let abs = |x: u64| cfg.isn[d].wrapping_add(x as u32);
                if sample::byte(hash, nxt.wrapping_sub(1), thr) {
                    self.emit(r, t + 2_000, self.rx(d, RxStage::DataReady, 0, nxt, 0));
                }
                for (k, (s, e)) in delivered.iter().enumerate() {
                    if in_range(abs(*s), abs(*e)) {
                        let ev = self.rx(d, RxStage::Copy, abs(*s), abs(*e), (e - s) as u32);
                        self.emit(r, t + 8_000 + k as u64 * 500, ev);
                    }
                }
                if sample::byte(hash, nxt.wrapping_sub(1), thr) {
                    let ev = self.rx(d, RxStage::ReadDone, 0, nxt, (relend - rel) as u32);
                    self.emit(r, t + 10_000 + delivered.len() as u64 * 500, ev);
                }
            }
        }
        true
    }
}

impl Iterator for Synth {
    type Item = SynthEvent;

    fn next(&mut self) -> Option<SynthEvent> {
        loop {
            // Events stamped before this can no longer be preceded.
            let safe = self.now.saturating_sub(self.max_skew + 50_000);
            let ready = self
                .out
                .peek()
                .is_some_and(|Reverse((ts, ..))| *ts < safe || self.actions.is_empty());
            if ready {
                let Reverse((ts, _, h, locked, EvBox(ev))) = self.out.pop()?;
                let (every, burst) = self.cfg.ring_losses[h];
                let k = self.produced[h];
                self.produced[h] += 1;
                if every > 0 && k % every >= every.saturating_sub(burst) {
                    self.dropped[h] += 1;
                    continue;
                }
                let (every, burst) = self.cfg.drop_events[h];
                let seq = self.next_seq[h];
                self.next_seq[h] += 1;
                if every > 0 && seq % every >= every.saturating_sub(burst) {
                    self.dropped[h] += 1;
                    continue;
                }
                self.delivered[h] += 1;
                return Some(SynthEvent {
                    host: h,
                    ts_ns: ts,
                    event_seq: seq,
                    locked,
                    ev,
                });
            }
            if !self.step() && self.out.is_empty() {
                return None;
            }
        }
    }
}
