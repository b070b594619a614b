//! A simulated PHC with a simulated CLOCK_MONOTONIC time base: initial
//! offset, frequency error, random-walk frequency wander, read delay and
//! jitter, optional asymmetry. Seeded and deterministic; it exposes its
//! ground truth, and [`ReferenceClock::wait_ns`] advances simulated time
//! instantly, so servo behaviour tests and benchmarks take milliseconds.
//!
//! Read model (one of `reads` bracketed readings, the narrowest wins, as
//! with a real PHC): the read takes `pre` ns to reach the PHC and `post` ns
//! to come back, `pre = delay/2 + asymmetry/2 + Exp(jitter)`,
//! `post = delay/2 - asymmetry/2 + Exp(jitter)` (exponential extra latency
//! with mean `read_jitter_ns`). The sample pairs the bracket midpoint with
//! the PHC time at `start + pre`, so its error is `(pre - post)/2`.

use crate::error::ClockError;
use crate::source::traits::{Clock, OffsetSample, ReferenceClock, DEFAULT_READS};
use crate::worker::StopFlag;

/// Parameters of the simulated PHC.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Extra PHC offset at the start, on top of `ref_epoch_ns`, ns.
    pub initial_offset_ns: i64,
    /// Initial frequency error of the PHC against CLOCK_MONOTONIC, ppm.
    pub freq_error_ppm: f64,
    /// Random-walk wander: std dev of the frequency change over 1 s, ppb
    /// (scales with √t).
    pub wander_ppb: f64,
    /// Fixed read latency (round trip), ns.
    pub read_delay_ns: u64,
    /// Mean exponential extra latency of each read direction, ns.
    pub read_jitter_ns: u64,
    /// Outbound minus return latency, ns (a bias no bracket can see).
    pub asymmetry_ns: i64,
    /// Readings per sample; the narrowest bracket wins (phc2sys -N, 5).
    pub reads: usize,
    /// PRNG seed.
    pub seed: u64,
    /// Simulated CLOCK_MONOTONIC at the start, ns.
    pub start_mono_ns: u64,
    /// `ref - mono` at the start, before `initial_offset_ns`, ns (a TAI-like epoch).
    pub ref_epoch_ns: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            initial_offset_ns: 0,
            freq_error_ppm: 100.0,
            wander_ppb: 1.0,
            read_delay_ns: 300,
            read_jitter_ns: 50,
            asymmetry_ns: 0,
            reads: DEFAULT_READS,
            seed: 1,
            start_mono_ns: 100_000_000_000,
            ref_epoch_ns: 1_700_000_000_000_000_000,
        }
    }
}

impl SimConfig {
    /// Parse `k=v,k=v` (keys: offset_ns, freq_ppm, wander_ppb, delay_ns,
    /// jitter_ns, asym_ns, reads, seed); missing keys keep their defaults.
    /// Each value has a range, which the error names when a value is
    /// outside it: NaN, infinities and values that would overflow the model
    /// are refused, never clamped.
    pub fn parse(s: &str) -> Result<Self, String> {
        /// One second, the bound of every simulated latency, ns.
        const SEC_NS: i64 = 1_000_000_000;
        fn whole<T: std::str::FromStr + Into<i128> + Copy>(
            k: &str,
            v: &str,
            lo: i128,
            hi: i128,
        ) -> Result<T, String> {
            v.parse::<T>()
                .ok()
                .filter(|n| (lo..=hi).contains(&(*n).into()))
                .ok_or_else(|| format!("{k}={v:?} is not a whole number in {lo}..={hi}"))
        }
        fn real(k: &str, v: &str, lo: f64, hi: f64) -> Result<f64, String> {
            v.parse::<f64>()
                .ok()
                .filter(|x| (lo..=hi).contains(x))
                .ok_or_else(|| format!("{k}={v:?} is not a number in {lo}..={hi}"))
        }
        let day = i128::from(crate::source::inject::MAX_INJECTED_OFFSET_NS);
        let sec = i128::from(SEC_NS);
        let mut c = SimConfig::default();
        for kv in s.split(',').filter(|x| !x.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("expected key=value, got {kv:?}"))?;
            match k {
                "offset_ns" => c.initial_offset_ns = whole::<i64>(k, v, -day, day)?,
                "freq_ppm" => c.freq_error_ppm = real(k, v, -1000.0, 1000.0)?,
                "wander_ppb" => c.wander_ppb = real(k, v, 0.0, 1_000_000.0)?,
                "delay_ns" => c.read_delay_ns = whole::<u64>(k, v, 0, sec)?,
                "jitter_ns" => c.read_jitter_ns = whole::<u64>(k, v, 0, sec)?,
                "asym_ns" => c.asymmetry_ns = whole::<i64>(k, v, -sec, sec)?,
                "reads" => c.reads = whole::<u16>(k, v, 1, 1000)?.into(),
                "seed" => c.seed = whole::<u64>(k, v, 0, u64::MAX.into())?,
                _ => return Err(format!("unknown sim parameter {k:?}")),
            }
        }
        Ok(c)
    }
}

/// SplitMix64: tiny, seedable, and stable across dependency versions, so a
/// seed always gives the same run.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in (0, 1].
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let (u1, u2) = (self.uniform(), self.uniform());
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
    /// Exponential with the given mean.
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * self.uniform().ln()
    }
}

/// The simulated PHC.
#[derive(Debug, Clone)]
pub struct SimPhc {
    cfg: SimConfig,
    rng: SplitMix64,
    mono_ns: u64,
    /// `ref - mono - ref_epoch` at `mono_ns`, ns.
    phase_ns: f64,
    /// Current PHC frequency error against monotonic, ppb.
    freq_ppb: f64,
}

/// Wander is integrated in steps of at most this long, ns.
const WANDER_STEP_NS: u64 = 1_000_000_000;

impl SimPhc {
    /// A simulated PHC at `cfg.start_mono_ns`.
    pub fn new(cfg: SimConfig) -> Self {
        SimPhc {
            rng: SplitMix64::new(cfg.seed),
            mono_ns: cfg.start_mono_ns,
            phase_ns: cfg.initial_offset_ns as f64,
            freq_ppb: cfg.freq_error_ppm * 1e3,
            cfg,
        }
    }

    /// Simulated CLOCK_MONOTONIC now, ns.
    pub fn mono_ns(&self) -> u64 {
        self.mono_ns
    }

    /// The PHC's current frequency error, ppb (ground truth).
    pub fn freq_ppb(&self) -> f64 {
        self.freq_ppb
    }

    /// Advance simulated time by `dt_ns` (with frequency wander).
    pub fn advance_ns(&mut self, mut dt_ns: u64) {
        while dt_ns > 0 {
            let step = dt_ns.min(WANDER_STEP_NS);
            let step_s = step as f64 / 1e9;
            self.phase_ns += self.freq_ppb * step_s;
            self.mono_ns += step;
            if self.cfg.wander_ppb > 0.0 {
                self.freq_ppb += self.rng.normal() * self.cfg.wander_ppb * step_s.sqrt();
            }
            dt_ns -= step;
        }
    }

    /// Step the PHC's phase by `delta_ns` (someone set the PHC).
    pub fn step_phase_ns(&mut self, delta_ns: i64) {
        self.phase_ns += delta_ns as f64;
    }

    /// Ground truth: PHC time at simulated monotonic `mono_ns` (near now).
    pub fn true_ref_ns(&self, mono_ns: u64) -> u64 {
        let dt_ns = mono_ns as f64 - self.mono_ns as f64;
        let phase = self.phase_ns + self.freq_ppb * dt_ns * 1e-9;
        (mono_ns as i128 + self.cfg.ref_epoch_ns as i128 + phase.round() as i128) as u64
    }
}

impl Clock for SimPhc {
    fn now_ns(&mut self) -> Result<u64, ClockError> {
        Ok(self.true_ref_ns(self.mono_ns))
    }
    fn name(&self) -> String {
        "sim".into()
    }
}

impl ReferenceClock for SimPhc {
    fn sample(&mut self) -> Result<OffsetSample, ClockError> {
        let half = self.cfg.read_delay_ns as f64 / 2.0;
        let asym = self.cfg.asymmetry_ns as f64 / 2.0;
        let jitter = self.cfg.read_jitter_ns as f64;
        let mut t = self.mono_ns as f64;
        let mut best: Option<OffsetSample> = None;
        for _ in 0..self.cfg.reads.max(1) {
            let pre = (half + asym + self.rng.exponential(jitter)).max(0.0);
            let post = (half - asym + self.rng.exponential(jitter)).max(0.0);
            let width = pre + post;
            let s = OffsetSample {
                mono_ns: (t + width / 2.0).round() as u64,
                ref_ns: self.true_ref_ns((t + pre).round() as u64),
                uncertainty_ns: (width / 2.0).round() as u64,
                delay_ns: width.round() as u64,
            };
            if best.is_none_or(|b| s.delay_ns < b.delay_ns) {
                best = Some(s);
            }
            t += width;
        }
        best.ok_or_else(|| ClockError::NoReading(self.name()))
    }
    fn wait_ns(&mut self, dt_ns: u64, _stop: &StopFlag) {
        self.advance_ns(dt_ns);
    }
    fn truth_ref_ns(&self, mono_ns: u64) -> Option<u64> {
        Some(self.true_ref_ns(mono_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_for_a_seed() {
        let run = |seed| {
            let mut s = SimPhc::new(SimConfig {
                seed,
                ..Default::default()
            });
            (0..10)
                .map(|_| {
                    s.advance_ns(1_000_000_000);
                    s.sample().unwrap()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }

    #[test]
    fn frequency_error_accumulates() {
        let mut s = SimPhc::new(SimConfig {
            wander_ppb: 0.0,
            ..Default::default()
        });
        let m0 = s.mono_ns();
        let r0 = s.true_ref_ns(m0);
        s.advance_ns(10_000_000_000);
        let r1 = s.true_ref_ns(s.mono_ns());
        // 10 s at +100 ppm: 1 ms extra.
        assert_eq!(r1 - r0, 10_000_000_000 + 1_000_000);
    }

    #[test]
    fn sample_error_is_bounded_by_its_bracket_without_asymmetry() {
        let mut s = SimPhc::new(SimConfig::default());
        for _ in 0..100 {
            let x = s.sample().unwrap();
            let truth = s.true_ref_ns(x.mono_ns) as i64;
            assert!((x.ref_ns as i64 - truth).abs() <= x.uncertainty_ns as i64 + 1);
            s.advance_ns(1_000_000);
        }
    }

    #[test]
    fn parse_params() {
        let c = SimConfig::parse("freq_ppm=-20,jitter_ns=5,seed=9").unwrap();
        assert_eq!(c.freq_error_ppm, -20.0);
        assert_eq!(c.read_jitter_ns, 5);
        assert_eq!(c.seed, 9);
        assert!(SimConfig::parse("nope=1").is_err());
        assert!(SimConfig::parse("seed=x").is_err());
        for bad in [
            "freq_ppm=nan",
            "freq_ppm=inf",
            "freq_ppm=1000.5",
            "wander_ppb=-1",
            "offset_ns=1e30",
            "offset_ns=86400000000001",
            "delay_ns=-1",
            "jitter_ns=1000000001",
            "asym_ns=18446744073709551615",
            "reads=0",
            "reads=1001",
        ] {
            let e = SimConfig::parse(bad).unwrap_err();
            assert!(e.contains(".."), "{bad}: {e}");
        }
        assert_eq!(SimConfig::parse("reads=1000").unwrap().reads, 1000);
    }
}
