//! How far a clock's frequency may be adjusted: the servo's default clamp.
//!
//! phc2sys creates its servo with the limit of the clock it disciplines:
//! `clockadj_max_freq` for a system clock, the PHC's `max_adj`
//! (PTP_CLOCK_GETCAPS) for a PHC, capped by linuxptp's `max_frequency`
//! (see [`ServoConfig::max_freq_ppb`]). nettrace adjusts no clock: its
//! global clock carries the reference's time on top of CLOCK_MONOTONIC, so
//! the limit comes from the clock it is disciplined to ([`FrequencyLimit`],
//! implemented by every source and by [`SourceSpec`], which is what the
//! binaries hold before they open a source).
//!
//! [`ServoConfig::max_freq_ppb`]: crate::servo::algorithm::ServoConfig::max_freq_ppb

use std::os::fd::AsRawFd;
use std::path::Path;

use crate::error::ClockError;
use crate::servo::algorithm::FALLBACK_MAX_FREQ_PPB;
use crate::source::exchange::client::ExchangeClient;
use crate::source::phc::{phc_device_of, PhcClock};
use crate::source::sim::SimPhc;
use crate::source::spec::SourceSpec;
use crate::source::system::SystemClock;
use crate::source::traits::Clock;

/// A clock's own frequency adjustment limit.
pub trait FrequencyLimit {
    /// The largest frequency correction this clock accepts, ppb.
    fn max_freq_ppb(&self) -> Result<f64, ClockError>;
}

/// The limit the simulated PHC reports as its `max_adj`, ppb: 500 ppm, the
/// kernel's limit of `adjtimex`'s frequency field, five times the
/// simulation's default frequency error.
pub const SIM_MAX_ADJ_PPB: f64 = 500_000.0;

/// linuxptp's `clockadj_max_freq` for a system clock, from the kernel's
/// `timex.tolerance` (ppm << 16) and USER_HZ (`sysconf(_SC_CLK_TCK)`),
/// in its integer arithmetic:
///
/// * `f = tolerance / 65.536` ppb (truncated), 500 000 when that is 0;
/// * if `2·f ≥ 1000·hz` (the frequency field alone can bridge one tick
///   step, i.e. hz ≤ 1000), the tick length's ±10 % range counts too:
///   `f = (nominal_tick / 10) · 1000 · hz`, `nominal_tick = (10⁶ + hz/2) / hz` µs.
///
/// Linux (tolerance 500 ppm) at USER_HZ 100: 100 000 000 ppb (10 %).
pub fn system_max_freq_rule(tolerance: i64, user_hz: i64) -> i64 {
    let mut f = (tolerance as f64 / 65.536) as i64;
    if f == 0 {
        f = FALLBACK_MAX_FREQ_PPB as i64;
    }
    if user_hz > 0 {
        let nominal_tick = (1_000_000 + user_hz / 2) / user_hz;
        if nominal_tick != 0 && 2 * f >= 1000 * user_hz {
            f = nominal_tick / 10 * 1000 * user_hz;
        }
    }
    f
}

/// The system clock's limit on this host: [`system_max_freq_rule`] with the
/// kernel's answer to a read-only `adjtimex` (no privileges needed).
pub fn system_max_freq_ppb() -> Result<f64, ClockError> {
    // SAFETY: timex is plain old data; all-zero (modes 0) is a read-only query.
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    // SAFETY: tx is a valid, writable timex for the duration of the call.
    if unsafe { libc::adjtimex(&mut tx) } < 0 {
        return Err(ClockError::last_os("adjtimex (reading the tolerance)"));
    }
    // SAFETY: sysconf has no memory arguments.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Ok(system_max_freq_rule(tx.tolerance, hz) as f64)
}

/// A PHC's `max_adj` (PTP_CLOCK_GETCAPS), ppb, as linuxptp's `phc_max_adj`;
/// 0 (a PHC that cannot be adjusted) is an error, as in phc2sys.
pub fn phc_max_adj_ppb(device: &Path) -> Result<f64, ClockError> {
    let file = std::fs::File::open(device)
        .map_err(|e| ClockError::io(format!("open {}", device.display()), e))?;
    // SAFETY: ptp_clock_caps is plain old data; all-zero is valid.
    let mut caps: libc::ptp_clock_caps = unsafe { std::mem::zeroed() };
    // SAFETY: caps is a valid, writable ptp_clock_caps, whose size the
    // request encodes; the fd is open for the duration of the call.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::PTP_CLOCK_GETCAPS, &mut caps) };
    if rc < 0 {
        return Err(ClockError::last_os(format!(
            "PTP_CLOCK_GETCAPS on {} (not a PHC?)",
            device.display()
        )));
    }
    if caps.max_adj <= 0 {
        return Err(ClockError::NotAdjustable(device.display().to_string()));
    }
    Ok(caps.max_adj as f64)
}

impl FrequencyLimit for SystemClock {
    /// Every system clock shares the kernel's timekeeper and its limit.
    fn max_freq_ppb(&self) -> Result<f64, ClockError> {
        system_max_freq_ppb()
    }
}

impl FrequencyLimit for PhcClock {
    fn max_freq_ppb(&self) -> Result<f64, ClockError> {
        // The name is the device path the clock was opened with.
        phc_max_adj_ppb(Path::new(&self.name()))
    }
}

impl FrequencyLimit for SimPhc {
    fn max_freq_ppb(&self) -> Result<f64, ClockError> {
        Ok(SIM_MAX_ADJ_PPB)
    }
}

impl FrequencyLimit for ExchangeClient {
    /// The exchange follows the sink with this host's system clock as the
    /// local side: the system clock's limit, as ptp4l takes for a software
    /// timestamping slave.
    fn max_freq_ppb(&self) -> Result<f64, ClockError> {
        system_max_freq_ppb()
    }
}

impl FrequencyLimit for SourceSpec {
    /// The limit of the clock this names, without opening it as a source.
    fn max_freq_ppb(&self) -> Result<f64, ClockError> {
        match self {
            SourceSpec::System(_) | SourceSpec::Sink(_) => system_max_freq_ppb(),
            SourceSpec::Phc(path) => phc_max_adj_ppb(path),
            SourceSpec::Iface(name) => phc_max_adj_ppb(&phc_device_of(name)?),
            SourceSpec::Sim(_) => Ok(SIM_MAX_ADJ_PPB),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bracket::ClockId;
    use crate::source::sim::SimConfig;

    #[test]
    fn system_rule_follows_clockadj_max_freq() {
        // Linux: tolerance = 500 ppm << 16.
        let tol = 500 << 16;
        // USER_HZ 100 (x86, arm64): tick 10000 µs ±10 % → 10 %.
        assert_eq!(system_max_freq_rule(tol, 100), 100_000_000);
        // USER_HZ 1000: 2·500000 ≥ 1000·1000 still holds; tick 1000 µs.
        assert_eq!(system_max_freq_rule(tol, 1000), 100_000_000);
        // USER_HZ 1024: 2·500000 < 1024000, the tick is not used.
        assert_eq!(system_max_freq_rule(tol, 1024), 500_000);
        // USER_HZ 250: tick (10⁶ + 125) / 250 = 4000 µs → 400 · 1000 · 250.
        assert_eq!(system_max_freq_rule(tol, 250), 100_000_000);
        // USER_HZ 300: tick 3333 µs → 333 · 1000 · 300 (integer division).
        assert_eq!(system_max_freq_rule(tol, 300), 99_900_000);
        // No tolerance reported: 500 ppm; unknown hz: no tick range.
        assert_eq!(system_max_freq_rule(0, 0), 500_000);
        assert_eq!(system_max_freq_rule(tol, -1), 500_000);
        // A tolerance that does not divide evenly truncates, as C's int does.
        assert_eq!(system_max_freq_rule(100, 0), 1);
    }

    #[test]
    fn system_clock_reports_the_kernel_limit() {
        // This kernel: tolerance 500 ppm, USER_HZ 100 (the x86-64 ABI).
        let lim = SystemClock::new(ClockId::Tai).max_freq_ppb().unwrap();
        assert_eq!(lim, 100_000_000.0);
        let spec: SourceSpec = "realtime".parse().unwrap();
        assert_eq!(spec.max_freq_ppb().unwrap(), lim);
        let sink: SourceSpec = "sink:127.0.0.1:9".parse().unwrap();
        assert_eq!(sink.max_freq_ppb().unwrap(), lim);
    }

    #[test]
    fn simulated_phc_reports_its_limit() {
        let sim = SimPhc::new(SimConfig::default());
        assert_eq!(sim.max_freq_ppb().unwrap(), SIM_MAX_ADJ_PPB);
        let spec: SourceSpec = "sim:freq_ppm=5".parse().unwrap();
        assert_eq!(spec.max_freq_ppb().unwrap(), SIM_MAX_ADJ_PPB);
    }

    #[test]
    fn missing_phc_is_an_error_not_a_limit() {
        let spec: SourceSpec = "phc:/dev/ptp-does-not-exist".parse().unwrap();
        assert!(matches!(spec.max_freq_ppb(), Err(ClockError::Io { .. })));
        // Not a PHC: the ioctl fails cleanly.
        assert!(phc_max_adj_ppb(Path::new("/dev/null")).is_err());
        let lo: SourceSpec = "iface:lo".parse().unwrap();
        assert!(lo.max_freq_ppb().is_err());
    }
}
