//! The source interface alone: [`Clock`] reads a clock, [`ReferenceClock`]
//! gives [`OffsetSample`]s of a reference against CLOCK_MONOTONIC (what the
//! global clock is built on). Every source implements these in its own file.

use crate::error::ClockError;
use crate::source::exchange::stats::SharedExchangeStats;
use crate::worker::StopFlag;

/// Default number of bracketed readings per sample; phc2sys `-N` default 5.
pub const DEFAULT_READS: usize = 5;

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
    /// see `servo/pi.rs`). phc2sys uses the hardware gains for every clock
    /// it reads directly, so only noisy network sources say false.
    fn hardware_stamped(&self) -> bool {
        true
    }
    /// Wait `dt_ns` before the next sample, or until `stop` is set. Real
    /// sources sleep (one wakeup, cut short by a stop); the simulated PHC
    /// advances its simulated time instead, so simulations run instantly.
    fn wait_ns(&mut self, dt_ns: u64, stop: &StopFlag) {
        stop.wait(std::time::Duration::from_nanos(dt_ns));
    }
    /// Ground truth `ref - mono` at `mono_ns`, when known (simulation only).
    fn truth_ref_ns(&self, _mono_ns: u64) -> Option<u64> {
        None
    }
    /// For a source whose answers come over the network (the exchange):
    /// its counters of answers refused and unmatched, readable from
    /// another thread while the source runs in the discipline's.
    fn exchange_stats(&self) -> Option<SharedExchangeStats> {
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
    fn wait_ns(&mut self, dt_ns: u64, stop: &StopFlag) {
        (**self).wait_ns(dt_ns, stop)
    }
    fn truth_ref_ns(&self, mono_ns: u64) -> Option<u64> {
        (**self).truth_ref_ns(mono_ns)
    }
    fn exchange_stats(&self) -> Option<SharedExchangeStats> {
        (**self).exchange_stats()
    }
}
