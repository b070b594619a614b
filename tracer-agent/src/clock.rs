//! The agent's global clock: a `clocksync` discipline thread keeps a
//! software clock (CLOCK_MONOTONIC -> TAI-scale ns) locked to the chosen
//! reference; the main loop converts event stamps through a snapshot taken
//! once per drain, and ships each clock update as a clock event.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use clocksync::clock::SourceOptions;
use clocksync::{
    measure_offset, ClockId, ClockReport, ClockSnapshot, Discipline, ErrorInjection, GlobalClock,
    Servo, ServoConfig, ServoKind, SourceSpec,
};
use tracer_codec::{ClockEvent, ClockSource, ClockState};

/// Which reference the global clock follows (`--clock`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClockChoice {
    /// This host's CLOCK_TAI.
    System,
    /// A PTP hardware clock device.
    Phc(PathBuf),
    /// The PHC of a network interface.
    Iface(String),
    /// The sink's global clock through the kernel-stamped two-way exchange.
    Sink,
}

impl std::str::FromStr for ClockChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once(':') {
            None if s == "system" => Ok(ClockChoice::System),
            None if s == "sink" => Ok(ClockChoice::Sink),
            Some(("phc", p)) if !p.is_empty() => Ok(ClockChoice::Phc(p.into())),
            Some(("iface", i)) if !i.is_empty() => Ok(ClockChoice::Iface(i.into())),
            _ => Err(format!(
                "unknown clock {s:?}: expected system, phc:/dev/ptpN, iface:NAME or sink"
            )),
        }
    }
}

impl ClockChoice {
    /// Source advertised on the wire.
    pub fn wire_source(&self) -> ClockSource {
        match self {
            ClockChoice::System => ClockSource::System,
            ClockChoice::Phc(_) | ClockChoice::Iface(_) => ClockSource::Phc,
            ClockChoice::Sink => ClockSource::Sink,
        }
    }
}

/// Clock settings of the agent.
#[derive(Debug, Clone)]
pub struct ClockConfig {
    /// The reference.
    pub choice: ClockChoice,
    /// Where the sink's clock responder listens (for [`ClockChoice::Sink`]).
    pub sink_clock_addr: SocketAddr,
    /// Servo algorithm.
    pub servo: ServoKind,
    /// Update interval.
    pub interval: Duration,
    /// Testing only: pretend this host's realtime/TAI clock is off by
    /// offset + drift * elapsed.
    pub inject_offset_ns: i64,
    /// Testing only: drift of the injected error, ppm.
    pub inject_drift_ppm: f64,
    /// With [`ClockChoice::Sink`]: stamp the exchange with this interface's
    /// NIC hardware stamps.
    pub hw_iface: Option<String>,
}

/// Running clock: discipline thread + the shared global clock.
pub struct AgentClock {
    global: GlobalClock,
    source: ClockSource,
    reports: mpsc::Receiver<Result<ClockReport, clocksync::ClockError>>,
    shutdown: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    fallback_offset_ns: i64,
    injection: Option<ErrorInjection>,
    failures: u64,
}

/// Converts raw stamps with the mapping of one instant (cheap to copy).
#[derive(Debug, Clone)]
pub struct Converter {
    snap: Arc<ClockSnapshot>,
    fallback_offset_ns: i64,
    injection: Option<ErrorInjection>,
    /// Clock state advertised for events converted with this snapshot.
    pub state: ClockState,
}

impl Converter {
    /// Global ns of a raw monotonic stamp. Before the first sample the
    /// clock is UNLOCKED and this host's (possibly injected) TAI stands in.
    #[inline]
    pub fn to_global_ns(&self, mono_ns: u64) -> u64 {
        match self.snap.to_global_ns(mono_ns) {
            Some(g) => g,
            None => {
                let err = self.injection.map_or(0, |i| i.error_ns(mono_ns));
                mono_ns.wrapping_add((self.fallback_offset_ns + err) as u64)
            }
        }
    }
}

impl AgentClock {
    /// Open the reference and start disciplining.
    pub fn start(cfg: &ClockConfig) -> Result<Self, clocksync::ClockError> {
        let injection = if cfg.inject_offset_ns != 0 || cfg.inject_drift_ppm != 0.0 {
            Some(ErrorInjection::starting_now(
                cfg.inject_offset_ns,
                cfg.inject_drift_ppm,
            )?)
        } else {
            None
        };
        let spec = match &cfg.choice {
            ClockChoice::System => SourceSpec::System(ClockId::Tai),
            ClockChoice::Phc(p) => SourceSpec::Phc(p.clone()),
            ClockChoice::Iface(i) => SourceSpec::Iface(i.clone()),
            ClockChoice::Sink => SourceSpec::Sink(cfg.sink_clock_addr),
        };
        let source = spec.open(&SourceOptions {
            injection,
            reads: 0,
            hw_iface: cfg.hw_iface.clone(),
        })?;
        let servo_cfg = ServoConfig {
            interval_s: cfg.interval.as_secs_f64(),
            hardware_timestamps: source.hardware_stamped(),
            ..Default::default()
        };
        let global = GlobalClock::default();
        let discipline = Discipline::new(source, Servo::new(cfg.servo, servo_cfg), global.clone());
        let (tx, reports) = mpsc::channel();
        let shutdown = Arc::new(AtomicBool::new(false));
        let handle = discipline
            .spawn(cfg.interval, Arc::clone(&shutdown), move |r| {
                let _ = tx.send(r);
            })
            .map_err(|source| clocksync::ClockError::Io {
                what: "starting the clock thread".into(),
                source,
            })?;
        let fallback_offset_ns = measure_offset(ClockId::Monotonic, ClockId::Tai, 16)?.offset_ns();
        Ok(AgentClock {
            global,
            source: cfg.choice.wire_source(),
            reports,
            shutdown,
            thread: Some(std::thread::spawn(move || {
                let _ = handle.join();
            })),
            fallback_offset_ns,
            injection,
            failures: 0,
        })
    }

    /// Source advertised on the wire.
    pub fn source(&self) -> ClockSource {
        self.source
    }

    /// The mapping now in force.
    pub fn converter(&self) -> Converter {
        let snap = self.global.snapshot();
        let state = if snap.segments.is_empty() {
            ClockState::Unlocked
        } else {
            snap.state
                .and_then(|s| ClockState::from_u8(s.code()))
                .unwrap_or(ClockState::Unlocked)
        };
        Converter {
            snap,
            fallback_offset_ns: self.fallback_offset_ns,
            injection: self.injection,
            state,
        }
    }

    /// Clock updates since the last call, as wire events. Failed samples
    /// are logged (rate-limited) and counted.
    pub fn drain_events(&mut self) -> Vec<ClockEvent> {
        let mut out = Vec::new();
        while let Ok(r) = self.reports.try_recv() {
            match r {
                Ok(r) => {
                    let global_ns = self.global.to_global_ns(r.mono_ns).unwrap_or(0);
                    out.push(ClockEvent {
                        mono_ns: r.mono_ns,
                        global_ns,
                        ref_ns: r.sample.ref_ns,
                        offset_ns: r.offset_ns,
                        freq_ppb: r.freq_ppb,
                        delay_ns: r.delay_ns,
                        uncertainty_ns: r.sample.uncertainty_ns,
                        error_estimate_ns: r.error_estimate_ns,
                        source: self.source as u8,
                        state: r.state.code(),
                    });
                    tracing::debug!(line = %r.phc2sys_line(), "clock update");
                }
                Err(e) => {
                    self.failures += 1;
                    if self.failures.is_power_of_two() {
                        tracing::warn!(error = %e, failures = self.failures,
                            "clock sample failed; events keep the last mapping");
                    }
                }
            }
        }
        out
    }
}

impl Drop for AgentClock {
    fn drop(&mut self) {
        self.shutdown.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
