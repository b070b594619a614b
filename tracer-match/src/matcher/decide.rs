//! A transmission's fate, decided once its window has passed: matched to
//! the reception holding its byte (and its life built), ambiguous, or
//! unmatched by reason.

use tracer_codec::sample;

use super::state::Attempt;
use super::Matcher;
use crate::input::HostId;
use crate::lifetime::{Life, Stage, STAGES};
use crate::receiver::{scan_holding, RxSkb};
use crate::stats::{Ambiguity, Direction, Reason};

impl Matcher {
    pub(super) fn decide(&mut self, a: Attempt) {
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
}
