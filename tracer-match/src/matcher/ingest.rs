//! Events in: the matcher's handling of TX, RX and TCP events, which
//! records transmissions (with the bytes each carried), receptions and
//! retransmissions in the flow's indexes.

use tracer_codec::{RxEvent, RxStage, TcpAnomaly, TcpEvent, TxEvent, TxStage};

use super::state::{Attempt, FlowState, Sent, TxKey, TxSkb};
use super::Matcher;
use crate::flow::FlowKey;
use crate::input::HostId;
use crate::receiver::{scan_holding, Hit, MAX_SKB_SPAN};

impl Matcher {
    fn tx_entry(&mut self, key: TxKey, ts: u64) -> &mut TxSkb {
        let tx_evict = &mut self.tx_evict;
        let e = self.tx.entry(key).or_insert_with(|| {
            tx_evict.push_back((ts, key));
            TxSkb::default()
        });
        e.last_ns = e.last_ns.max(ts);
        e
    }

    pub(super) fn on_tx(&mut self, host: HostId, ts: u64, e: &TxEvent, locked: bool) {
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

    pub(super) fn on_rx(&mut self, host: HostId, ts: u64, e: &RxEvent, locked: bool) {
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

    pub(super) fn on_tcp(&mut self, host: HostId, ts: u64, e: &TcpEvent) {
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
}
