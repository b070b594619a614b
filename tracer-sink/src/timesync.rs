//! The sink as the time master for agents without PTP: its own global
//! clock, disciplined to `--clock` (CLOCK_TAI by default), answered on a
//! UDP port by the kernel-stamped two-way exchange responder.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use clocksync::exchange::{ExchangeStats, PhcMap, Responder, StampMode};
use clocksync::{
    ClockError, Discipline, FrequencyLimit, GlobalClock, ReferenceClock, Servo, ServoConfig,
    ServoKind, SourceOptions, SourceSpec, Worker,
};

/// Where and how the exchange responder answers.
#[derive(Debug, Clone)]
pub struct ResponderConfig {
    /// UDP address to answer on.
    pub listen: SocketAddr,
    /// Stamp with this interface's NIC hardware stamps instead of the
    /// kernel's software stamps.
    pub hw_iface: Option<String>,
    /// Answer only requests tagged with this key and tag the answers
    /// (the clock exchange key of `--key-file`).
    pub auth: Option<tracer_auth::MacKey>,
}

/// A running clock service. Dropping it stops its threads.
pub struct ClockService {
    clock: GlobalClock,
    addr: Option<SocketAddr>,
    /// Stopped first in `drop`, to log its counters.
    responder: Option<Worker<Result<ExchangeStats, ClockError>>>,
    _discipline: Worker<Discipline<Box<dyn ReferenceClock>>>,
}

/// Why the clock service could not start.
#[derive(Debug, thiserror::Error)]
pub enum ClockServiceError {
    /// `--clock` names the exchange: the sink is the master, not a client.
    #[error("--clock {0}: the sink is the master; expected system, phc:DEV or iface:NAME")]
    SinkIsMaster(String),
    /// Opening the reference failed.
    #[error("opening clock {spec}")]
    Open {
        /// The `--clock` value.
        spec: String,
        /// Why.
        source: ClockError,
    },
    /// Starting the discipline thread or the responder failed.
    #[error("starting the clock responder on {addr}")]
    Responder {
        /// The address served.
        addr: SocketAddr,
        /// Why.
        source: ClockError,
    },
    /// Starting the discipline thread failed.
    #[error("starting the clock thread")]
    Thread(#[source] ClockError),
    /// Binding the responder socket failed.
    #[error("cannot bind the clock responder to {addr}; pick another --clock-listen")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
}

impl ClockService {
    /// Discipline a global clock to `spec` (`system`, `phc:DEV`,
    /// `iface:NAME`, ...) every `interval` and, with `responder`, answer
    /// exchanges, stamped by the kernel or by the NIC of its `hw_iface`.
    pub fn start(
        spec: &SourceSpec,
        interval: Duration,
        responder: Option<&ResponderConfig>,
    ) -> Result<Self, ClockServiceError> {
        if matches!(spec, SourceSpec::Sink(_)) {
            return Err(ClockServiceError::SinkIsMaster(spec.to_string()));
        }
        let source =
            spec.open(&SourceOptions::default())
                .map_err(|source| ClockServiceError::Open {
                    spec: spec.to_string(),
                    source,
                })?;
        // As phc2sys does: the servo's clamp follows the clock's own limit.
        let clock_max_freq_ppb = spec
            .max_freq_ppb()
            .inspect_err(|e| tracing::warn!(error = %e, "cannot read the clock's frequency limit; using the servo's fallback"))
            .ok();
        let cfg = ServoConfig {
            interval_s: interval.as_secs_f64(),
            hardware_timestamps: source.hardware_stamped(),
            clock_max_freq_ppb,
            ..Default::default()
        };
        let clock = GlobalClock::default();
        let mut discipline = Discipline::new(source, Servo::new(ServoKind::Pi, cfg), clock.clone());
        // One sample now, so the clock exists before any agent asks.
        if let Err(e) = discipline.tick() {
            tracing::warn!(error = %e, "first clock sample failed");
        }
        let (responder, addr) = match responder {
            None => (None, None),
            Some(r) => {
                let (w, addr) = start_responder(r, &clock)?;
                (Some(w), Some(addr))
            }
        };
        let name = spec.to_string();
        let discipline = discipline
            .spawn(interval, move |r| match r {
                Ok(r) => tracing::debug!(clock = %name, line = %r.phc2sys_line(), "sink clock"),
                Err(e) => tracing::warn!(error = %e, "sink clock sample failed"),
            })
            .map_err(ClockServiceError::Thread)?;
        tracing::info!(clock = %spec, responder = ?addr, "sink clock started");
        Ok(ClockService {
            clock,
            addr,
            responder,
            _discipline: discipline,
        })
    }

    /// Where the responder listens (`None` without one).
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// The sink's global clock.
    pub fn clock(&self) -> &GlobalClock {
        &self.clock
    }
}

fn start_responder(
    cfg: &ResponderConfig,
    clock: &GlobalClock,
) -> Result<(Worker<Result<ExchangeStats, ClockError>>, SocketAddr), ClockServiceError> {
    let bind_err = |source| ClockServiceError::Bind {
        addr: cfg.listen,
        source,
    };
    let sock = UdpSocket::bind(cfg.listen).map_err(bind_err)?;
    let addr = sock.local_addr().map_err(bind_err)?;
    let auth = cfg.auth.clone();
    let worker = match &cfg.hw_iface {
        None => Responder::new(sock, clock.clone(), StampMode::Kernel)
            .map(|r| r.with_auth(auth))
            .and_then(Responder::spawn),
        Some(iface) => PhcMap::for_interface(iface)
            .and_then(|phc| Responder::with_hardware(sock, clock.clone(), phc))
            .map(|r| r.with_auth(auth))
            .and_then(Responder::spawn),
    }
    .map_err(|source| ClockServiceError::Responder { addr, source })?;
    Ok((worker, addr))
}

impl Drop for ClockService {
    fn drop(&mut self) {
        if let Some(r) = self.responder.take() {
            match r.finish() {
                Some(Ok(stats)) => tracing::info!(?stats, "clock responder stopped"),
                Some(Err(e)) => tracing::error!(error = %e, "clock responder failed"),
                None => tracing::error!("clock responder panicked"),
            }
        }
    }
}
