//! Support of the agent-only pipeline bench (`examples/agent_pipeline.rs`,
//! `bench/agent-pipeline.sh`): what the agent's CPU costs per event from
//! its ring to the socket, with no probe loaded and no traffic traced.
//!
//! Synthetic records of one TCP flow (feed.rs) are written into a memfd
//! slot ring as a probe writes its BPF array, then taken through the
//! agent's own path: `SlotRing` drain → the probe's decoder
//! (`probes::core::deliver`) → [`crate::collect::ToPipeline`] (the
//! [`crate::stamp::Stamper`], then [`crate::pipeline::Pipeline`] encoding)
//! → a real [`UdpTransport`] to a receiver thread of this process that
//! reads with UDP_GRO as tracer-sink does, polling so it is never woken
//! from the agent's send call (receiver.rs), or to a running sink. The ring is refilled between drains, one ring-full a round, and
//! only the drain → send part of each round is measured: the draining
//! thread's CPU time (CLOCK_THREAD_CPUTIME_ID), split into user and system
//! time by getrusage(RUSAGE_THREAD) (sampled at the scheduler tick: a
//! split, good to a few per cent over a second), and wall time. With a
//! null transport, shaped as the UDP one but sending nothing, the same run
//! gives the user-space floor; the difference to a real send is the
//! kernel's share. Over loopback the kernel's receive path up to the
//! receiver's socket runs inside the send call, as over veth.
//!
//! Left out: the read of each probe's mapped `heads` (a few words of
//! memory per probe and drain), clock events, the BPF counters' refresh, and tags
//! (`--key-file`).

mod feed;
mod meter;
mod receiver;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clocksync::GlobalClock;
use serde::Serialize;
use tracer_codec::ClockSource;

use crate::clock::{Converter, LocalTime};
use crate::collect::ToPipeline;
use crate::pipeline::{AgentIdentity, Pipeline};
use crate::probes::rx::Rx;
use crate::probes::tx::Tx;
use crate::sender::{BatchSend, BatchSent, BatchShape, Transport, UdpTransport};
use crate::stamp::Stamper;
use feed::Ring;
use meter::Meter;
pub use receiver::Received;

/// Which probe's records feed the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Feed {
    /// The rx probe's (five stages per received skb): the bulk of events.
    #[default]
    Rx,
    /// The tx probe's (four stages per sent skb).
    Tx,
    /// Half of each, drained probe by probe as the agent does (tx, rx).
    Mixed,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Records to feed (all are delivered: each round fills at most a ring).
    pub events: u64,
    /// Which probe's records.
    pub feed: Feed,
    /// How the transport hands datagrams to the kernel.
    pub batch_send: BatchSend,
    /// Send nothing: a transport shaped as the UDP one for `batch_send`
    /// whose batches go nowhere, for the user-space work alone.
    pub null_transport: bool,
    /// CPUs the ring has (slots per CPU each).
    pub cpus: usize,
    /// Slots per CPU (a power of two, the agent's `--ring-slots`).
    pub slots_per_cpu: u32,
    /// Datagram payload, bytes: 1472 as over an Ethernet path of MTU 1500
    /// (loopback's MTU would give 64 KiB datagrams and no batching).
    pub max_payload: usize,
    /// Send to this address (a running tracer-sink) instead of to the
    /// receiver thread.
    pub sink: Option<SocketAddr>,
    /// Have the receiver decode every datagram and count events by kind.
    pub verify: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            events: 2_000_000,
            feed: Feed::Rx,
            batch_send: BatchSend::Gso,
            null_transport: false,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            slots_per_cpu: 32_768,
            max_payload: 1472,
            sink: None,
            verify: false,
        }
    }
}

/// What a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The feed.
    pub feed: Feed,
    /// How datagrams went to the kernel: gso, mmsg or off (as in force:
    /// gso falls back to mmsg where refused), or null.
    pub batch_send: String,
    /// Records drained and delivered as events.
    pub events: u64,
    /// Of them, RX and TX events as the pipeline counted them.
    pub rx_events: u64,
    /// TX events.
    pub tx_events: u64,
    /// Records the decoder refused (0 expected).
    pub bad_records: u64,
    /// Records overwritten before being read (0 expected).
    pub overruns: u64,
    /// Drains (one ring-full each, per probe).
    pub rounds: u64,
    /// Datagrams handed to the transport.
    pub datagrams: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Send system calls.
    pub send_calls: u64,
    /// Datagrams whose send failed.
    pub send_errors: u64,
    /// CPU time of the draining thread over the measured parts, ns.
    pub cpu_ns: u64,
    /// Of which user time (getrusage), ns.
    pub user_ns: u64,
    /// Of which system time (getrusage), ns.
    pub sys_ns: u64,
    /// Wall time of the measured parts, ns.
    pub wall_ns: u64,
    /// `cpu_ns / events`.
    pub ns_per_event: f64,
    /// `1e9 / ns_per_event`: events one core would carry at 100 %.
    pub events_per_s_core: f64,
    /// User-space ns per event (getrusage's share of `cpu_ns`).
    pub user_ns_per_event: f64,
    /// Kernel ns per event (getrusage's share of `cpu_ns`).
    pub sys_ns_per_event: f64,
    /// What the receiver thread read (none with a null transport or an
    /// outside sink).
    pub received: Option<Received>,
}

/// Run the feed through the pipeline and measure it.
pub fn run(cfg: &Config) -> std::io::Result<Report> {
    let receiver = match (cfg.sink, cfg.null_transport) {
        (None, false) => Some(receiver::Receiver::start(cfg.verify)?),
        _ => None,
    };
    let to = cfg
        .sink
        .or(receiver.as_ref().map(receiver::Receiver::addr))
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 9)));
    let udp = UdpTransport::connect(to, Some(cfg.max_payload), cfg.batch_send)?;
    let max_payload = udp.max_payload();
    let mut report = if cfg.null_transport {
        let null = NullTransport {
            shape: udp.batch_shape(),
        };
        drive(cfg, null, max_payload, None, "null".into())?
    } else {
        let mode = match udp.mode() {
            BatchSend::Gso => "gso",
            BatchSend::Mmsg => "mmsg",
            BatchSend::Off => "off",
        };
        drive(cfg, udp, max_payload, receiver.as_ref(), mode.into())?
    };
    if let Some(r) = receiver {
        report.received = Some(r.finish(report.datagrams));
    }
    Ok(report)
}

/// A transport shaped as a real one (same batches, same padding) whose
/// batches go nowhere.
struct NullTransport {
    shape: BatchShape,
}

impl Transport for NullTransport {
    fn send(&mut self, datagram: &[u8]) -> std::io::Result<()> {
        std::hint::black_box(datagram);
        Ok(())
    }

    fn batch_shape(&self) -> BatchShape {
        self.shape
    }

    fn send_batch(&mut self, buf: &[u8], lens: &[usize]) -> BatchSent {
        // The encoded bytes are used: nothing may optimise their writing away.
        std::hint::black_box(buf);
        BatchSent {
            datagrams: lens.len(),
            calls: 0,
            error: None,
        }
    }
}

/// The rings of the feed.
struct Rings {
    tx: Option<Ring<Tx>>,
    rx: Option<Ring<Rx>>,
    /// Records still to write, per ring.
    tx_left: u64,
    rx_left: u64,
}

/// Feed `cfg.events` records through a pipeline on `transport`.
fn drive<T: Transport>(
    cfg: &Config,
    transport: T,
    max_payload: usize,
    receiver: Option<&receiver::Receiver>,
    mode: String,
) -> std::io::Result<Report> {
    let base_ns = clocksync::now_ns(clocksync::ClockId::Monotonic).unwrap_or(0);
    let (tx_left, rx_left) = match cfg.feed {
        Feed::Rx => (0, cfg.events),
        Feed::Tx => (cfg.events, 0),
        Feed::Mixed => (cfg.events / 2, cfg.events - cfg.events / 2),
    };
    let mut rings = Rings {
        tx: (tx_left > 0)
            .then(|| Ring::new(cfg.cpus, cfg.slots_per_cpu, base_ns))
            .transpose()?,
        rx: (rx_left > 0)
            .then(|| Ring::new(cfg.cpus, cfg.slots_per_cpu, base_ns))
            .transpose()?,
        tx_left,
        rx_left,
    };
    let id = AgentIdentity {
        agent_id: rand::random(),
        boot_id: [7; 16],
        hostname: "synthetic".into(),
        incarnation: AgentIdentity::new_incarnation(),
    };
    let mut p = Pipeline::new(&id, transport, max_payload, Duration::from_millis(100));
    // A locked clock at rate 1: the conversion's arithmetic is the same
    // at any rate.
    let global = GlobalClock::fixed(37_000_000_000);
    let mut stamper = Stamper::new(LocalTime::real(), Converter::new(&global, 0, None));
    let mut meter = Meter::default();
    let (mut rounds, mut overruns) = (0, 0);
    while rings.tx_left + rings.rx_left > 0 {
        // Unmeasured: the probe's side, once the receiver has read what
        // the last round sent (a ring-full sent faster than it reads would
        // be dropped at its socket).
        let caught_up = receiver.map(|r| (r, p.stats.datagrams));
        fill(&mut rings, caught_up)?;
        let start = meter.start();
        // The drain loop's work per drain: one clock snapshot, then every
        // probe's ring in registry order, then the tick.
        stamper.snapshot(Converter::new(&global, 0, None));
        p.set_clock(ClockSource::System, stamper.state());
        let mut out = ToPipeline {
            p: &mut p,
            stamper: &mut stamper,
        };
        if let Some(r) = rings.tx.as_mut() {
            overruns += r.drain(&mut out).overruns;
        }
        if let Some(r) = rings.rx.as_mut() {
            overruns += r.drain(&mut out).overruns;
        }
        p.tick(Instant::now());
        meter.stop(start);
        rounds += 1;
    }
    let start = meter.start();
    p.flush();
    meter.stop(start);
    Ok(report(cfg, &p, &meter, mode, rounds, overruns))
}

/// Write the next round's records, at most a ring-full per ring, from a
/// thread of its own, after waiting for `receiver` to have read the
/// datagrams sent so far: the draining thread only blocks once a round
/// (its profile is then the measured path), its caches stay the agent's,
/// and it reads lines another core wrote, as it reads a probe's.
fn fill(rings: &mut Rings, receiver: Option<(&receiver::Receiver, u64)>) -> std::io::Result<()> {
    let tx = rings.tx.as_mut().map(|r| &mut r.writer);
    let rx = rings.rx.as_mut().map(|r| &mut r.writer);
    let tx_n = tx.as_ref().map_or(0, |w| rings.tx_left.min(w.capacity()));
    let rx_n = rx.as_ref().map_or(0, |w| rings.rx_left.min(w.capacity()));
    let write = move || {
        if let Some((r, sent)) = receiver {
            r.wait_for(sent, Duration::from_secs(1));
        }
        if let Some(w) = tx {
            w.fill(tx_n);
        }
        if let Some(w) = rx {
            w.fill(rx_n);
        }
    };
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("synthetic-probe".into())
            .spawn_scoped(s, write)?
            .join()
            .map_err(|_| std::io::Error::other("the synthetic probe's writer panicked"))
    })?;
    rings.tx_left -= tx_n;
    rings.rx_left -= rx_n;
    Ok(())
}

/// The figures of a finished run.
fn report<T: Transport>(
    cfg: &Config,
    p: &Pipeline<T>,
    m: &Meter,
    batch_send: String,
    rounds: u64,
    overruns: u64,
) -> Report {
    let s = &p.stats;
    let rx_events: u64 = s.rx_events_by_stage.iter().sum();
    let tx_events: u64 = s.events_by_stage.iter().sum();
    let events = rx_events + tx_events;
    let per_event = |ns: u64| ns as f64 / events.max(1) as f64;
    let ns_per_event = per_event(m.cpu_ns);
    // getrusage's split, scaled to the precise total.
    let user_share = m.user_ns as f64 / (m.user_ns + m.sys_ns).max(1) as f64;
    Report {
        feed: cfg.feed,
        batch_send,
        events,
        rx_events,
        tx_events,
        bad_records: s.bad_records,
        overruns,
        rounds,
        datagrams: s.datagrams,
        bytes: s.bytes,
        send_calls: s.send_calls,
        send_errors: s.send_errors,
        cpu_ns: m.cpu_ns,
        user_ns: m.user_ns,
        sys_ns: m.sys_ns,
        wall_ns: m.wall_ns,
        ns_per_event,
        events_per_s_core: if ns_per_event > 0.0 {
            1e9 / ns_per_event
        } else {
            0.0
        },
        user_ns_per_event: ns_per_event * user_share,
        sys_ns_per_event: ns_per_event * (1.0 - user_share),
        received: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small run, every datagram decoded by the receiver.
    fn verified(events: u64, feed: Feed, batch_send: BatchSend) -> Report {
        let cfg = Config {
            events,
            feed,
            batch_send,
            cpus: 2,
            slots_per_cpu: 256,
            verify: true,
            ..Config::default()
        };
        run(&cfg).unwrap()
    }

    /// N records in, N events out in the datagrams received, of the right
    /// kinds, none lost or refused, in every batch mode and feed. Needs
    /// neither root nor BPF: a memfd and loopback UDP.
    #[test]
    fn every_record_reaches_the_receiver_as_an_event() {
        for batch_send in [BatchSend::Gso, BatchSend::Mmsg, BatchSend::Off] {
            // 3001 records over 2 x 256 slots: six rounds (five full), three
            // when two rings share them.
            for (feed, rx, tx, rounds) in [
                (Feed::Rx, 3001, 0, 6),
                (Feed::Tx, 0, 3001, 6),
                (Feed::Mixed, 1501, 1500, 3),
            ] {
                let r = verified(3001, feed, batch_send);
                let what = format!("{feed:?} {batch_send:?}: {r:?}");
                assert_eq!(
                    (r.events, r.rx_events, r.tx_events),
                    (3001, rx, tx),
                    "{what}"
                );
                assert_eq!(
                    (r.bad_records, r.overruns, r.send_errors),
                    (0, 0, 0),
                    "{what}"
                );
                assert_eq!(r.rounds, rounds, "{what}");
                let got = r.received.unwrap();
                assert_eq!(got.datagrams, r.datagrams, "{what}");
                assert_eq!(
                    (got.events, got.rx_events, got.tx_events, got.bad_datagrams),
                    (3001, rx, tx, 0),
                    "{what}"
                );
                assert!(r.cpu_ns > 0 && r.ns_per_event > 0.0, "{what}");
            }
        }
    }

    #[test]
    fn a_null_transport_counts_the_datagrams_it_does_not_send() {
        let cfg = Config {
            events: 1000,
            null_transport: true,
            cpus: 1,
            slots_per_cpu: 1024,
            ..Config::default()
        };
        let r = run(&cfg).unwrap();
        assert_eq!(
            (r.events, r.send_calls, r.batch_send.as_str()),
            (1000, 0, "null")
        );
        assert!(r.datagrams > 0 && r.received.is_none(), "{r:?}");
    }
}
