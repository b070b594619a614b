//! The agent's global clock: a `clocksync` discipline thread keeps a
//! software clock (CLOCK_MONOTONIC -> TAI-scale ns) locked to the chosen
//! reference; the main loop converts event stamps through a snapshot taken
//! once per drain, and ships each clock update as a clock event.
//!
//! With `--simulate-oscillator` (testing) this host's clock is a simulated
//! oscillator: [`LocalTime`] turns every raw kernel stamp into what that
//! clock reads, the clock sources read through it too, and the true stamps
//! go only to the optional truth log, never on the wire.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use clocksync::exchange::SharedExchangeStats;
use clocksync::{
    measure_offset, ClockError, ClockId, ClockReport, ClockSnapshot, Discipline, ErrorInjection,
    FrequencyLimit, GlobalClock, Oscillator, OscillatorSpec, ReferenceClock, SanityConfig,
    SanityCounters, Servo, ServoConfig, ServoKind, ServoState, SourceOptions, SourceSpec, Worker,
};
use tracer_codec::{ClockEvent, ClockSource, ClockState};

use crate::stats::ClockCounters;

/// Source advertised on the wire for a `--clock` choice.
pub fn wire_source(spec: &SourceSpec) -> ClockSource {
    match spec {
        SourceSpec::System(_) => ClockSource::System,
        // A simulated PHC stands in for a PHC.
        SourceSpec::Phc(_) | SourceSpec::Iface(_) | SourceSpec::Sim(_) => ClockSource::Phc,
        SourceSpec::Sink(_) => ClockSource::Sink,
    }
}

/// The wire's clock state for the servo state of a global clock (`None`
/// before its first sample): the one mapping from clocksync's vocabulary
/// to the codec's.
pub fn clock_state(state: Option<ServoState>) -> ClockState {
    match state {
        None | Some(ServoState::Unlocked) => ClockState::Unlocked,
        Some(ServoState::Jump) => ClockState::Jump,
        Some(ServoState::Locked) => ClockState::Locked,
        Some(ServoState::LockedStable) => ClockState::LockedStable,
        Some(ServoState::Holdover) => ClockState::Holdover,
    }
}

/// Clock settings of the agent.
#[derive(Debug, Clone)]
pub struct ClockConfig {
    /// The reference (`sink` already resolved to the sink's responder).
    pub choice: SourceSpec,
    /// Servo algorithm.
    pub servo: ServoKind,
    /// Update interval.
    pub interval: Duration,
    /// Testing only: pretend this host's realtime/TAI clock is off by
    /// offset + drift * elapsed.
    pub inject_offset_ns: i64,
    /// Testing only: drift of the injected error, ppm.
    pub inject_drift_ppm: f64,
    /// With [`SourceSpec::Sink`]: stamp the exchange with this interface's
    /// NIC hardware stamps.
    pub hw_iface: Option<String>,
    /// Testing only: this host's clock is this simulated oscillator.
    pub oscillator: Option<OscillatorSpec>,
    /// Testing only, with `oscillator`: write every converted stamp's local
    /// and true value to this file.
    pub truth_log: Option<PathBuf>,
    /// With [`SourceSpec::Sink`]: authenticate the exchange with this key
    /// (from `--key-file`).
    pub auth: Option<tracer_auth::MacKey>,
    /// The servo's sanity check (`--servo-max-change`,
    /// `--servo-max-freq-change`, `--no-servo-sanity`).
    pub sanity: SanityConfig,
}

/// Why the clock could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ClockSetupError {
    /// The source or its discipline thread failed.
    #[error(transparent)]
    Clock(#[from] ClockError),
    /// The truth log could not be created.
    #[error("creating the oscillator truth log {path}")]
    TruthLog {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Raw kernel stamps as this host's clock reads them: unchanged, or through
/// the simulated oscillator (each pair then goes to the truth log, if any).
pub struct LocalTime {
    osc: Option<Oscillator>,
    truth: Option<TruthLog>,
}

impl LocalTime {
    /// Stamps read as they are.
    pub fn real() -> Self {
        LocalTime {
            osc: None,
            truth: None,
        }
    }

    /// Stamps read through `osc`, logged to `truth` if given.
    pub fn simulated(osc: Oscillator, truth: Option<&Path>) -> std::io::Result<Self> {
        let truth = truth.map(|p| TruthLog::create(p, &osc)).transpose()?;
        Ok(LocalTime {
            osc: Some(osc),
            truth,
        })
    }

    /// The oscillator, if simulated.
    pub fn oscillator(&self) -> Option<&Oscillator> {
        self.osc.as_ref()
    }

    /// A raw CLOCK_MONOTONIC stamp as this host's clock reads it.
    #[inline]
    pub fn mono(&mut self, raw_ns: u64) -> u64 {
        match &self.osc {
            None => raw_ns,
            Some(o) => {
                let local = o.local_ns(raw_ns);
                if let Some(t) = self.truth.as_mut() {
                    t.record('m', local, raw_ns);
                }
                local
            }
        }
    }

    /// A raw CLOCK_REALTIME stamp as this host's realtime clock reads it,
    /// given the kernel's `realtime - monotonic` now.
    #[inline]
    pub fn realtime(&mut self, raw_ns: u64, realtime_minus_mono_ns: i64) -> u64 {
        match &self.osc {
            None => raw_ns,
            Some(o) => {
                let local = o.local_realtime_ns(raw_ns, realtime_minus_mono_ns);
                if let Some(t) = self.truth.as_mut() {
                    t.record('r', local, raw_ns);
                }
                local
            }
        }
    }

    /// Write out what the truth log buffered.
    pub fn flush(&mut self) {
        if let Some(t) = self.truth.as_mut() {
            t.flush();
        }
    }
}

/// The truth log: one line per converted stamp, `m|r LOCAL TRUE` (m: a
/// CLOCK_MONOTONIC stamp, r: a CLOCK_REALTIME one; ns), after `#` header
/// lines. A reader joins it with the trace on the local stamp.
struct TruthLog {
    out: std::io::BufWriter<std::fs::File>,
    path: PathBuf,
    failed: bool,
}

impl TruthLog {
    fn create(path: &Path, osc: &Oscillator) -> std::io::Result<Self> {
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        writeln!(
            out,
            "# nettrace oscillator truth: kind local_ns true_ns\n# oscillator {} start_mono_ns {}",
            osc.spec(),
            osc.start_mono_ns()
        )?;
        Ok(TruthLog {
            out,
            path: path.to_owned(),
            failed: false,
        })
    }

    fn record(&mut self, kind: char, local: u64, truth: u64) {
        if !self.failed {
            let r = writeln!(self.out, "{kind} {local} {truth}");
            self.check(r);
        }
    }

    fn flush(&mut self) {
        if !self.failed {
            let r = self.out.flush();
            self.check(r);
        }
    }

    fn check(&mut self, r: std::io::Result<()>) {
        if let Err(e) = r {
            self.failed = true;
            tracing::warn!(path = %self.path.display(), error = %e,
                "writing the oscillator truth log failed; it stops here");
        }
    }
}

/// Running clock: discipline thread + the shared global clock.
pub struct AgentClock {
    global: GlobalClock,
    source: ClockSource,
    reports: mpsc::Receiver<Result<ClockReport, ClockError>>,
    /// The discipline thread; dropping it stops it.
    _worker: Worker<Discipline<Box<dyn ReferenceClock>>>,
    fallback_offset_ns: i64,
    injection: Option<ErrorInjection>,
    failures: u64,
    /// The exchange's counters (with `--clock sink`).
    exchange: Option<SharedExchangeStats>,
    /// The servo's sanity counters as of the last update received.
    sanity: SanityCounters,
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
    /// The mapping of `global` now. Before its first sample the global
    /// axis is `fallback_offset_ns` (this host's TAI - MONOTONIC), plus the
    /// injected error if any, after CLOCK_MONOTONIC.
    pub fn new(
        global: &GlobalClock,
        fallback_offset_ns: i64,
        injection: Option<ErrorInjection>,
    ) -> Self {
        let snap = global.snapshot();
        let state = if snap.segments.is_empty() {
            ClockState::Unlocked
        } else {
            clock_state(snap.state)
        };
        Converter {
            snap,
            fallback_offset_ns,
            injection,
            state,
        }
    }

    /// Global ns of a monotonic stamp as this host reads it (see
    /// [`LocalTime::mono`]). Before the first sample the
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

#[cfg(test)]
impl Converter {
    /// A converter before any sample whose fallback puts the global axis
    /// `offset_ns` after CLOCK_MONOTONIC, for tests.
    pub fn fixed(offset_ns: i64) -> Self {
        Converter {
            snap: Arc::new(ClockSnapshot::default()),
            fallback_offset_ns: offset_ns,
            injection: None,
            state: ClockState::Unlocked,
        }
    }
}

impl AgentClock {
    /// Open the reference and start disciplining. Returns the clock and
    /// how this host reads raw stamps.
    pub fn start(cfg: &ClockConfig) -> Result<(Self, LocalTime), ClockSetupError> {
        let injection = ErrorInjection::nonzero(cfg.inject_offset_ns, cfg.inject_drift_ppm)?;
        let oscillator = cfg.oscillator.map(OscillatorSpec::start_now).transpose()?;
        let local = match &oscillator {
            None => LocalTime::real(),
            Some(o) => {
                tracing::warn!(oscillator = %o.spec(), truth_log = ?cfg.truth_log,
                    "TESTING: this host's clock is a simulated oscillator \
                     (offset_ns,drift_ppm,wander_ppb_per_s,noise_ns,seed)");
                let path = cfg.truth_log.as_deref();
                LocalTime::simulated(o.clone(), path).map_err(|source| {
                    ClockSetupError::TruthLog {
                        path: path.unwrap_or(Path::new("")).to_owned(),
                        source,
                    }
                })?
            }
        };
        let source = cfg.choice.open(&SourceOptions {
            injection,
            oscillator,
            reads: 0,
            hw_iface: cfg.hw_iface.clone(),
            auth: cfg.auth.clone(),
        })?;
        // As phc2sys does: the servo's clamp follows the clock's own limit.
        let clock_max_freq_ppb = cfg
            .choice
            .max_freq_ppb()
            .inspect_err(|e| tracing::warn!(error = %e, "cannot read the clock's frequency limit; using the servo's fallback"))
            .ok();
        let servo_cfg = ServoConfig {
            interval_s: cfg.interval.as_secs_f64(),
            hardware_timestamps: source.hardware_stamped(),
            clock_max_freq_ppb,
            sanity: cfg.sanity,
            ..Default::default()
        };
        let exchange = source.exchange_stats();
        let global = GlobalClock::default();
        let discipline = Discipline::new(source, Servo::new(cfg.servo, servo_cfg), global.clone());
        let (tx, reports) = mpsc::channel();
        let worker = discipline.spawn(cfg.interval, move |r| {
            let _ = tx.send(r);
        })?;
        // TAI - MONO is the same on an oscillator (both clocks share it),
        // so the fallback applies to local stamps unchanged.
        let fallback_offset_ns = measure_offset(ClockId::Monotonic, ClockId::Tai, 16)?.offset_ns();
        let clock = AgentClock {
            global,
            source: wire_source(&cfg.choice),
            reports,
            _worker: worker,
            fallback_offset_ns,
            injection,
            failures: 0,
            exchange,
            sanity: SanityCounters::default(),
        };
        Ok((clock, local))
    }

    /// What the clock refused so far: failed samples, the servo's sanity
    /// counters (as of the last update drained), the exchange's counters
    /// (as of its last exchange).
    pub fn counters(&self) -> ClockCounters {
        ClockCounters {
            sample_failures: self.failures,
            sanity: self.sanity,
            exchange: self.exchange.as_ref().map(SharedExchangeStats::get),
        }
    }

    /// Source advertised on the wire.
    pub fn source(&self) -> ClockSource {
        self.source
    }

    /// The mapping now in force.
    pub fn converter(&self) -> Converter {
        Converter::new(&self.global, self.fallback_offset_ns, self.injection)
    }

    /// Clock updates since the last call, as wire events. Failed samples
    /// are logged (rate-limited) and counted.
    pub fn drain_events(&mut self) -> Vec<ClockEvent> {
        let mut out = Vec::new();
        while let Ok(r) = self.reports.try_recv() {
            match r {
                Ok(r) => {
                    self.sanity = r.sanity;
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
                        state: clock_state(Some(r.state)) as u8,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servo_states_map_to_the_wire_codes_the_servo_reports() {
        for s in [
            ServoState::Unlocked,
            ServoState::Jump,
            ServoState::Locked,
            ServoState::LockedStable,
            ServoState::Holdover,
        ] {
            // The wire code is phc2sys's s0..s3, as the servo prints it.
            assert_eq!(clock_state(Some(s)) as u8, s.code(), "{s:?}");
            let wire_locked = matches!(
                clock_state(Some(s)),
                ClockState::Locked | ClockState::LockedStable
            );
            assert_eq!(wire_locked, s.is_locked(), "{s:?}");
        }
        assert_eq!(clock_state(None), ClockState::Unlocked);
    }

    #[test]
    fn local_time_reads_through_the_oscillator_and_logs_the_truth() {
        let mut real = LocalTime::real();
        assert_eq!((real.mono(5), real.realtime(9, 4)), (5, 9));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("truth");
        let osc = OscillatorSpec::new(3_000_000, 50.0).start_at(1_000_000_000);
        let mut local = LocalTime::simulated(osc, Some(&path)).unwrap();
        // Two seconds in: 3 ms + 100 µs ahead.
        assert_eq!(local.mono(3_000_000_000), 3_003_100_000);
        // REALTIME = MONOTONIC + 10 s here: same instant, same error.
        assert_eq!(
            local.realtime(13_000_000_000, 10_000_000_000),
            13_003_100_000
        );
        local.flush();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines,
            ["m 3003100000 3000000000", "r 13003100000 13000000000"]
        );
        assert!(text.contains("# oscillator 3000000,50,0,0,1 start_mono_ns 1000000000"));
    }

    #[test]
    fn every_source_has_a_wire_source() {
        for (s, want) in [
            ("system", ClockSource::System),
            ("phc:/dev/ptp0", ClockSource::Phc),
            ("iface:eth0", ClockSource::Phc),
            ("sim", ClockSource::Phc),
            ("sink:10.0.0.1:7421", ClockSource::Sink),
        ] {
            assert_eq!(wire_source(&s.parse().unwrap()), want, "{s}");
        }
    }
}
