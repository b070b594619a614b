//! The one place that knows every source: [`SourceSpec`] parses a clock
//! named on a command line (`FromStr`, so clap takes it as a value) and
//! opens it as a [`ReferenceClock`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use crate::bracket::ClockId;
use crate::error::ClockError;
use crate::source::exchange::client::{ExchangeClient, ExchangeConfig};
use crate::source::inject::ErrorInjection;
use crate::source::oscillator::{OnOscillator, Oscillator};
use crate::source::phc::PhcClock;
use crate::source::sim::{SimConfig, SimPhc};
use crate::source::system::SystemClock;
use crate::source::traits::{ReferenceClock, DEFAULT_READS};

/// What every parse error says is accepted.
pub const EXPECTED: &str =
    "expected system|tai|realtime|monotonic_raw|phc:/dev/ptpN|iface:NAME|sim[:k=v,..]|sink:IP:PORT";

/// A clock source named on a command line.
///
/// | text | source |
/// |---|---|
/// | `system`, `tai` | CLOCK_TAI ([`SystemClock`]) |
/// | `realtime` | CLOCK_REALTIME |
/// | `monotonic_raw` | CLOCK_MONOTONIC_RAW |
/// | `phc:/dev/ptp0` | a PHC device ([`PhcClock`]) |
/// | `iface:eth0` | the PHC of an interface (ETHTOOL_GET_TS_INFO) |
/// | `sim[:k=v,...]` | simulated PHC ([`SimConfig::parse`]) |
/// | `sink:HOST:PORT` | two-way exchange with a sink ([`crate::exchange`]) |
#[derive(Debug, Clone, PartialEq)]
pub enum SourceSpec {
    /// A system clock.
    System(ClockId),
    /// A PHC device path.
    Phc(PathBuf),
    /// The PHC of a network interface.
    Iface(String),
    /// A simulated PHC.
    Sim(SimConfig),
    /// Two-way exchange with the responder at this address.
    Sink(SocketAddr),
}

impl FromStr for SourceSpec {
    type Err = ClockError;
    fn from_str(s: &str) -> Result<Self, ClockError> {
        let bad = |reason: String| ClockError::BadSpec {
            spec: s.to_string(),
            reason,
        };
        let (kind, arg) = match s.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (s, None),
        };
        match (kind, arg) {
            ("tai" | "system", None) => Ok(SourceSpec::System(ClockId::Tai)),
            ("realtime", None) => Ok(SourceSpec::System(ClockId::Realtime)),
            ("monotonic_raw", None) => Ok(SourceSpec::System(ClockId::MonotonicRaw)),
            ("phc", Some(p)) if !p.is_empty() => Ok(SourceSpec::Phc(PathBuf::from(p))),
            ("iface", Some(i)) if !i.is_empty() => Ok(SourceSpec::Iface(i.to_string())),
            ("sim", a) => SimConfig::parse(a.unwrap_or(""))
                .map(SourceSpec::Sim)
                .map_err(bad),
            ("sink", Some(a)) => match a.parse::<SocketAddr>() {
                Ok(addr) if addr.port() == 0 => Err(bad(
                    "port 0: give the responder's port (the sink's port + 1 by default)".into(),
                )),
                Ok(addr) => Ok(SourceSpec::Sink(addr)),
                Err(_) => Err(bad("expected sink:IP:PORT".into())),
            },
            _ => Err(bad(EXPECTED.into())),
        }
    }
}

impl std::fmt::Display for SourceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceSpec::System(ClockId::Tai) => f.write_str("system"),
            SourceSpec::System(ClockId::Realtime) => f.write_str("realtime"),
            SourceSpec::System(ClockId::MonotonicRaw) => f.write_str("monotonic_raw"),
            SourceSpec::System(ClockId::Monotonic) => f.write_str("monotonic"),
            SourceSpec::Phc(p) => write!(f, "phc:{}", p.display()),
            SourceSpec::Iface(i) => write!(f, "iface:{i}"),
            SourceSpec::Sim(_) => f.write_str("sim"),
            SourceSpec::Sink(a) => write!(f, "sink:{a}"),
        }
    }
}

/// Options common to every source when opening a [`SourceSpec`].
#[derive(Debug, Clone, Default)]
pub struct SourceOptions {
    /// Test-only clock error (realtime/TAI sources and the exchange).
    pub injection: Option<ErrorInjection>,
    /// Test-only simulated oscillator of this host: every source reads its
    /// monotonic instants (and system clocks) through it.
    pub oscillator: Option<Oscillator>,
    /// Readings per sample (0 = default: [`DEFAULT_READS`], or the
    /// exchange's burst size).
    pub reads: usize,
    /// For `sink:`: use this interface's NIC hardware stamps.
    pub hw_iface: Option<String>,
    /// For `sink:`: authenticate the exchange with this key.
    pub auth: Option<tracer_auth::MacKey>,
}

impl SourceSpec {
    /// Open the source.
    pub fn open(&self, opts: &SourceOptions) -> Result<Box<dyn ReferenceClock>, ClockError> {
        let reads = if opts.reads == 0 {
            DEFAULT_READS
        } else {
            opts.reads
        };
        // A separate clock (PHC, simulated PHC) only sees its monotonic
        // instants moved by this host's oscillator.
        let on_osc = |r: Box<dyn ReferenceClock>| -> Box<dyn ReferenceClock> {
            match &opts.oscillator {
                Some(o) => Box::new(OnOscillator::new(r, o.clone())),
                None => r,
            }
        };
        Ok(match self {
            SourceSpec::System(id) => Box::new(
                SystemClock::new(*id)
                    .with_injection(opts.injection)
                    .with_oscillator(opts.oscillator.clone())
                    .with_reads(reads),
            ),
            SourceSpec::Phc(path) => on_osc(Box::new(PhcClock::open(path)?.with_reads(reads))),
            SourceSpec::Iface(name) => {
                on_osc(Box::new(PhcClock::for_interface(name)?.with_reads(reads)))
            }
            SourceSpec::Sim(cfg) => on_osc(Box::new(SimPhc::new(cfg.clone()))),
            SourceSpec::Sink(addr) => {
                let mut cfg = ExchangeConfig {
                    injection: opts.injection,
                    oscillator: opts.oscillator.clone(),
                    hw_iface: opts.hw_iface.clone(),
                    auth: opts.auth.clone(),
                    ..Default::default()
                };
                if opts.reads != 0 {
                    cfg.burst = opts.reads;
                }
                Box::new(ExchangeClient::connect(*addr, cfg)?)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_specs() {
        assert_eq!(
            "tai".parse::<SourceSpec>().unwrap(),
            SourceSpec::System(ClockId::Tai)
        );
        assert_eq!(
            "phc:/dev/ptp1".parse::<SourceSpec>().unwrap(),
            SourceSpec::Phc("/dev/ptp1".into())
        );
        assert_eq!(
            "iface:eth0".parse::<SourceSpec>().unwrap(),
            SourceSpec::Iface("eth0".into())
        );
        assert_eq!(
            "sink:10.0.0.1:319".parse::<SourceSpec>().unwrap(),
            SourceSpec::Sink("10.0.0.1:319".parse().unwrap())
        );
        assert!(matches!(
            "sim".parse::<SourceSpec>().unwrap(),
            SourceSpec::Sim(_)
        ));
        assert!("phc:".parse::<SourceSpec>().is_err());
        let e = "sink:10.0.0.1:0".parse::<SourceSpec>().unwrap_err();
        assert!(e.to_string().contains("port 0"), "{e}");
        let e = "bogus".parse::<SourceSpec>().unwrap_err();
        assert!(matches!(e, ClockError::BadSpec { .. }), "{e:?}");
        assert!(e.to_string().contains("phc:/dev/ptpN"), "{e}");
    }

    #[test]
    fn display_parses_back() {
        for s in [
            "system",
            "realtime",
            "monotonic_raw",
            "phc:/dev/ptp3",
            "iface:eth1",
            "sink:10.0.0.1:7421",
            "sink:[::1]:7421",
        ] {
            let spec: SourceSpec = s.parse().unwrap();
            assert_eq!(spec.to_string(), s);
            assert_eq!(spec.to_string().parse::<SourceSpec>().unwrap(), spec);
        }
    }
}
