//! Traces shaped to be the worst case of every per-flow and per-skb index
//! the dissector and the matcher keep (docs/security.md, "A crafted
//! trace"): many frames claiming one skb, one byte sent and received over
//! and over, nested ranges, one busy UDP socket. Two are attacks (a file
//! anyone can write), two are what a legitimate capture can come near (a
//! retransmission storm, a UDP socket under load). They are written by
//! [`SynthWriter`], as the sink writes its files, so the benchmark and the
//! tests feed the real readers the bytes an attacker would.

use std::path::{Path, PathBuf};

use tracer_codec::{
    ClockEvent, RxEvent, RxStage, TcpAnomaly, TcpEvent, TxEvent, TxStage, TX_FLAG_RANGE,
};

use crate::synth::{FileLayout, SynthConfig, SynthEvent, SynthWriter};
use tracer_match::input::Ev;

/// The shapes [`write`] knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shape {
    /// Every frame claims the same flow, cookie, tskey and byte range: the
    /// four TX stages on one host and the five RX stages on the other, in
    /// turn, 1 µs apart (all within one peer window).
    SameSkb,
    /// One 1448-byte segment retransmitted over and over, 50 µs apart: each
    /// attempt a RETRANSMIT, SCHED and SND_SW on the sender, and (one in
    /// eight lost) STACK_ENTRY and TCP_INPUT on the receiver.
    RetransmitStorm,
    /// Receptions of ever longer ranges from one start, and a send of
    /// each range's last byte: every range holds every later send's byte.
    NestedRanges,
    /// Receptions whose bytes no socket stage ever reaches (ranges far
    /// ahead), each followed by a socket stage that reaches none of them:
    /// every skb stays waiting for its DATA_READY, COPY and READ_DONE.
    WaitingSkbs,
    /// One UDP socket receiving datagrams as fast as it reads them: every
    /// RX stage of every datagram, one flow, one cookie, no sequence.
    UdpSocket,
    /// The synthetic two-host TCP trace of the matcher's tests (what the
    /// others are measured against).
    Normal,
}

/// The hosts' addresses and ports (those of [`SynthConfig::default`]).
struct Ends {
    cfg: SynthConfig,
}

impl Ends {
    fn addr(&self, h: usize) -> [u8; 16] {
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&self.cfg.addrs[h]);
        a
    }

    /// A TX event of host 0 sending `[seq, end)` to host 1.
    fn tx(&self, stage: TxStage, seq: u32, end: u32) -> Ev {
        Ev::Tx(TxEvent {
            cookie: 0x1000,
            tskey: end.wrapping_sub(1),
            seq,
            end_seq: end,
            tx_flags: TX_FLAG_RANGE,
            stage: stage as u8,
            family: 4,
            sport: self.cfg.ports[0],
            dport: self.cfg.ports[1],
            saddr: self.addr(0),
            daddr: self.addr(1),
            ..TxEvent::default()
        })
    }

    /// An RX event of host 1 receiving `[seq, end)` from host 0.
    fn rx(&self, stage: RxStage, protocol: u8, seq: u32, end: u32, len: u32) -> Ev {
        Ev::Rx(RxEvent {
            cookie: if stage as u8 >= RxStage::DataReady as u8 {
                0x2000
            } else {
                0
            },
            seq,
            end_seq: end,
            len,
            stage: stage as u8,
            family: 4,
            protocol,
            sport: self.cfg.ports[0],
            dport: self.cfg.ports[1],
            saddr: self.addr(0),
            daddr: self.addr(1),
            ..RxEvent::default()
        })
    }

    fn retransmit(&self, seq: u32, end: u32) -> Ev {
        Ev::Tcp(TcpEvent {
            cookie: 0x1000,
            seq,
            end_seq: end,
            anomaly: TcpAnomaly::Retransmit as u8,
            sport: self.cfg.ports[0],
            dport: self.cfg.ports[1],
            saddr: self.addr(0),
            daddr: self.addr(1),
            ..TcpEvent::default()
        })
    }
}

/// Events of `shape`, about `n` of them, in time order (host, offset from
/// the start in ns, event).
fn events(shape: Shape, n: u64, ends: &Ends) -> Vec<(usize, u64, Ev)> {
    let s0 = ends.cfg.isn[0];
    let mut out = Vec::with_capacity(n as usize);
    match shape {
        Shape::SameSkb => {
            let (seq, end) = (s0, s0.wrapping_add(1448));
            let tx = [
                TxStage::Sendmsg,
                TxStage::Sched,
                TxStage::SndSw,
                TxStage::Ack,
            ];
            let rx = [
                RxStage::StackEntry,
                RxStage::TcpInput,
                RxStage::DataReady,
                RxStage::Copy,
                RxStage::ReadDone,
            ];
            for i in 0..n {
                let k = (i % 9) as usize;
                let ev = if k < 4 {
                    (0, ends.tx(tx[k], seq, end))
                } else {
                    (1, ends.rx(rx[k - 4], 6, seq, end, 1448))
                };
                out.push((ev.0, i * 1_000, ev.1));
            }
        }
        Shape::RetransmitStorm => {
            let (seq, end) = (s0, s0.wrapping_add(1448));
            let mut i = 0;
            while (out.len() as u64) < n {
                let t = i * 50_000;
                out.push((0, t, ends.retransmit(seq, end)));
                out.push((0, t + 1_000, ends.tx(TxStage::Sched, seq, end)));
                out.push((0, t + 2_000, ends.tx(TxStage::SndSw, seq, end)));
                if i % 8 != 7 {
                    out.push((
                        1,
                        t + 17_000,
                        ends.rx(RxStage::StackEntry, 6, seq, end, 1448),
                    ));
                    out.push((1, t + 18_000, ends.rx(RxStage::TcpInput, 6, seq, end, 1448)));
                }
                i += 1;
            }
        }
        Shape::NestedRanges => {
            for i in 0..n / 2 {
                let end = s0.wrapping_add(1 + i as u32);
                out.push((
                    0,
                    i * 2_000,
                    ends.tx(TxStage::SndSw, end.wrapping_sub(1), end),
                ));
                out.push((
                    1,
                    i * 2_000 + 1_000,
                    ends.rx(RxStage::StackEntry, 6, s0, end, i as u32 + 1),
                ));
            }
        }
        Shape::WaitingSkbs => {
            let stages = [RxStage::DataReady, RxStage::Copy, RxStage::ReadDone];
            for i in 0..n / 2 {
                // Descending ranges: every one lands in front of the others.
                let seq = s0.wrapping_add(1 << 30).wrapping_sub(100 * i as u32);
                out.push((
                    1,
                    i * 2_000,
                    ends.rx(RxStage::StackEntry, 6, seq, seq.wrapping_add(100), 100),
                ));
                let stage = stages[(i % 3) as usize];
                out.push((
                    1,
                    i * 2_000 + 1_000,
                    ends.rx(stage, 6, s0, s0.wrapping_add(1), 1),
                ));
            }
        }
        Shape::UdpSocket => {
            let rx = [
                RxStage::StackEntry,
                RxStage::DataReady,
                RxStage::Copy,
                RxStage::ReadDone,
            ];
            for i in 0..n {
                let stage = rx[(i % 4) as usize];
                out.push((1, i * 500, ends.rx(stage, 17, 0, 0, 1200)));
            }
        }
        Shape::Normal => unreachable!("written by the simulation"),
    }
    out
}

/// A CLOCK event claiming a locked clock, so the readers trust the times.
fn locked_clock() -> Ev {
    Ev::Clock(ClockEvent {
        mono_ns: 0,
        global_ns: 0,
        ref_ns: 0,
        offset_ns: 0,
        freq_ppb: 0.0,
        delay_ns: 20_000,
        uncertainty_ns: 50,
        error_estimate_ns: 100,
        source: 2,
        state: 3,
    })
}

/// Write a trace of `shape` with about `events` events into `dir` (one
/// file, both hosts); returns the file and the events written.
pub fn write(dir: &Path, shape: Shape, events_wanted: u64) -> std::io::Result<(PathBuf, u64)> {
    let ends = Ends {
        cfg: SynthConfig::default(),
    };
    let layout = FileLayout::default();
    if shape == Shape::Normal {
        // About 9.5 events per skb with the default GRO of 2 (SENDMSG,
        // SCHED, SND_SW per skb; five RX stages per two skbs; CLOCKs).
        let cfg = SynthConfig {
            skbs: (events_wanted * 2 / 11).max(1),
            ..SynthConfig::default()
        };
        let (files, n) = crate::synth::write_trace(dir, &cfg, layout)?;
        let path = files
            .into_iter()
            .next()
            .ok_or_else(|| std::io::Error::other("no file"))?;
        return Ok((path, n));
    }
    let start = ends.cfg.start_ns;
    let mut w = SynthWriter::new(dir, &ends.cfg, layout);
    let mut seq = [0u64; 2];
    let mut put = |w: &mut SynthWriter, host: usize, ts_ns: u64, ev: Ev| {
        let e = SynthEvent {
            host,
            ts_ns,
            event_seq: seq[host],
            locked: true,
            ev: stamp(ev, ts_ns),
        };
        seq[host] += 1;
        w.write(&e, 0)
    };
    put(&mut w, 0, start, locked_clock())?;
    put(&mut w, 1, start, locked_clock())?;
    let mut n = 2;
    for (host, dt, ev) in events(shape, events_wanted.saturating_sub(2), &ends) {
        put(&mut w, host, start + 1_000 + dt, ev)?;
        n += 1;
    }
    let path = w
        .finish()?
        .into_iter()
        .next()
        .ok_or_else(|| std::io::Error::other("no file"))?;
    Ok((path, n))
}

/// `ev` with its raw and global stamps at `ns`.
fn stamp(ev: Ev, ns: u64) -> Ev {
    match ev {
        Ev::Tx(mut e) => {
            (e.mono_ns, e.global_ns) = (ns, ns);
            Ev::Tx(e)
        }
        Ev::Rx(mut e) => {
            (e.mono_ns, e.global_ns) = (ns, ns);
            Ev::Rx(e)
        }
        Ev::Tcp(mut e) => {
            (e.mono_ns, e.global_ns) = (ns, ns);
            Ev::Tcp(e)
        }
        Ev::Clock(mut e) => {
            (e.mono_ns, e.global_ns, e.ref_ns) = (ns, ns, ns);
            Ev::Clock(e)
        }
        Ev::Cpu(mut e) => {
            (e.mono_ns, e.global_ns) = (ns, ns);
            Ev::Cpu(e)
        }
        Ev::Other => Ev::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_writes_about_as_many_events_as_asked() {
        for shape in [
            Shape::SameSkb,
            Shape::RetransmitStorm,
            Shape::NestedRanges,
            Shape::WaitingSkbs,
            Shape::UdpSocket,
            Shape::Normal,
        ] {
            let dir = tempfile::tempdir().expect("tempdir");
            let (path, n) = write(dir.path(), shape, 1_000).expect("written");
            assert!((900..=1_100).contains(&n), "{shape:?}: {n} events");
            let (report, _) = tracer_match::run(&[path], Default::default(), Default::default())
                .expect("the matcher reads it");
            let read: u64 = report.hosts.iter().flat_map(|h| h.events.values()).sum();
            assert_eq!(read, n, "{shape:?}");
        }
    }
}
