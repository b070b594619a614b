//! What the sanity check tells: its counters and the events an operator
//! should hear of.

/// What the sanity check did, counted since the servo was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SanityCounters {
    /// Samples held: their offset was beyond the phase limit, the servo did
    /// not follow them (the clock ran on in HOLDOVER).
    pub rejected: u64,
    /// Updates whose correction the servo limited to the baseline band or
    /// the clock's own limit (the reference drifted faster than the clock
    /// plausibly can).
    pub freq_limited: u64,
    /// Persisting moves of the reference the servo followed (re-acquired).
    pub reacquired: u64,
    /// Of `rejected`, samples of a persisting move the servo did not follow
    /// because it would exceed the total `max_change_ns`.
    pub beyond_max_change: u64,
}

/// One thing worth telling an operator about a sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SanityEvent {
    /// A sample beyond the phase limit was held.
    Held {
        /// Its offset, ns.
        offset_ns: i64,
        /// The limit, ns.
        limit_ns: u64,
        /// Consecutive agreeing held samples so far.
        streak: u32,
        /// Consecutive flagged updates so far.
        episode: u64,
    },
    /// A persisting move was not followed: it would exceed `max_change_ns`.
    Refused {
        /// The held offset, ns.
        offset_ns: i64,
        /// Moves followed so far plus this one, ns.
        total_ns: i64,
        /// The limit on that total, ns.
        max_change_ns: u64,
        /// Consecutive flagged updates so far.
        episode: u64,
    },
    /// A persisting move is being followed: the servo re-acquires.
    Following {
        /// The held offset, ns.
        offset_ns: i64,
        /// Moves followed so far, this one included, ns.
        total_ns: i64,
    },
    /// The correction was limited to `[lo_ppb, hi_ppb]`.
    FreqLimited {
        /// The correction applied, ppb.
        freq_ppb: f64,
        /// Lower bound, ppb.
        lo_ppb: f64,
        /// Upper bound, ppb.
        hi_ppb: f64,
        /// The baseline the band is centred on, if learned yet.
        baseline_ppb: Option<f64>,
        /// Consecutive flagged updates so far.
        episode: u64,
    },
    /// The reference agrees with the clock again after flagged updates.
    Agrees {
        /// How many updates were flagged.
        flagged: u64,
    },
}
