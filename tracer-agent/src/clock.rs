//! The agent's global clock: a `clocksync` discipline thread keeps a
//! software clock (CLOCK_MONOTONIC -> TAI-scale ns) locked to the chosen
//! reference; the main loop converts event stamps through a snapshot taken
//! once per drain, and ships each clock update as a clock event.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use clocksync::{
    measure_offset, ClockError, ClockId, ClockReport, ClockSnapshot, Discipline, ErrorInjection,
    GlobalClock, ReferenceClock, Servo, ServoConfig, ServoKind, ServoState, SourceOptions,
    SourceSpec, Worker,
};
use tracer_codec::{ClockEvent, ClockSource, ClockState};

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
    /// With [`SourceSpec::Sink`]: authenticate the exchange with this key
    /// (from `--key-file`).
    pub auth: Option<tracer_auth::MacKey>,
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
    pub fn start(cfg: &ClockConfig) -> Result<Self, ClockError> {
        let injection = ErrorInjection::nonzero(cfg.inject_offset_ns, cfg.inject_drift_ppm)?;
        let source = cfg.choice.open(&SourceOptions {
            injection,
            reads: 0,
            hw_iface: cfg.hw_iface.clone(),
            auth: cfg.auth.clone(),
        })?;
        let servo_cfg = ServoConfig {
            interval_s: cfg.interval.as_secs_f64(),
            hardware_timestamps: source.hardware_stamped(),
            ..Default::default()
        };
        let global = GlobalClock::default();
        let discipline = Discipline::new(source, Servo::new(cfg.servo, servo_cfg), global.clone());
        let (tx, reports) = mpsc::channel();
        let worker = discipline.spawn(cfg.interval, move |r| {
            let _ = tx.send(r);
        })?;
        let fallback_offset_ns = measure_offset(ClockId::Monotonic, ClockId::Tai, 16)?.offset_ns();
        Ok(AgentClock {
            global,
            source: wire_source(&cfg.choice),
            reports,
            _worker: worker,
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
            clock_state(snap.state)
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
