//! How the sanity check is tuned: its defaults (the reasons for each are
//! in the module docs of `servo::sanity`), [`SanityConfig`] and the
//! command-line form of its total-move limit.

/// Default of [`SanityConfig::jump_factor`] (K).
pub const JUMP_FACTOR: f64 = 10.0;
/// Default of [`SanityConfig::jump_floor_ns`], ns.
pub const JUMP_FLOOR_NS: u64 = 20_000;
/// Default of [`SanityConfig::follow_after`] (M), updates.
pub const FOLLOW_AFTER: u32 = 4;
/// Default of [`SanityConfig::max_change_ns`], ns.
pub const MAX_CHANGE_NS: u64 = 1_000_000;
/// Largest `--servo-max-change` short of `unlimited` (1000 s).
pub const MAX_CHANGE_LIMIT_NS: u64 = 1_000_000_000_000;
/// Largest `--servo-max-freq-change`, ppb (1000 ppm, beyond any clock's
/// own limit).
pub const MAX_FREQ_CHANGE_LIMIT_PPB: f64 = 1_000_000.0;
/// Default of [`SanityConfig::max_freq_change_ppb`] (W), ppb.
pub const MAX_FREQ_CHANGE_PPB: f64 = 10_000.0;
/// Accepted offsets kept for the error estimate (RMS) and the phase
/// limit's scale (median).
pub const WINDOW: usize = 16;
/// The baseline frequency is the mean correction over at least this many
/// consecutive LOCKED updates ...
pub const BASELINE_MIN_UPDATES: u32 = 16;
/// ... spanning at least this long, s: over 16 s a few µs of phase noise
/// or of phase still being pulled in (at most the 20 µs first-step
/// threshold) move the mean by about 1 ppm, a tenth of the band.
pub const BASELINE_MIN_S: f64 = 16.0;

/// How the sanity check judges the reference (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SanityConfig {
    /// Off: every sample is followed, as linuxptp's servos do.
    pub enabled: bool,
    /// K: the phase limit is K × the median |offset| of recent samples ...
    pub jump_factor: f64,
    /// ... and at least this, ns.
    pub jump_floor_ns: u64,
    /// M: consecutive, agreeing held samples after which the servo
    /// re-acquires the reference (at least 1).
    pub follow_after: u32,
    /// The moves followed that way add up to at most this, ns (`None`: no
    /// limit; `Some(0)`: never follow a held move).
    pub max_change_ns: Option<u64>,
    /// W: the correction stays within the baseline ± this, ppb (0: only
    /// the clock's own limit applies).
    pub max_freq_change_ppb: f64,
}

impl SanityConfig {
    /// No check: the servo follows every sample (linuxptp's behaviour).
    pub const OFF: SanityConfig = SanityConfig {
        enabled: false,
        jump_factor: JUMP_FACTOR,
        jump_floor_ns: JUMP_FLOOR_NS,
        follow_after: FOLLOW_AFTER,
        max_change_ns: Some(MAX_CHANGE_NS),
        max_freq_change_ppb: MAX_FREQ_CHANGE_PPB,
    };
}

impl Default for SanityConfig {
    fn default() -> Self {
        SanityConfig {
            enabled: true,
            ..SanityConfig::OFF
        }
    }
}

/// The command-line form of [`SanityConfig::max_change_ns`]: a number of
/// ns, or `unlimited`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxChange(pub Option<u64>);

impl Default for MaxChange {
    fn default() -> Self {
        MaxChange(Some(MAX_CHANGE_NS))
    }
}

impl std::str::FromStr for MaxChange {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "unlimited" {
            return Ok(MaxChange(None));
        }
        match s.parse::<u64>() {
            Ok(ns) if ns <= MAX_CHANGE_LIMIT_NS => Ok(MaxChange(Some(ns))),
            _ => Err(format!(
                "expected a number of ns from 0 (follow no held move) to {MAX_CHANGE_LIMIT_NS}, or `unlimited`, got {s:?}"
            )),
        }
    }
}

impl std::fmt::Display for MaxChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(ns) => write!(f, "{ns}"),
            None => f.write_str("unlimited"),
        }
    }
}
