//! Hardware exchange stamps are in the NIC's PHC time: [`PhcMap`] maps
//! them to CLOCK_MONOTONIC through that PHC, refreshed before each exchange.

use crate::error::ClockError;
use crate::source::phc::PhcClock;
use crate::source::traits::ReferenceClock;

/// The PHC whose time a NIC's hardware stamps are in, and the mapping of
/// that time to CLOCK_MONOTONIC, refreshed before each exchange.
pub struct PhcMap {
    phc: Box<dyn ReferenceClock>,
    /// `phc - monotonic`, ns, from the last refresh.
    offset_ns: i64,
}

impl std::fmt::Debug for PhcMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PhcMap")
            .field("phc", &self.phc.name())
            .field("offset_ns", &self.offset_ns)
            .finish()
    }
}

impl PhcMap {
    /// Map stamps of `phc` (the NIC's clock, e.g. `PhcClock::for_interface`).
    pub fn new(phc: Box<dyn ReferenceClock>) -> Result<Self, ClockError> {
        let mut m = PhcMap { phc, offset_ns: 0 };
        m.refresh()?;
        Ok(m)
    }

    /// The PHC of a network interface.
    pub fn for_interface(iface: &str) -> Result<Self, ClockError> {
        Self::new(Box::new(PhcClock::for_interface(iface)?))
    }

    /// Re-measure `phc - monotonic` (one cross-timestamp sample).
    pub fn refresh(&mut self) -> Result<(), ClockError> {
        let s = self.phc.sample()?;
        self.offset_ns = s.ref_minus_mono_ns();
        Ok(())
    }

    /// A hardware stamp (PHC ns) on the monotonic axis.
    pub fn to_mono(&self, phc_ns: u64) -> u64 {
        phc_ns.wrapping_sub(self.offset_ns as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::sim::{SimConfig, SimPhc};

    #[test]
    fn phc_stamps_map_to_the_monotonic_instant() {
        // A PHC 37 s ahead (TAI vs UTC-ish), read without noise.
        let cfg = SimConfig {
            initial_offset_ns: 37_000_000_000,
            freq_error_ppm: 0.0,
            wander_ppb: 0.0,
            read_jitter_ns: 0,
            asymmetry_ns: 0,
            ..SimConfig::parse("").unwrap()
        };
        let sim = SimPhc::new(cfg.clone());
        let truth = |m: u64| sim.true_ref_ns(m);
        let probe = SimPhc::new(cfg);
        let mut map = PhcMap::new(Box::new(probe)).unwrap();
        map.refresh().unwrap();
        // A NIC stamp taken at monotonic instant m is the PHC's time then.
        for m in [1_000_000_000u64, 1_000_500_000] {
            let back = map.to_mono(truth(m));
            let err = back as i64 - m as i64;
            assert!(
                err.abs() < 5_000,
                "PHC stamp of {m} maps to {back} ({err} ns off)"
            );
        }
    }
}
