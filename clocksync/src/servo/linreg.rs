//! Least-squares servo over a sliding window that sizes itself, for
//! comparison with the PI servo (same idea as linuxptp's `linreg.c`:
//! fit the reference's phase against local time, pick the window size with
//! the smallest long-term prediction error, correct the whole predicted
//! offset within one interval; an independent implementation).
//!
//! The algorithm keeps its own account `applied_ns(t)` of what it has done to
//! the local clock (the integral of the corrections it returned, plus steps),
//! so each sample gives a point of the reference's free-running phase:
//! `y = applied_ns(t) - offset_ns = reference(t) - free_running(t)`, which is
//! a smooth curve (initial offset + frequency error + wander) whatever the
//! servo did. A line is fitted to the last n points for each n in
//! [`WINDOW_SIZES`]; the one predicting new points best is used. The
//! correction for the next interval is `slope - predicted_offset / interval`.

use crate::servo::algorithm::{AlgoOutput, ServoAlgorithm, ServoConfig};

/// Window sizes tried (points). linuxptp uses powers of two from 4 to 64.
pub const WINDOW_SIZES: [usize; 5] = [4, 8, 16, 32, 64];
/// Smoothing factor of the squared prediction error per window size
/// (linuxptp's `ERR_SMOOTH` is 0.02 as well).
pub const ERR_SMOOTH: f64 = 0.02;
/// Fewer points than this: no fit (two points make a line).
const MIN_POINTS: usize = 2;

#[derive(Debug, Clone, Copy)]
struct Point {
    /// Local time, seconds since the first sample (keeps f64 precision).
    x_s: f64,
    /// Reference phase against free-running local time, ns.
    y_ns: f64,
}

/// Line `y = intercept + slope·(x - x_last)`.
#[derive(Debug, Clone, Copy)]
struct Fit {
    intercept_ns: f64,
    slope_ppb: f64,
}

/// The linear-regression algorithm.
#[derive(Debug, Clone)]
pub struct LinReg {
    interval_s: f64,
    /// Bounds of the correction, ppb.
    lo_ppb: f64,
    hi_ppb: f64,
    points: std::collections::VecDeque<Point>,
    origin_ns: Option<u64>,
    /// Smoothed squared prediction error per window size (None = not yet).
    err: [Option<f64>; WINDOW_SIZES.len()],
    /// Correction in force since `last_x_s`, ppb.
    freq_ppb: f64,
    last_x_s: f64,
    /// What the servo has done to the local clock up to `last_x_s`, ns.
    applied_ns: f64,
    reported: bool,
    /// Window size of the current fit.
    fit_n: usize,
}

impl LinReg {
    /// A linear-regression servo.
    pub fn new(cfg: &ServoConfig) -> Self {
        LinReg {
            interval_s: cfg.interval_s,
            lo_ppb: -cfg.max_freq_ppb(),
            hi_ppb: cfg.max_freq_ppb(),
            points: Default::default(),
            origin_ns: None,
            err: [None; WINDOW_SIZES.len()],
            freq_ppb: 0.0,
            last_x_s: 0.0,
            applied_ns: 0.0,
            reported: false,
            fit_n: MIN_POINTS,
        }
    }

    /// Window size currently preferred (points).
    pub fn window(&self) -> usize {
        self.best_size_index()
            .map(|i| WINDOW_SIZES[i])
            .unwrap_or(MIN_POINTS)
    }

    fn fit(&self, n: usize) -> Option<Fit> {
        let len = self.points.len();
        if len < n.max(MIN_POINTS) {
            return None;
        }
        let last = self.points.back()?.x_s;
        let pts = self.points.range(len - n..);
        let (mut sx, mut sy) = (0.0, 0.0);
        for p in pts.clone() {
            sx += p.x_s - last;
            sy += p.y_ns;
        }
        let nf = n as f64;
        let (mx, my) = (sx / nf, sy / nf);
        let (mut sxx, mut sxy) = (0.0, 0.0);
        for p in pts {
            let dx = p.x_s - last - mx;
            sxx += dx * dx;
            sxy += dx * (p.y_ns - my);
        }
        if sxx <= 0.0 {
            return None;
        }
        let slope = sxy / sxx;
        Some(Fit {
            intercept_ns: my - slope * mx,
            slope_ppb: slope,
        })
    }

    fn best_size_index(&self) -> Option<usize> {
        let mut best: Option<(usize, f64)> = None;
        for (i, &n) in WINDOW_SIZES.iter().enumerate() {
            if self.points.len() < n {
                break;
            }
            let e = self.err[i].unwrap_or(f64::INFINITY);
            if best.is_none_or(|(_, b)| e < b) {
                best = Some((i, e));
            }
        }
        best.map(|(i, _)| i)
    }

    /// Correction for the next interval from the current fit:
    /// the fitted slope minus the predicted offset spread over one interval.
    fn correction(&self) -> Option<f64> {
        let fit = self.fit(self.fit_n)?;
        // Predicted offset now: our phase minus the fitted reference phase.
        let offset_pred_ns = self.applied_ns - fit.intercept_ns;
        Some((fit.slope_ppb - offset_pred_ns / self.interval_s).clamp(self.lo_ppb, self.hi_ppb))
    }

    /// Update each size's prediction error with the new point before adding it.
    fn score(&mut self, p: Point) {
        for (i, &n) in WINDOW_SIZES.iter().enumerate() {
            let Some(fit) = self.fit(n) else { break };
            let last = self.points.back().map_or(0.0, |q| q.x_s);
            let pred = fit.intercept_ns + fit.slope_ppb * (p.x_s - last);
            let e2 = (pred - p.y_ns).powi(2);
            self.err[i] = Some(match self.err[i] {
                Some(e) => e * (1.0 - ERR_SMOOTH) + e2 * ERR_SMOOTH,
                None => e2,
            });
        }
    }
}

impl ServoAlgorithm for LinReg {
    fn name(&self) -> &'static str {
        "linreg"
    }

    fn sample(&mut self, offset_ns: i64, local_ts_ns: u64) -> AlgoOutput {
        let origin = *self.origin_ns.get_or_insert(local_ts_ns);
        let x_s = local_ts_ns.saturating_sub(origin) as f64 / 1e9;
        if !self.points.is_empty() && x_s <= self.last_x_s {
            return AlgoOutput::Collecting;
        }
        // What our corrections did to the local clock since the last sample.
        self.applied_ns += self.freq_ppb * (x_s - self.last_x_s);
        self.last_x_s = x_s;
        let p = Point {
            x_s,
            y_ns: self.applied_ns - offset_ns as f64,
        };
        self.score(p);
        self.points.push_back(p);
        if self.points.len() > WINDOW_SIZES[WINDOW_SIZES.len() - 1] {
            self.points.pop_front();
        }
        let n = self
            .best_size_index()
            .map(|i| WINDOW_SIZES[i])
            .unwrap_or(self.points.len());
        self.fit_n = n.min(self.points.len());
        let Some(freq) = self.correction() else {
            return AlgoOutput::Collecting;
        };
        self.freq_ppb = freq;
        let first = !self.reported;
        self.reported = true;
        AlgoOutput::Ready {
            freq_ppb: freq,
            first,
        }
    }

    fn set_interval(&mut self, interval_s: f64) {
        self.interval_s = interval_s;
    }

    fn stepped(&mut self, offset_ns: i64) -> f64 {
        // The local clock moves by -offset: the reference points stay valid,
        // only our own phase changes; the correction no longer includes it.
        self.applied_ns -= offset_ns as f64;
        if let Some(f) = self.correction() {
            self.freq_ppb = f;
        }
        self.freq_ppb
    }

    fn reset(&mut self) {
        self.points.clear();
        self.err = [None; WINDOW_SIZES.len()];
        self.reported = false;
    }

    fn set_freq_bounds(&mut self, lo_ppb: f64, hi_ppb: f64) {
        (self.lo_ppb, self.hi_ppb) = (lo_ppb, hi_ppb);
    }

    fn frequency_ppb(&self) -> Option<f64> {
        // The fitted slope: the correction adds the removal of the offset.
        self.fit(self.fit_n)
            .map(|f| f.slope_ppb.clamp(self.lo_ppb, self.hi_ppb))
    }

    fn hold(&mut self, local_ts_ns: u64, freq_ppb: f64) {
        // Our account of the clock must stay true, or the held interval
        // would read as a move of the reference: book what our correction
        // did up to now, then the held frequency from here on.
        let Some(origin) = self.origin_ns else { return };
        let x_s = local_ts_ns.saturating_sub(origin) as f64 / 1e9;
        if x_s > self.last_x_s {
            self.applied_ns += self.freq_ppb * (x_s - self.last_x_s);
            self.last_x_s = x_s;
        }
        self.freq_ppb = freq_ppb;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_a_line_exactly() {
        let mut l = LinReg::new(&ServoConfig::default());
        // Local 10 ppm slow against the reference, no correction applied yet.
        assert_eq!(l.sample(0, 0), AlgoOutput::Collecting);
        match l.sample(-10_000, 1_000_000_000) {
            AlgoOutput::Ready { freq_ppb, first } => {
                assert!(first);
                // slope 10000 ppb, plus the 10 µs offset removed over 1 s.
                assert!((freq_ppb - 20_000.0).abs() < 1e-6, "{freq_ppb}");
            }
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn window_grows_with_white_noise() {
        let mut l = LinReg::new(&ServoConfig::default());
        let mut seed = 7u64;
        for i in 0..200u64 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let noise = ((seed >> 33) as f64 / (1u64 << 31) as f64 - 0.5) * 100.0;
            // The servo's own correction is in applied_ns; feed the offset
            // a perfect clock following the servo would see.
            let offset = (l.applied_ns + l.freq_ppb * 1.0) - noise;
            l.sample(offset as i64, i * 1_000_000_000);
        }
        assert!(l.window() >= 16, "window {}", l.window());
    }
}
