//! The sink as the time master for agents without PTP: its own global
//! clock, disciplined to `--clock` (CLOCK_TAI by default), answered on a
//! UDP port by the kernel-stamped two-way exchange responder.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clocksync::clock::SourceOptions;
use clocksync::exchange::{spawn_responder, PhcMap, Responder, StampMode};
use clocksync::{ClockError, Discipline, GlobalClock, Servo, ServoConfig, ServoKind, SourceSpec};

/// A running clock service. Dropping it stops both threads.
pub struct ClockService {
    clock: GlobalClock,
    addr: SocketAddr,
    shutdown: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// Why the clock service could not start.
#[derive(Debug, thiserror::Error)]
pub enum ClockServiceError {
    /// `--clock` names something the sink cannot follow.
    #[error("--clock {spec:?}: {reason}")]
    Spec {
        /// The value given.
        spec: String,
        /// Why it is refused.
        reason: String,
    },
    /// Opening the reference or the responder socket failed.
    #[error("{what}: {source}")]
    Clock {
        /// What was being done.
        what: String,
        /// The error.
        source: ClockError,
    },
    /// Binding the responder socket failed.
    #[error("cannot bind the clock responder to {addr}: {source}; pick another --clock-listen")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
}

impl ClockService {
    /// Discipline a global clock to `spec` (`system`, `phc:DEV`,
    /// `iface:NAME`) every `interval`, and answer exchanges on `listen`,
    /// stamped by the kernel, or by the NIC of `hw_iface`.
    pub fn start(
        spec: &str,
        listen: SocketAddr,
        interval: Duration,
        hw_iface: Option<&str>,
    ) -> Result<Self, ClockServiceError> {
        let parsed: SourceSpec = spec
            .parse()
            .map_err(|e: ClockError| ClockServiceError::Spec {
                spec: spec.into(),
                reason: e.to_string(),
            })?;
        if matches!(parsed, SourceSpec::Sink(_)) {
            return Err(ClockServiceError::Spec {
                spec: spec.into(),
                reason: "the sink is the master; expected system, phc:DEV or iface:NAME".into(),
            });
        }
        let source =
            parsed
                .open(&SourceOptions::default())
                .map_err(|source| ClockServiceError::Clock {
                    what: format!("opening clock {spec}"),
                    source,
                })?;
        let cfg = ServoConfig {
            interval_s: interval.as_secs_f64(),
            hardware_timestamps: source.hardware_stamped(),
            ..Default::default()
        };
        let clock = GlobalClock::default();
        let mut discipline = Discipline::new(source, Servo::new(ServoKind::Pi, cfg), clock.clone());
        // One sample now, so the clock exists before any agent asks.
        if let Err(e) = discipline.tick() {
            tracing::warn!(error = %e, "first clock sample failed");
        }
        let shutdown = Arc::new(AtomicBool::new(false));
        let sock = UdpSocket::bind(listen).map_err(|source| ClockServiceError::Bind {
            addr: listen,
            source,
        })?;
        let addr = sock
            .local_addr()
            .map_err(|source| ClockServiceError::Bind {
                addr: listen,
                source,
            })?;
        let responder = match hw_iface {
            None => spawn_responder(
                sock,
                clock.clone(),
                StampMode::Kernel,
                Arc::clone(&shutdown),
            ),
            Some(iface) => PhcMap::for_interface(iface)
                .and_then(|phc| Responder::with_hardware(sock, clock.clone(), phc))
                .and_then(|r| r.spawn(Arc::clone(&shutdown))),
        }
        .map_err(|source| ClockServiceError::Clock {
            what: format!("starting the clock responder on {addr}"),
            source,
        })?;
        let spec_name = spec.to_owned();
        let d = discipline
            .spawn(interval, Arc::clone(&shutdown), move |r| match r {
                Ok(r) => {
                    tracing::debug!(clock = %spec_name, line = %r.phc2sys_line(), "sink clock")
                }
                Err(e) => tracing::warn!(error = %e, "sink clock sample failed"),
            })
            .map_err(|source| ClockServiceError::Clock {
                what: "starting the clock thread".into(),
                source: ClockError::Io {
                    what: "spawn".into(),
                    source,
                },
            })?;
        tracing::info!(clock = spec, responder = %addr, "clock responder started");
        Ok(ClockService {
            clock,
            addr,
            shutdown,
            threads: vec![
                std::thread::spawn(move || {
                    let _ = d.join();
                }),
                std::thread::spawn(move || match responder.join() {
                    Ok(Ok(stats)) => tracing::info!(?stats, "clock responder stopped"),
                    Ok(Err(e)) => tracing::error!(error = %e, "clock responder failed"),
                    Err(_) => tracing::error!("clock responder panicked"),
                }),
            ],
        })
    }

    /// Where the responder listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The sink's global clock.
    pub fn clock(&self) -> &GlobalClock {
        &self.clock
    }
}

impl Drop for ClockService {
    fn drop(&mut self) {
        self.shutdown.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
