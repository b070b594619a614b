//! Clock sources behind one interface: [`Clock`] reads a clock,
//! [`ReferenceClock`] gives offset samples of a reference against
//! CLOCK_MONOTONIC (what the global clock is built on). System clocks live
//! here; the PHC, the simulated PHC and the two-way exchange in their own
//! files. [`SourceSpec`] opens any of them from a command-line string.

use std::path::PathBuf;
use std::str::FromStr;

use crate::bracket::{measure_offset, now_ns, ClockId};
use crate::error::ClockError;

/// A clock that can be read.
pub trait Clock {
    /// Current time of this clock, ns since its epoch.
    fn now_ns(&mut self) -> Result<u64, ClockError>;
    /// Human-readable name ("CLOCK_TAI", "/dev/ptp0", "sim").
    fn name(&self) -> String;
}

/// "At monotonic instant `mono_ns` the reference read `ref_ns`."
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct OffsetSample {
    /// CLOCK_MONOTONIC instant of the reading (bracket midpoint), ns.
    pub mono_ns: u64,
    /// Reference (global axis, TAI scale) at that instant, ns.
    pub ref_ns: u64,
    /// Half-width of the bracket (or half the round-trip delay): the
    /// reading is within ± this of the truth, asymmetry aside.
    pub uncertainty_ns: u64,
    /// Read delay (bracket width) or network round-trip delay, ns.
    pub delay_ns: u64,
}

impl OffsetSample {
    /// `ref - mono`, signed.
    pub fn ref_minus_mono_ns(&self) -> i64 {
        self.ref_ns.wrapping_sub(self.mono_ns) as i64
    }
}

/// A reference the global clock is disciplined to.
pub trait ReferenceClock: Clock + Send {
    /// Take one offset sample (possibly the best of several readings).
    fn sample(&mut self) -> Result<OffsetSample, ClockError>;
    /// Whether the stamps are hardware-grade (selects the PI gain scales,
    /// see `pi.rs`). phc2sys uses the hardware gains for every clock it reads
    /// directly, so only noisy network sources say false.
    fn hardware_stamped(&self) -> bool {
        true
    }
    /// Wait `dt_ns` before the next sample. Real sources sleep; the
    /// simulated PHC advances its simulated time instead, so simulations
    /// run instantly.
    fn wait_ns(&mut self, dt_ns: u64) {
        std::thread::sleep(std::time::Duration::from_nanos(dt_ns));
    }
    /// Ground truth `ref - mono` at `mono_ns`, when known (simulation only).
    fn truth_ref_ns(&self, _mono_ns: u64) -> Option<u64> {
        None
    }
}

impl<C: Clock + ?Sized> Clock for Box<C> {
    fn now_ns(&mut self) -> Result<u64, ClockError> {
        (**self).now_ns()
    }
    fn name(&self) -> String {
        (**self).name()
    }
}

impl<R: ReferenceClock + ?Sized> ReferenceClock for Box<R> {
    fn sample(&mut self) -> Result<OffsetSample, ClockError> {
        (**self).sample()
    }
    fn hardware_stamped(&self) -> bool {
        (**self).hardware_stamped()
    }
    fn wait_ns(&mut self, dt_ns: u64) {
        (**self).wait_ns(dt_ns)
    }
    fn truth_ref_ns(&self, mono_ns: u64) -> Option<u64> {
        (**self).truth_ref_ns(mono_ns)
    }
}

/// Test-only error injection: behave as if this host's CLOCK_REALTIME and
/// CLOCK_TAI were off by `offset_ns + drift_ppm·1e-6·(mono - start_mono_ns)`.
/// Applied to every realtime/TAI reading ([`SystemClock`], the exchange's
/// realtime→monotonic mapping) and every kernel realtime stamp the exchange
/// reads. CLOCK_MONOTONIC is never touched.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct ErrorInjection {
    /// Error at `start_mono_ns`, ns.
    pub offset_ns: i64,
    /// Frequency error, ppm (the error grows by this many µs per second).
    pub drift_ppm: f64,
    /// Monotonic instant the drift is counted from, ns.
    pub start_mono_ns: u64,
}

impl ErrorInjection {
    /// An injection whose drift starts now.
    pub fn starting_now(offset_ns: i64, drift_ppm: f64) -> Result<Self, ClockError> {
        Ok(ErrorInjection {
            offset_ns,
            drift_ppm,
            start_mono_ns: now_ns(ClockId::Monotonic)?,
        })
    }

    /// True when it changes nothing.
    pub fn is_zero(&self) -> bool {
        self.offset_ns == 0 && self.drift_ppm == 0.0
    }

    /// The injected error at monotonic instant `mono_ns`, ns.
    pub fn error_ns(&self, mono_ns: u64) -> i64 {
        let elapsed_ns = mono_ns.wrapping_sub(self.start_mono_ns) as i64;
        self.offset_ns + (elapsed_ns as f64 * self.drift_ppm * 1e-6).round() as i64
    }

    /// A realtime/TAI reading or kernel stamp taken at about `mono_ns`, as the
    /// faulty host would see it.
    pub fn apply(&self, realtime_ns: u64, mono_ns: u64) -> u64 {
        realtime_ns.wrapping_add(self.error_ns(mono_ns) as u64)
    }
}

/// Apply an optional injection.
pub(crate) fn inject(inj: Option<&ErrorInjection>, realtime_ns: u64, mono_ns: u64) -> u64 {
    inj.map_or(realtime_ns, |i| i.apply(realtime_ns, mono_ns))
}

/// Default number of bracketed readings per sample; phc2sys `-N` default 5.
pub const DEFAULT_READS: usize = 5;

/// A system clock (CLOCK_TAI, CLOCK_REALTIME, ...), read against
/// CLOCK_MONOTONIC with the narrowest of `reads` brackets.
#[derive(Debug, Clone)]
pub struct SystemClock {
    id: ClockId,
    injection: Option<ErrorInjection>,
    reads: usize,
}

impl SystemClock {
    /// A system clock with [`DEFAULT_READS`] reads per sample.
    pub fn new(id: ClockId) -> Self {
        SystemClock {
            id,
            injection: None,
            reads: DEFAULT_READS,
        }
    }

    /// Apply an error injection (only to REALTIME and TAI).
    pub fn with_injection(mut self, inj: Option<ErrorInjection>) -> Self {
        self.injection = inj.filter(|i| !i.is_zero());
        self
    }

    /// Readings per sample (the narrowest bracket wins).
    pub fn with_reads(mut self, reads: usize) -> Self {
        self.reads = reads.max(1);
        self
    }

    fn injection(&self) -> Option<&ErrorInjection> {
        match self.id {
            ClockId::Realtime | ClockId::Tai => self.injection.as_ref(),
            ClockId::Monotonic | ClockId::MonotonicRaw => None,
        }
    }
}

impl Clock for SystemClock {
    fn now_ns(&mut self) -> Result<u64, ClockError> {
        let t = now_ns(self.id)?;
        match self.injection() {
            Some(inj) => Ok(inj.apply(t, now_ns(ClockId::Monotonic)?)),
            None => Ok(t),
        }
    }
    fn name(&self) -> String {
        format!("{:?}", self.id).to_uppercase()
    }
}

impl ReferenceClock for SystemClock {
    fn sample(&mut self) -> Result<OffsetSample, ClockError> {
        let b = measure_offset(ClockId::Monotonic, self.id, self.reads)?;
        Ok(OffsetSample {
            mono_ns: b.base_ns,
            ref_ns: inject(self.injection(), b.target_ns, b.base_ns),
            uncertainty_ns: b.width_ns / 2,
            delay_ns: b.width_ns,
        })
    }
}

/// Converts kernel CLOCK_REALTIME stamps to CLOCK_MONOTONIC with one tight
/// bracket (both are the same kernel's clocks, so the offset only moves when
/// NTP steps or slews realtime; refresh it often).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RealtimeToMono {
    /// `realtime - monotonic` as seen by this host (injection included), ns.
    pub offset_ns: i64,
    /// Bracket width of the measurement, ns.
    pub width_ns: u64,
    /// When it was measured (monotonic), ns.
    pub mono_ns: u64,
}

impl RealtimeToMono {
    /// Measure now, best of `reads` brackets; `inj` shifts the realtime reads.
    pub fn measure(inj: Option<&ErrorInjection>, reads: usize) -> Result<Self, ClockError> {
        let b = measure_offset(ClockId::Monotonic, ClockId::Realtime, reads)?;
        let rt = inject(inj, b.target_ns, b.base_ns);
        Ok(RealtimeToMono {
            offset_ns: rt.wrapping_sub(b.base_ns) as i64,
            width_ns: b.width_ns,
            mono_ns: b.base_ns,
        })
    }

    /// A realtime stamp on the monotonic axis.
    pub fn to_mono(&self, realtime_ns: u64) -> u64 {
        realtime_ns.wrapping_sub(self.offset_ns as u64)
    }
}

/// `realtime - monotonic` of this kernel, known to a few ns.
///
/// Both clocks come from one timekeeper and NTP slews them alike, so their
/// difference is a constant that changes only when realtime is stepped.
/// Each bracket `mono1, rt, mono2` proves `rt - mono2 ≤ offset ≤ rt - mono1`;
/// the tracker intersects these intervals over many brackets, which pins the
/// offset far tighter than one bracket's width. A bracket disjoint from the
/// interval means realtime was stepped: start over. The interval is also
/// restarted every `max_age_ns` so a slow drift cannot leave it stale.
#[derive(Debug, Clone, Copy)]
pub struct RealtimeMonoTracker {
    lo_ns: i64,
    hi_ns: i64,
    since_mono_ns: u64,
    max_age_ns: u64,
}

impl RealtimeMonoTracker {
    /// A tracker primed with 16 brackets; restarted each second.
    pub fn new() -> Result<Self, ClockError> {
        let mut t = RealtimeMonoTracker {
            lo_ns: i64::MIN,
            hi_ns: i64::MAX,
            since_mono_ns: 0,
            max_age_ns: 1_000_000_000,
        };
        for _ in 0..16 {
            t.refresh()?;
        }
        Ok(t)
    }

    /// Take one more bracket.
    pub fn refresh(&mut self) -> Result<(), ClockError> {
        let m1 = now_ns(ClockId::Monotonic)?;
        let rt = now_ns(ClockId::Realtime)?;
        let m2 = now_ns(ClockId::Monotonic)?;
        let lo = rt.wrapping_sub(m2) as i64;
        let hi = rt.wrapping_sub(m1) as i64;
        let stale = m1.saturating_sub(self.since_mono_ns) > self.max_age_ns;
        if stale || lo > self.hi_ns || hi < self.lo_ns {
            // Fresh start (first use, age, or realtime stepped).
            self.lo_ns = lo;
            self.hi_ns = hi;
            self.since_mono_ns = m1;
        } else {
            self.lo_ns = self.lo_ns.max(lo);
            self.hi_ns = self.hi_ns.min(hi);
        }
        Ok(())
    }

    /// Best estimate of `realtime - monotonic`, ns.
    pub fn offset_ns(&self) -> i64 {
        self.lo_ns + (self.hi_ns - self.lo_ns) / 2
    }

    /// Width of the interval the offset is known to lie in, ns.
    pub fn width_ns(&self) -> u64 {
        (self.hi_ns - self.lo_ns).max(0) as u64
    }

    /// A (true) realtime stamp on the monotonic axis.
    pub fn to_mono(&self, realtime_ns: u64) -> u64 {
        realtime_ns.wrapping_sub(self.offset_ns() as u64)
    }

    /// A realtime stamp read by a host with injected error `inj`, on the
    /// monotonic axis, as that host computes it: its realtime readings carry
    /// the same error, so the error cancels.
    pub fn to_mono_injected(&self, realtime_ns: u64, inj: Option<&ErrorInjection>) -> u64 {
        match inj {
            None => self.to_mono(realtime_ns),
            Some(i) => {
                // Solve rt = mono + offset + err(mono) for mono. err depends
                // on mono (drift), and a first guess off by the injected
                // offset would misplace it by drift * offset (50 ppm of 3 ms
                // is 150 ns): iterate; each round shrinks that by the drift.
                let mut mono = self.to_mono(realtime_ns);
                for _ in 0..3 {
                    let its_offset = self.offset_ns() + i.error_ns(mono);
                    mono = realtime_ns.wrapping_sub(its_offset as u64);
                }
                mono
            }
        }
    }
}

/// A clock source named on a command line.
///
/// | text | source |
/// |---|---|
/// | `tai`, `system` | CLOCK_TAI ([`SystemClock`]) |
/// | `realtime` | CLOCK_REALTIME |
/// | `monotonic_raw` | CLOCK_MONOTONIC_RAW |
/// | `phc:/dev/ptp0` | a PHC device ([`crate::phc::PhcClock`]) |
/// | `iface:eth0` | the PHC of an interface (ETHTOOL_GET_TS_INFO) |
/// | `sim[:k=v,...]` | simulated PHC ([`crate::sim::SimConfig::parse`]) |
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
    Sim(crate::sim::SimConfig),
    /// Two-way exchange with the responder at this address.
    Sink(std::net::SocketAddr),
}

impl FromStr for SourceSpec {
    type Err = ClockError;
    fn from_str(s: &str) -> Result<Self, ClockError> {
        let bad = |reason: &str| ClockError::BadSpec {
            spec: s.to_string(),
            reason: reason.to_string(),
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
            ("sim", a) => crate::sim::SimConfig::parse(a.unwrap_or(""))
                .map(SourceSpec::Sim)
                .map_err(|e| bad(&e)),
            ("sink", Some(a)) => a
                .parse()
                .map(SourceSpec::Sink)
                .map_err(|_| bad("expected sink:IP:PORT")),
            _ => Err(bad(
                "expected tai|realtime|monotonic_raw|phc:DEV|iface:NAME|sim[:k=v,..]|sink:IP:PORT",
            )),
        }
    }
}

/// Options common to every source when opening a [`SourceSpec`].
#[derive(Debug, Clone, Default)]
pub struct SourceOptions {
    /// Test-only clock error (realtime/TAI sources and the exchange).
    pub injection: Option<ErrorInjection>,
    /// Readings per sample (0 = default: [`DEFAULT_READS`], or the
    /// exchange's burst size).
    pub reads: usize,
    /// For `sink:`: use this interface's NIC hardware stamps.
    pub hw_iface: Option<String>,
}

impl SourceSpec {
    /// Open the source.
    pub fn open(&self, opts: &SourceOptions) -> Result<Box<dyn ReferenceClock>, ClockError> {
        let reads = if opts.reads == 0 {
            DEFAULT_READS
        } else {
            opts.reads
        };
        Ok(match self {
            SourceSpec::System(id) => Box::new(
                SystemClock::new(*id)
                    .with_injection(opts.injection)
                    .with_reads(reads),
            ),
            SourceSpec::Phc(path) => Box::new(crate::phc::PhcClock::open(path)?.with_reads(reads)),
            SourceSpec::Iface(name) => {
                Box::new(crate::phc::PhcClock::for_interface(name)?.with_reads(reads))
            }
            SourceSpec::Sim(cfg) => Box::new(crate::sim::SimPhc::new(cfg.clone())),
            SourceSpec::Sink(addr) => {
                let mut cfg = crate::exchange::ExchangeConfig {
                    injection: opts.injection,
                    hw_iface: opts.hw_iface.clone(),
                    ..Default::default()
                };
                if opts.reads != 0 {
                    cfg.burst = opts.reads;
                }
                Box::new(crate::exchange::ExchangeClient::connect(*addr, cfg)?)
            }
        })
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn injected_realtime_stamps_map_back_to_the_true_monotonic_instant() {
        let map = RealtimeMonoTracker::new().unwrap();
        let inj = ErrorInjection {
            offset_ns: 3_000_000,
            drift_ppm: 50.0,
            start_mono_ns: 1_000_000_000,
        };
        for mono in [1_000_000_000u64, 5_000_000_000, 3_600_000_000_000] {
            // The stamp a host with this error would read at `mono`.
            let rt = mono.wrapping_add(map.offset_ns() as u64);
            let rt_inj = inject(Some(&inj), rt, mono);
            let back = map.to_mono_injected(rt_inj, Some(&inj));
            // A one-step inversion is off by drift * offset = 150 ns here.
            assert!((back as i64 - mono as i64).abs() <= 1, "{mono}: got {back}");
        }
    }

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
        assert!("bogus".parse::<SourceSpec>().is_err());
    }

    #[test]
    fn injection_offsets_and_drifts() {
        let inj = ErrorInjection {
            offset_ns: 3_000_000,
            drift_ppm: 50.0,
            start_mono_ns: 1_000_000_000,
        };
        assert_eq!(inj.error_ns(1_000_000_000), 3_000_000);
        assert_eq!(inj.error_ns(3_000_000_000), 3_100_000);
        assert_eq!(inj.apply(10, 1_000_000_000), 3_000_010);
    }

    #[test]
    fn system_source_with_injection_shows_the_error() {
        let inj = ErrorInjection::starting_now(3_000_000, 0.0).unwrap();
        let mut plain = SystemClock::new(ClockId::Tai);
        let mut bad = SystemClock::new(ClockId::Tai).with_injection(Some(inj));
        let a = plain.sample().unwrap();
        let b = bad.sample().unwrap();
        let diff = b.ref_minus_mono_ns() - a.ref_minus_mono_ns() - 3_000_000;
        assert!(diff.abs() < 100_000, "{diff}");
        // Monotonic is never shifted.
        let mut mono = SystemClock::new(ClockId::Monotonic).with_injection(Some(inj));
        let m = mono.sample().unwrap();
        assert!(m.ref_minus_mono_ns().abs() <= m.delay_ns as i64);
    }

    #[test]
    fn realtime_to_mono_round_trips() {
        let map = RealtimeToMono::measure(None, 5).unwrap();
        let rt = now_ns(ClockId::Realtime).unwrap();
        let mono = now_ns(ClockId::Monotonic).unwrap();
        let err = map.to_mono(rt) as i64 - mono as i64;
        assert!(err.abs() < 1_000_000, "{err}");
    }
}
