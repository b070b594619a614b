//! Test harness, not part of the library's path: run a servo against the
//! simulated PHC in simulated time and summarise the true error; a man in
//! the middle ([`Forged`]) that shifts what a reference reads, and one on
//! a real exchange's path ([`ExchangeBridge`]). Used by the servo and
//! exchange tests, the end-to-end tests and `examples/`; no library module
//! imports it (a test in the workspace's `tests/tests/module_graph.rs`
//! checks that).

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::discipline::{ClockReport, Discipline};
use crate::error::ClockError;
use crate::global::GlobalClock;
use crate::limit::FrequencyLimit;
use crate::servo::algorithm::ServoConfig;
use crate::servo::machine::{Servo, ServoKind};
use crate::servo::sanity::SanityConfig;
use crate::source::exchange::msg::{Kind, Message};
use crate::source::sim::{SimConfig, SimPhc};
use crate::source::traits::{Clock, OffsetSample, ReferenceClock};
use crate::worker::StopFlag;

/// One simulated update: the servo's report and the true error of the
/// global clock at the sample instant.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct SimStep {
    /// Simulated time since the start, s.
    pub t_s: f64,
    /// The discipline's report.
    pub report: ClockReport,
    /// `global - true PHC` at the sample's monotonic instant under the
    /// mapping in force *before* this update: the error events stamped at
    /// the end of the past interval got (the worst point of a segment), ns.
    pub true_error_ns: i64,
    /// The same under the mapping this update put in force (it differs
    /// from `true_error_ns` by a step): what the update's
    /// `error_estimate_ns` speaks of, ns.
    pub true_error_after_ns: i64,
}

/// Run a servo against a simulated PHC for `count` updates of `interval_s`
/// (simulated time: returns at once). Unless `servo_cfg` names a clock
/// limit, the simulated PHC's own ([`FrequencyLimit`]) is used.
pub fn simulate(
    sim: SimConfig,
    kind: ServoKind,
    mut servo_cfg: ServoConfig,
    count: usize,
) -> Vec<SimStep> {
    let start = sim.start_mono_ns;
    let phc = SimPhc::new(sim);
    if servo_cfg.clock_max_freq_ppb.is_none() {
        servo_cfg.clock_max_freq_ppb = phc.max_freq_ppb().ok();
    }
    simulate_source(phc, start, Servo::new(kind, servo_cfg), count)
}

/// Run `servo` against any simulated `source` that knows its ground truth
/// ([`ReferenceClock::truth_ref_ns`]) for `count` updates of the servo's
/// interval; `start_mono_ns` is the source's simulated time at the start.
/// A source without ground truth gives true errors of 0.
pub fn simulate_source<R: ReferenceClock>(
    source: R,
    start_mono_ns: u64,
    servo: Servo,
    count: usize,
) -> Vec<SimStep> {
    let interval_ns = (servo.config().interval_s * 1e9).round() as u64;
    let clock = GlobalClock::default();
    let mut d = Discipline::new(source, servo, clock.clone());
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let before = clock.snapshot();
        // A simulated source does not fail; a failed sample leaves no step.
        if let Ok(report) = d.tick() {
            let m = report.mono_ns;
            let after = clock.to_global_ns(m).unwrap_or(0);
            let g = before.to_global_ns(m).unwrap_or(after);
            let truth = d.source().truth_ref_ns(m);
            let err = |g: u64| truth.map_or(0, |t| g.wrapping_sub(t) as i64);
            out.push(SimStep {
                t_s: (m - start_mono_ns) as f64 / 1e9,
                report,
                true_error_ns: err(g),
                true_error_after_ns: err(after),
            });
        }
        d.wait(std::time::Duration::from_nanos(interval_ns));
    }
    out
}

/// A man in the middle on a reference's path, without the key: every
/// sample's reference reading is moved by `shift(t)` ns (t: simulated
/// seconds since `start_mono_ns`), as a bridge rewriting the exchange's t2
/// and t3 moves them; the ground truth stays the inner source's.
pub struct Forged<R> {
    inner: R,
    start_mono_ns: u64,
    shift: Box<dyn Fn(f64) -> i64 + Send>,
}

impl<R> Forged<R> {
    /// Forge `inner`'s readings by `shift`.
    pub fn new(inner: R, start_mono_ns: u64, shift: impl Fn(f64) -> i64 + Send + 'static) -> Self {
        Forged {
            inner,
            start_mono_ns,
            shift: Box::new(shift),
        }
    }

    /// The genuine source.
    pub fn inner(&self) -> &R {
        &self.inner
    }
}

impl<R: Clock> Clock for Forged<R> {
    fn now_ns(&mut self) -> Result<u64, ClockError> {
        self.inner.now_ns()
    }
    fn name(&self) -> String {
        format!("forged {}", self.inner.name())
    }
}

impl<R: ReferenceClock> ReferenceClock for Forged<R> {
    fn sample(&mut self) -> Result<OffsetSample, ClockError> {
        let mut s = self.inner.sample()?;
        let t_s = s.mono_ns.saturating_sub(self.start_mono_ns) as f64 / 1e9;
        s.ref_ns = s.ref_ns.wrapping_add((self.shift)(t_s) as u64);
        Ok(s)
    }
    fn hardware_stamped(&self) -> bool {
        self.inner.hardware_stamped()
    }
    fn wait_ns(&mut self, dt_ns: u64, stop: &StopFlag) {
        self.inner.wait_ns(dt_ns, stop)
    }
    fn truth_ref_ns(&self, mono_ns: u64) -> Option<u64> {
        self.inner.truth_ref_ns(mono_ns)
    }
}

/// What an on-path bridge without the key does to each answer it
/// forwards ([`ExchangeBridge`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tamper {
    /// Before each answer: a datagram that is no protocol message.
    pub junk: bool,
    /// Before each answer: a well-formed copy answering another request.
    pub unmatched: bool,
    /// Added to t2 and t3 of every answer, ns.
    pub shift_ns: i64,
}

/// A UDP bridge between exchange clients and a responder, on the path as
/// a middlebox is: clients talk to the bridge's address, the bridge to the
/// responder, and it can read and rewrite every message (no key), as the
/// bridge of issue 16 that rewrote t2/t3. Answers go to the client that
/// sent the last request. Dropping it stops it.
pub struct ExchangeBridge {
    addr: SocketAddr,
    tamper: Arc<Mutex<Tamper>>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl ExchangeBridge {
    /// Listen on `listen` (port 0: any) and forward to `responder`. The
    /// sockets live in the caller's network namespace.
    pub fn bind(listen: SocketAddr, responder: SocketAddr) -> std::io::Result<Self> {
        let front = Arc::new(UdpSocket::bind(listen)?);
        let any: SocketAddr = if responder.is_ipv4() {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let back = Arc::new(UdpSocket::bind(any)?);
        back.connect(responder)?;
        // Wake up now and then to notice a stop.
        let tick = Some(Duration::from_millis(10));
        front.set_read_timeout(tick)?;
        back.set_read_timeout(tick)?;
        let addr = front.local_addr()?;
        let client: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let tamper: Arc<Mutex<Tamper>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let lock = |m: &Mutex<Option<SocketAddr>>| *m.lock().unwrap_or_else(|p| p.into_inner());
        let upstream = {
            let (front, back, client, stop) =
                (front.clone(), back.clone(), client.clone(), stop.clone());
            std::thread::Builder::new()
                .name("bridge-up".into())
                .spawn(move || {
                    let mut buf = [0u8; 256];
                    while !stop.load(Ordering::Relaxed) {
                        if let Ok((n, from)) = front.recv_from(&mut buf) {
                            *client.lock().unwrap_or_else(|p| p.into_inner()) = Some(from);
                            let _ = back.send(&buf[..n]);
                        }
                    }
                })?
        };
        let downstream = {
            let (tamper, stop) = (tamper.clone(), stop.clone());
            std::thread::Builder::new()
                .name("bridge-down".into())
                .spawn(move || {
                    let mut buf = [0u8; 256];
                    while !stop.load(Ordering::Relaxed) {
                        let Ok(n) = back.recv(&mut buf) else { continue };
                        let Some(to) = lock(&client) else { continue };
                        let t = *tamper.lock().unwrap_or_else(|p| p.into_inner());
                        forward(&front, to, &buf[..n], t);
                    }
                })?
        };
        Ok(ExchangeBridge {
            addr,
            tamper,
            stop,
            threads: vec![upstream, downstream],
        })
    }

    /// Where clients send their requests.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Tamper with the answers from now on.
    pub fn tamper(&self, t: Tamper) {
        *self.tamper.lock().unwrap_or_else(|p| p.into_inner()) = t;
    }
}

/// Send one answer on to the client, tampered with as `t` says. What is
/// no protocol message (or is keyed: the bridge has no key) goes as it is.
fn forward(front: &UdpSocket, to: SocketAddr, answer: &[u8], t: Tamper) {
    let Ok(mut m) = Message::open(answer, None) else {
        let _ = front.send_to(answer, to);
        return;
    };
    if t.junk {
        let _ = front.send_to(&[0x5a; 60], to);
    }
    if t.unmatched {
        let other = Message {
            seq: m.seq.wrapping_add(1_000_000),
            ..m
        };
        let _ = front.send_to(other.seal(None).as_bytes(), to);
    }
    if matches!(m.kind, Kind::Response | Kind::FollowUp) {
        m.t_ns = m.t_ns.wrapping_add(t.shift_ns as u64);
    }
    let _ = front.send_to(m.seal(None).as_bytes(), to);
}

impl Drop for ExchangeBridge {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// `updates` updates of a `kind` servo (sanity check `sanity`) following
/// the default simulated PHC, every reading forged by `shift(t_s)` ns: the
/// man in the middle of the forged-reference tests and example.
pub fn simulate_forged(
    kind: ServoKind,
    sanity: SanityConfig,
    updates: usize,
    shift: impl Fn(f64) -> i64 + Send + 'static,
) -> Vec<SimStep> {
    let sim = SimConfig::default();
    let start = sim.start_mono_ns;
    let phc = SimPhc::new(sim);
    let cfg = ServoConfig {
        clock_max_freq_ppb: phc.max_freq_ppb().ok(),
        sanity,
        ..Default::default()
    };
    simulate_source(
        Forged::new(phc, start, shift),
        start,
        Servo::new(kind, cfg),
        updates,
    )
}

/// Figures of merit of a simulated run.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct SimSummary {
    /// First time after which |true error| stays below the threshold, s.
    pub settle_s: Option<f64>,
    /// RMS of the true error after settling, ns.
    pub rms_ns: f64,
    /// Max |true error| after settling, ns.
    pub max_ns: u64,
}

/// Summarise a run: settling time to `threshold_ns`, then RMS and max.
pub fn summarize(steps: &[SimStep], threshold_ns: u64) -> SimSummary {
    let last_bad = steps
        .iter()
        .rposition(|s| s.true_error_ns.unsigned_abs() >= threshold_ns);
    let first_good = match last_bad {
        None => 0,
        Some(i) => i + 1,
    };
    let tail = &steps[first_good.min(steps.len())..];
    let settle_s = tail.first().map(|s| s.t_s);
    let n = tail.len().max(1) as f64;
    let rms_ns = (tail
        .iter()
        .map(|s| (s.true_error_ns as f64).powi(2))
        .sum::<f64>()
        / n)
        .sqrt();
    let max_ns = tail
        .iter()
        .map(|s| s.true_error_ns.unsigned_abs())
        .max()
        .unwrap_or(0);
    SimSummary {
        settle_s,
        rms_ns,
        max_ns,
    }
}

/// A deterministic closed loop for comparing the servo with linuxptp's
/// step by step (`bench/clock-servo.sh` drives linuxptp's `servo.c` +
/// `pi.c` through the same plant in C, `bench/ref/pi_parity.c`).
///
/// `phase = disciplined - reference` (ns). Each update measures
/// `round(phase) + noise`, feeds the servo at `t0 + k·interval`, steps
/// `phase` by `-offset` on JUMP, applies the servo's frequency on JUMP and
/// LOCKED*, and then lets one interval pass:
/// `phase += (drift + applied) · interval`. Everything is done in the same
/// order as the C twin, so equal servos give bit-equal outputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ParityPlant {
    /// How fast the undisciplined clock runs against the reference, ppb.
    pub drift_ppb: f64,
    /// Initial `disciplined - reference`, ns.
    pub phase_ns: f64,
    /// Measurement noise: uniform integer in `[-noise_ns, noise_ns]` from a
    /// 64-bit LCG (Knuth's MMIX constants, bits 33..63).
    pub noise_ns: u64,
    /// LCG seed.
    pub seed: u64,
    /// The reference steps by `.1` ns just before update `.0`.
    pub event: Option<(usize, i64)>,
    /// Local timestamp of update 0, ns.
    pub t0_ns: u64,
}

impl Default for ParityPlant {
    fn default() -> Self {
        ParityPlant {
            drift_ppb: 0.0,
            phase_ns: 0.0,
            noise_ns: 0,
            seed: 1,
            event: None,
            t0_ns: 1_000_000_000,
        }
    }
}

/// Run [`ParityPlant`] for `count` updates. Each report's `freq_ppb` is the
/// correction in force after the update (as [`Discipline`] reports it);
/// linuxptp's servo output is its negation.
pub fn parity_loop(
    plant: ParityPlant,
    kind: ServoKind,
    cfg: ServoConfig,
    count: usize,
) -> Vec<ClockReport> {
    use crate::servo::machine::ServoState;
    use crate::source::traits::OffsetSample;

    let interval_s = cfg.interval_s;
    let interval_ns = (interval_s * 1e9).round() as u64;
    // linuxptp's servos have no sanity check: compare like with like.
    let cfg = ServoConfig {
        sanity: crate::servo::sanity::SanityConfig::OFF,
        ..cfg
    };
    let mut servo = Servo::new(kind, cfg);
    let mut phase = plant.phase_ns;
    let mut applied = 0.0f64;
    let mut lcg = plant.seed;
    let mut out = Vec::with_capacity(count);
    for k in 0..count {
        if let Some((at, step_ns)) = plant.event {
            if at == k {
                phase += step_ns as f64;
            }
        }
        let mut noise = 0i64;
        if plant.noise_ns > 0 {
            lcg = lcg
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            noise = ((lcg >> 33) % (2 * plant.noise_ns + 1)) as i64 - plant.noise_ns as i64;
        }
        let offset_ns = phase.round() as i64 + noise;
        let ts = plant.t0_ns + k as u64 * interval_ns;
        let o = servo.sample(offset_ns, ts);
        match o.state {
            ServoState::Unlocked => {}
            ServoState::Jump => {
                phase -= offset_ns as f64;
                applied = o.freq_ppb;
            }
            ServoState::Locked | ServoState::LockedStable | ServoState::Holdover => {
                applied = o.freq_ppb
            }
        }
        out.push(ClockReport {
            mono_ns: ts,
            offset_ns,
            freq_ppb: o.freq_ppb,
            delay_ns: 0,
            state: o.state,
            error_estimate_ns: 0,
            sample: OffsetSample::default(),
            sanity: Default::default(),
        });
        phase += (plant.drift_ppb + applied) * interval_s;
    }
    out
}
