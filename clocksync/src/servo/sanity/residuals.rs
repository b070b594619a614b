//! The last accepted offsets, from which the check takes its phase limit
//! (median) and the servo its error estimate (RMS).

use std::collections::VecDeque;

use super::config::WINDOW;

/// The last accepted offsets: the error estimate's RMS and the phase
/// limit's median.
#[derive(Debug, Clone, Default)]
pub struct Residuals(VecDeque<i64>);

impl Residuals {
    /// Keep `offset_ns` (dropping the oldest beyond [`WINDOW`]).
    pub fn push(&mut self, offset_ns: i64) {
        if self.0.len() == WINDOW {
            self.0.pop_front();
        }
        self.0.push_back(offset_ns);
    }

    /// Forget them (after a step they no longer describe the clock).
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// RMS, ns (0 when empty).
    pub fn rms_ns(&self) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        let sum: f64 = self.0.iter().map(|&o| (o as f64).powi(2)).sum();
        (sum / self.0.len() as f64).sqrt()
    }

    /// Median |offset|, ns (0 when empty; the upper one of an even count).
    pub fn median_abs_ns(&self) -> u64 {
        let mut abs: Vec<u64> = self.0.iter().map(|o| o.unsigned_abs()).collect();
        abs.sort_unstable();
        abs.get(abs.len() / 2).copied().unwrap_or(0)
    }
}
