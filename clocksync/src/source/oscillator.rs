//! A simulated independent oscillator, for tests and demonstrations: what
//! the clock of a separate machine would read at each instant of this
//! kernel's CLOCK_MONOTONIC. Namespaces of one kernel share one clock, so
//! without it a clock sync test never sees two clocks that really differ.
//!
//! # Model
//! With `t` the true CLOCK_MONOTONIC and `t0` the instant the oscillator
//! starts, the local clock reads
//!
//! `local(t) = t + offset + drift·(t − t0) + ∫ w(s) ds (t0..t) + noise(t)`
//!
//! * `w`, the frequency wander, is a seeded random walk: once per second of
//!   true time it takes a Gaussian step of standard deviation
//!   `wander_ppb_per_s` ppb, and it is linear in between (so the phase is
//!   smooth). It is reflected at ±60·`wander_ppb_per_s` (the typical
//!   excursion of an unbounded walk after an hour), as a real oscillator's
//!   frequency stays within a band set by its temperature range. The same
//!   seed gives the same walk on every run.
//! * `noise` is white: each reading gets its own Gaussian sample of standard
//!   deviation `noise_ns`, drawn from a hash of the seed and the reading's
//!   true instant (readings of the same nanosecond share it). It models
//!   timestamping jitter: nothing downstream can remove it.
//!
//! Without noise the map is monotonic (non-decreasing): its rate `1 + drift
//! + w` never drops below `1 − 0.0011` (drift is limited to ±1000 ppm and
//! the wander to 60 ppm). [`Oscillator::true_ns`] inverts it.
//!
//! A host's realtime clock runs on the same oscillator: a CLOCK_REALTIME
//! stamp is shifted by the error at its monotonic instant
//! ([`Oscillator::local_realtime_ns`]), so `realtime − monotonic` stays what
//! the kernel says, as it does on a real machine.

use std::str::FromStr;
use std::sync::{Arc, Mutex};

use crate::bracket::{now_ns, ClockId};
use crate::error::ClockError;
use crate::source::sim::SplitMix64;
use crate::source::traits::{Clock, OffsetSample, ReferenceClock};
use crate::worker::StopFlag;

/// Walk knots are this far apart in true time, ns (one second).
const KNOT_NS: i64 = 1_000_000_000;
/// The wander is reflected at this many `wander_ppb_per_s` (√3600 s).
pub const WANDER_BOUND_STEPS: f64 = 60.0;
/// Largest offset accepted either way, ns (one day, as an injected one).
pub const MAX_OFFSET_NS: i64 = crate::source::inject::MAX_INJECTED_OFFSET_NS;
/// Largest drift accepted, ppm (as an injected one).
pub const MAX_DRIFT_PPM: f64 = crate::source::inject::MAX_INJECTED_DRIFT_PPM;
/// Largest wander accepted, ppb per second.
pub const MAX_WANDER_PPB_PER_S: f64 = 1000.0;
/// Largest noise accepted, ns.
pub const MAX_NOISE_NS: f64 = 1_000_000.0;
/// Seed when none is given.
pub const DEFAULT_SEED: u64 = 1;
/// Salt that keeps the noise hash apart from the walk's generator.
const NOISE_SALT: u64 = 0x6e6f_6973_655f_6e73;

/// Parameters of a simulated oscillator, as `--simulate-oscillator` takes
/// them: `offset_ns,drift_ppm[,wander_ppb_per_s[,noise_ns[,seed]]]`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct OscillatorSpec {
    /// Error at the start, ns (local minus true).
    pub offset_ns: i64,
    /// Constant frequency error, ppm (positive: the local clock runs fast).
    pub drift_ppm: f64,
    /// Random-walk frequency wander: standard deviation of the frequency
    /// step each second, ppb.
    pub wander_ppb_per_s: f64,
    /// White noise on every reading: standard deviation, ns.
    pub noise_ns: f64,
    /// Seed of the walk and of the noise.
    pub seed: u64,
}

impl OscillatorSpec {
    /// An oscillator with offset and drift only.
    pub fn new(offset_ns: i64, drift_ppm: f64) -> Self {
        OscillatorSpec {
            offset_ns,
            drift_ppm,
            wander_ppb_per_s: 0.0,
            noise_ns: 0.0,
            seed: DEFAULT_SEED,
        }
    }

    /// Check the ranges the model's promises rely on (monotonic map).
    pub fn validate(&self) -> Result<(), String> {
        let in_range = |v: f64, lo: f64, hi: f64| v.is_finite() && (lo..=hi).contains(&v);
        if self.offset_ns.unsigned_abs() > MAX_OFFSET_NS.unsigned_abs() {
            return Err(format!(
                "offset_ns {} is outside ±{MAX_OFFSET_NS}",
                self.offset_ns
            ));
        }
        if !in_range(self.drift_ppm, -MAX_DRIFT_PPM, MAX_DRIFT_PPM) {
            return Err(format!(
                "drift_ppm {} is outside ±{MAX_DRIFT_PPM}",
                self.drift_ppm
            ));
        }
        if !in_range(self.wander_ppb_per_s, 0.0, MAX_WANDER_PPB_PER_S) {
            return Err(format!(
                "wander_ppb_per_s {} is outside 0..={MAX_WANDER_PPB_PER_S}",
                self.wander_ppb_per_s
            ));
        }
        if !in_range(self.noise_ns, 0.0, MAX_NOISE_NS) {
            return Err(format!(
                "noise_ns {} is outside 0..={MAX_NOISE_NS}",
                self.noise_ns
            ));
        }
        Ok(())
    }

    /// Start the oscillator at monotonic instant `start_mono_ns`.
    pub fn start_at(self, start_mono_ns: u64) -> Oscillator {
        Oscillator::new(self, start_mono_ns)
    }

    /// Start the oscillator now.
    pub fn start_now(self) -> Result<Oscillator, ClockError> {
        Ok(self.start_at(now_ns(ClockId::Monotonic)?))
    }
}

impl FromStr for OscillatorSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        if !(2..=5).contains(&parts.len()) {
            return Err(format!(
                "{s:?}: expected offset_ns,drift_ppm[,wander_ppb_per_s[,noise_ns[,seed]]]"
            ));
        }
        fn num<T: FromStr>(name: &str, v: &str) -> Result<T, String> {
            v.parse()
                .map_err(|_| format!("{name}: {v:?} is not a number"))
        }
        let mut spec =
            OscillatorSpec::new(num("offset_ns", parts[0])?, num("drift_ppm", parts[1])?);
        if let Some(v) = parts.get(2) {
            spec.wander_ppb_per_s = num("wander_ppb_per_s", v)?;
        }
        if let Some(v) = parts.get(3) {
            spec.noise_ns = num("noise_ns", v)?;
        }
        if let Some(v) = parts.get(4) {
            spec.seed = num("seed", v)?;
        }
        spec.validate()?;
        Ok(spec)
    }
}

impl std::fmt::Display for OscillatorSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{},{},{},{},{}",
            self.offset_ns, self.drift_ppm, self.wander_ppb_per_s, self.noise_ns, self.seed
        )
    }
}

/// One knot of the walk, at a whole second after the start.
#[derive(Debug, Clone, Copy)]
struct Knot {
    /// Wander at the knot, ppb.
    w_ppb: f64,
    /// Integral of the wander from the start to the knot, ns (ppb·s = ns).
    phase_ns: f64,
}

/// The walk's knots so far, extended on demand.
#[derive(Debug)]
struct Walk {
    rng: SplitMix64,
    knots: Vec<Knot>,
}

impl Walk {
    fn new(seed: u64) -> Self {
        Walk {
            rng: SplitMix64::new(seed),
            knots: vec![Knot {
                w_ppb: 0.0,
                phase_ns: 0.0,
            }],
        }
    }

    /// Knots `k` and `k + 1`, generating any missing ones.
    fn pair(&mut self, k: usize, step_ppb: f64) -> (Knot, Knot) {
        let bound = WANDER_BOUND_STEPS * step_ppb;
        while self.knots.len() < k + 2 {
            let last = self.knots[self.knots.len() - 1];
            let mut w = last.w_ppb + step_ppb * self.rng.normal();
            // Reflect at the band's edges (one reflection suffices unless
            // a step exceeds the band, which the clamp covers).
            if w > bound {
                w = 2.0 * bound - w;
            } else if w < -bound {
                w = -2.0 * bound - w;
            }
            let w = w.clamp(-bound, bound);
            self.knots.push(Knot {
                w_ppb: w,
                phase_ns: last.phase_ns + (last.w_ppb + w) / 2.0,
            });
        }
        (self.knots[k], self.knots[k + 1])
    }
}

/// A running simulated oscillator. Clones share the same walk: one
/// oscillator seen by every part of an agent.
#[derive(Debug, Clone)]
pub struct Oscillator {
    spec: OscillatorSpec,
    start_mono_ns: u64,
    walk: Arc<Mutex<Walk>>,
}

impl Oscillator {
    /// An oscillator started at true monotonic instant `start_mono_ns`.
    pub fn new(spec: OscillatorSpec, start_mono_ns: u64) -> Self {
        Oscillator {
            spec,
            start_mono_ns,
            walk: Arc::new(Mutex::new(Walk::new(spec.seed))),
        }
    }

    /// Its parameters.
    pub fn spec(&self) -> &OscillatorSpec {
        &self.spec
    }

    /// The true monotonic instant it started at, ns.
    pub fn start_mono_ns(&self) -> u64 {
        self.start_mono_ns
    }

    /// Integral of the wander from the start to `dt_ns` after it, ns, and
    /// the wander there, ppb.
    fn wander(&self, dt_ns: i64) -> (f64, f64) {
        if dt_ns <= 0 || self.spec.wander_ppb_per_s == 0.0 {
            return (0.0, 0.0);
        }
        let k = (dt_ns / KNOT_NS) as usize;
        let u = (dt_ns % KNOT_NS) as f64 / KNOT_NS as f64;
        let (a, b) = {
            let mut walk = self.walk.lock().unwrap_or_else(|e| e.into_inner());
            walk.pair(k, self.spec.wander_ppb_per_s)
        };
        let dw = b.w_ppb - a.w_ppb;
        // w is linear between knots: integrate w_k + dw·u over [0, u] s.
        (
            a.phase_ns + a.w_ppb * u + dw * u * u / 2.0,
            a.w_ppb + dw * u,
        )
    }

    fn elapsed_ns(&self, mono_ns: u64) -> i64 {
        mono_ns.wrapping_sub(self.start_mono_ns) as i64
    }

    /// Local minus true at true instant `mono_ns`, without noise, ns.
    pub fn phase_ns(&self, mono_ns: u64) -> f64 {
        let dt = self.elapsed_ns(mono_ns);
        let (wander_ns, _) = self.wander(dt);
        self.spec.offset_ns as f64 + self.spec.drift_ppm * 1e-6 * dt as f64 + wander_ns
    }

    /// Frequency error at true instant `mono_ns`, ppb (drift plus wander).
    pub fn frequency_ppb(&self, mono_ns: u64) -> f64 {
        let (_, w) = self.wander(self.elapsed_ns(mono_ns));
        self.spec.drift_ppm * 1e3 + w
    }

    /// The noise of a reading at true instant `mono_ns`, ns.
    pub fn noise_ns(&self, mono_ns: u64) -> i64 {
        if self.spec.noise_ns == 0.0 {
            return 0;
        }
        let key = self.spec.seed ^ NOISE_SALT ^ mono_ns.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (SplitMix64::new(key).normal() * self.spec.noise_ns).round() as i64
    }

    /// Local minus true of a reading at true instant `mono_ns`, noise
    /// included, ns.
    pub fn error_ns(&self, mono_ns: u64) -> i64 {
        self.phase_ns(mono_ns).round() as i64 + self.noise_ns(mono_ns)
    }

    /// What the local clock reads at true CLOCK_MONOTONIC `mono_ns`.
    pub fn local_ns(&self, mono_ns: u64) -> u64 {
        mono_ns.wrapping_add(self.error_ns(mono_ns) as u64)
    }

    /// A CLOCK_REALTIME stamp of this kernel as the local machine's
    /// realtime clock would have read it: shifted by the error at its
    /// monotonic instant, `realtime_ns - realtime_minus_mono_ns`.
    pub fn local_realtime_ns(&self, realtime_ns: u64, realtime_minus_mono_ns: i64) -> u64 {
        let mono = realtime_ns.wrapping_sub(realtime_minus_mono_ns as u64);
        realtime_ns.wrapping_add(self.error_ns(mono) as u64)
    }

    /// The true instant whose noise-free local reading is `local_ns` (the
    /// last one, if the integer map repeats a value).
    pub fn true_ns(&self, local_ns: u64) -> u64 {
        // Through i64: a negative phase cast straight to u64 saturates at 0.
        let phase = |t: u64| self.phase_ns(t).round() as i64 as u64;
        let f = |t: u64| t.wrapping_add(phase(t));
        // Fixed point t = local - phase(t): each round shrinks the error by
        // the frequency error (< 0.11 %), so a few rounds leave ±1 ns.
        let mut t = local_ns.wrapping_sub(self.spec.offset_ns as u64);
        for _ in 0..4 {
            t = local_ns.wrapping_sub(phase(t));
        }
        // Settle the rounding: the largest t with f(t) <= local.
        let le = |t: u64| (f(t).wrapping_sub(local_ns) as i64) <= 0;
        while !le(t) {
            t = t.wrapping_sub(1);
        }
        while le(t.wrapping_add(1)) {
            t = t.wrapping_add(1);
        }
        t
    }
}

/// Any reference clock read on a machine whose CLOCK_MONOTONIC is the
/// oscillator: each sample's monotonic instant becomes the local reading,
/// the reference reading stays (a PHC, or a simulated one, is a separate
/// clock). System clocks and the exchange apply the oscillator themselves.
#[derive(Debug)]
pub struct OnOscillator<R> {
    inner: R,
    osc: Oscillator,
}

impl<R> OnOscillator<R> {
    /// `inner` read through `osc`.
    pub fn new(inner: R, osc: Oscillator) -> Self {
        OnOscillator { inner, osc }
    }
}

impl<R: Clock> Clock for OnOscillator<R> {
    fn now_ns(&mut self) -> Result<u64, ClockError> {
        self.inner.now_ns()
    }
    fn name(&self) -> String {
        self.inner.name()
    }
}

impl<R: ReferenceClock> ReferenceClock for OnOscillator<R> {
    fn sample(&mut self) -> Result<OffsetSample, ClockError> {
        let s = self.inner.sample()?;
        Ok(OffsetSample {
            mono_ns: self.osc.local_ns(s.mono_ns),
            ..s
        })
    }
    fn hardware_stamped(&self) -> bool {
        self.inner.hardware_stamped()
    }
    fn wait_ns(&mut self, dt_ns: u64, stop: &StopFlag) {
        self.inner.wait_ns(dt_ns, stop)
    }
    fn truth_ref_ns(&self, mono_ns: u64) -> Option<u64> {
        self.inner.truth_ref_ns(self.osc.true_ns(mono_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_000_000_000_000;
    const S: u64 = 1_000_000_000;

    fn osc(spec: &str) -> Oscillator {
        spec.parse::<OscillatorSpec>().unwrap().start_at(T0)
    }

    #[test]
    fn offset_and_drift() {
        let o = osc("3000000,50");
        assert_eq!(o.error_ns(T0), 3_000_000);
        assert_eq!(o.local_ns(T0), T0 + 3_000_000);
        // 50 ppm: 50 µs per second.
        assert_eq!(o.error_ns(T0 + 2 * S), 3_100_000);
        assert_eq!(o.error_ns(T0 + 3600 * S), 3_000_000 + 180_000_000);
        let n = osc("-2000000,-30");
        assert_eq!(n.error_ns(T0 + 10 * S), -2_000_000 - 300_000);
        assert_eq!(n.frequency_ppb(T0 + S), -30_000.0);
        // Before its start it extrapolates the drift.
        assert_eq!(o.error_ns(T0 - S), 3_000_000 - 50_000);
    }

    #[test]
    fn realtime_shares_the_error_of_its_monotonic_instant() {
        let o = osc("3000000,50");
        let rt_minus_mono = 1_700_000_000_000_000_000i64;
        let mono = T0 + 2 * S;
        let rt = mono + rt_minus_mono as u64;
        let local_rt = o.local_realtime_ns(rt, rt_minus_mono);
        assert_eq!(local_rt - o.local_ns(mono), rt_minus_mono as u64);
    }

    #[test]
    fn wander_is_reproducible_bounded_and_seed_dependent() {
        let a = osc("0,0,10");
        let b = osc("0,0,10");
        let c = osc("0,0,10,0,2");
        let hours = 3 * 3600;
        let mut max_w: f64 = 0.0;
        let mut diff_seed = false;
        for s in (0..hours).step_by(7) {
            let t = T0 + s * S + 123_456_789;
            assert_eq!(a.error_ns(t), b.error_ns(t), "same seed, same walk");
            diff_seed |= a.error_ns(t) != c.error_ns(t);
            max_w = max_w.max((a.frequency_ppb(t)).abs());
        }
        assert!(diff_seed, "another seed gives another walk");
        let bound = WANDER_BOUND_STEPS * 10.0;
        assert!(max_w <= bound, "wander {max_w} ppb beyond ±{bound}");
        // It does wander: after hours of 10 ppb/√s steps it has moved.
        assert!(max_w > 50.0, "wander {max_w} ppb: the walk barely moved");
        // Order of queries does not change the walk (knots are generated
        // in order whatever is asked first).
        let late = osc("0,0,10");
        let t = T0 + 5000 * S;
        let first = late.error_ns(t);
        assert_eq!(first, a.error_ns(t));
    }

    #[test]
    fn wander_phase_is_continuous_and_its_rate_is_the_frequency() {
        let o = osc("0,20,50");
        for s in [0u64, 1, 17, 999] {
            for frac in [0u64, 1, S / 2, S - 1] {
                let t = T0 + s * S + frac;
                let (p1, p2) = (o.phase_ns(t), o.phase_ns(t + 1_000_000));
                let rate_ppb = (p2 - p1) / 1e6 * 1e9;
                let f = o.frequency_ppb(t);
                assert!((rate_ppb - f).abs() < 1.0, "{s}s+{frac}: {rate_ppb} vs {f}");
            }
        }
    }

    #[test]
    fn noise_free_map_is_monotonic() {
        for spec in ["5000,1000,1000", "-5000,-1000,1000,0,9", "0,0"] {
            let o = osc(spec);
            let mut last = o.local_ns(T0 - 1000);
            // Fine steps around knots and coarse steps over hours.
            let mut t = T0 - 999;
            while t < T0 + 3 * S {
                let l = o.local_ns(t);
                assert!(l >= last, "{spec}: local({t}) = {l} < {last}");
                last = l;
                let frac = (t as i64 - T0 as i64).rem_euclid(S as i64) as u64;
                t += if !(2000..=S - 2000).contains(&frac) {
                    1
                } else {
                    9_973
                };
            }
            let mut t = T0;
            let mut last = o.local_ns(t);
            for _ in 0..20_000 {
                t += 997_000_001;
                let l = o.local_ns(t);
                assert!(l > last, "{spec}");
                last = l;
            }
        }
    }

    #[test]
    fn noise_has_the_asked_spread_and_is_per_reading() {
        let o = osc("0,0,0,100");
        let errs: Vec<f64> = (0..20_000u64)
            .map(|i| o.error_ns(T0 + i * 1013) as f64)
            .collect();
        let mean = errs.iter().sum::<f64>() / errs.len() as f64;
        let sd = (errs.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / errs.len() as f64).sqrt();
        assert!(mean.abs() < 3.0, "mean {mean}");
        assert!((sd - 100.0).abs() < 5.0, "sd {sd}");
        // Reproducible for a given instant; neighbours differ.
        assert_eq!(o.error_ns(T0 + 5), o.error_ns(T0 + 5));
        assert_ne!(o.noise_ns(T0 + 5), o.noise_ns(T0 + 6));
    }

    #[test]
    fn true_ns_inverts_the_noise_free_map() {
        for spec in ["3000000,50,20", "-2000000,-30,20,0,7", "0,1000,1000"] {
            let o = osc(spec);
            for t in [
                T0,
                T0 + 1,
                T0 + S / 3,
                T0 + 77 * S + 5,
                T0 + 4000 * S,
                T0 - S,
            ] {
                let back = o.true_ns(o.local_ns(t));
                assert!(back.abs_diff(t) <= 1, "{spec}: {t} -> {back}");
            }
        }
    }

    #[test]
    fn parse_and_refuse() {
        let s: OscillatorSpec = "3000000,50".parse().unwrap();
        assert_eq!(s, OscillatorSpec::new(3_000_000, 50.0));
        let s: OscillatorSpec = "-2000000,-30,5,20,42".parse().unwrap();
        assert_eq!(
            (
                s.offset_ns,
                s.drift_ppm,
                s.wander_ppb_per_s,
                s.noise_ns,
                s.seed
            ),
            (-2_000_000, -30.0, 5.0, 20.0, 42)
        );
        assert_eq!(s.to_string().parse::<OscillatorSpec>().unwrap(), s);
        for bad in [
            "",
            "1",
            "1,2,3,4,5,6",
            "x,1",
            "1,2000",
            "1,1,-1",
            "1,1,1,nan",
            "1,1,1,1,-1",
            "86400000000001,0",
            "-9223372036854775808,0",
            "nan,0",
            "0,inf",
        ] {
            assert!(bad.parse::<OscillatorSpec>().is_err(), "{bad:?} accepted");
        }
        let e = "1,2000".parse::<OscillatorSpec>().unwrap_err();
        assert!(e.contains("drift_ppm"), "{e}");
    }

    #[test]
    fn a_reference_on_the_oscillator_reads_local_monotonic_instants() {
        use crate::source::sim::{SimConfig, SimPhc};
        let sim = SimPhc::new(SimConfig::default());
        let start = sim.mono_ns();
        let o = OscillatorSpec::new(1_000_000, 0.0).start_at(start);
        let mut on = OnOscillator::new(SimPhc::new(SimConfig::default()), o);
        let mut plain = sim;
        let (a, b) = (plain.sample().unwrap(), on.sample().unwrap());
        assert_eq!(b.mono_ns, a.mono_ns + 1_000_000);
        assert_eq!(b.ref_ns, a.ref_ns);
        let truth = on.truth_ref_ns(b.mono_ns).unwrap();
        assert_eq!(truth, plain.truth_ref_ns(a.mono_ns).unwrap());
    }
}
