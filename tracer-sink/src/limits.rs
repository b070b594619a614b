//! Limits that keep a sender who invents agent ids from locking real
//! agents out: how many new agents a source address and the whole sink may
//! add per interval, and a warning logged once per interval when a limit
//! bites.
//!
//! Admission of a new agent takes one token from its source's bucket and
//! one from the sink's:
//!
//! - per source address (IP and port; an agent sends from one socket):
//!   [`SOURCE_BURST`] at once, then one per [`SOURCE_REFILL`];
//! - over all sources: [`GLOBAL_BURST`] at once, then
//!   [`GLOBAL_REFILL_PER_S`] per second. This also bounds the pcapng
//!   interfaces a sink creates per interval.
//!
//! A spray of new agent ids from one address thus adds a handful of
//! agents, and a real agent from another address still gets in. A
//! sender that varies its source address (UDP sources can be forged) gets
//! past the per-source limit but not the global one; only authenticated
//! datagrams close that. At most [`MAX_SOURCES`] source buckets are kept;
//! beyond them (idle ones are dropped first) new sources share one bucket.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// New agents one source address may add at once.
pub const SOURCE_BURST: f64 = 8.0;
/// Time for a source's bucket to regain one new agent.
pub const SOURCE_REFILL: Duration = Duration::from_secs(10);
/// New agents the sink adds at once over all sources.
pub const GLOBAL_BURST: f64 = 1024.0;
/// New agents per second over all sources once the burst is spent.
pub const GLOBAL_REFILL_PER_S: f64 = 16.0;
/// Source buckets kept at most.
pub const MAX_SOURCES: usize = 4096;
/// How often a limit that bites is logged (at warn level, with counts).
pub const WARN_INTERVAL: Duration = Duration::from_secs(10);

/// A token bucket.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(cap: f64, now: Instant) -> Self {
        Bucket {
            tokens: cap,
            at: now,
        }
    }

    fn refill(&mut self, cap: f64, per_s: f64, now: Instant) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + dt * per_s).min(cap);
        self.at = now;
    }

    fn is_full(mut self, cap: f64, per_s: f64, now: Instant) -> bool {
        self.refill(cap, per_s, now);
        self.tokens >= cap
    }
}

/// Why a new agent was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its source address added too many agents lately.
    Source,
    /// The sink added too many agents lately.
    Global,
}

/// New-agent admission control.
#[derive(Debug, Default)]
pub struct Admission {
    sources: HashMap<SocketAddr, Bucket>,
    /// Shared by sources beyond [`MAX_SOURCES`].
    overflow: Option<Bucket>,
    global: Option<Bucket>,
}

fn source_rate() -> f64 {
    1.0 / SOURCE_REFILL.as_secs_f64()
}

impl Admission {
    /// May `src` add a new agent at `now`? Takes the tokens when it may.
    pub fn admit(&mut self, src: SocketAddr, now: Instant) -> Result<(), Refused> {
        if !self.sources.contains_key(&src) && self.sources.len() >= MAX_SOURCES {
            // Drop the buckets of sources that have been quiet long enough
            // to be full again: they hold no information.
            self.sources
                .retain(|_, b| !b.is_full(SOURCE_BURST, source_rate(), now));
        }
        let bucket = if self.sources.len() < MAX_SOURCES || self.sources.contains_key(&src) {
            self.sources
                .entry(src)
                .or_insert_with(|| Bucket::full(SOURCE_BURST, now))
        } else {
            self.overflow
                .get_or_insert_with(|| Bucket::full(SOURCE_BURST, now))
        };
        bucket.refill(SOURCE_BURST, source_rate(), now);
        let global = self
            .global
            .get_or_insert_with(|| Bucket::full(GLOBAL_BURST, now));
        global.refill(GLOBAL_BURST, GLOBAL_REFILL_PER_S, now);
        if bucket.tokens < 1.0 {
            return Err(Refused::Source);
        }
        if global.tokens < 1.0 {
            return Err(Refused::Global);
        }
        bucket.tokens -= 1.0;
        global.tokens -= 1.0;
        Ok(())
    }

    /// Source buckets held.
    pub fn sources(&self) -> usize {
        self.sources.len()
    }
}

/// Counts of limit hits, logged at warn level at most once per
/// [`WARN_INTERVAL`]: the first hit is logged at once, later ones are
/// summed up and logged when the interval has passed.
#[derive(Debug, Default)]
pub struct WarnEvery {
    last: Option<Instant>,
    pending: BTreeMap<&'static str, u64>,
}

impl WarnEvery {
    /// Count one hit of `what`.
    pub fn note(&mut self, what: &'static str, now: Instant) {
        *self.pending.entry(what).or_insert(0) += 1;
        self.flush(now);
    }

    /// Log the pending counts if the interval has passed.
    pub fn flush(&mut self, now: Instant) {
        if self
            .last
            .is_some_and(|t| now.saturating_duration_since(t) < WARN_INTERVAL)
        {
            return;
        }
        self.log(now);
    }

    /// Log the pending counts now (at shutdown).
    pub fn finish(&mut self) {
        self.log(Instant::now());
    }

    fn log(&mut self, now: Instant) {
        if self.pending.is_empty() {
            return;
        }
        let since = match self.last {
            Some(t) => format!(
                "in the last {:.0} s",
                now.saturating_duration_since(t).as_secs_f64()
            ),
            None => "since start".to_owned(),
        };
        let counts: Vec<String> = self
            .pending
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        tracing::warn!(
            counts = %counts.join(" "),
            "datagrams the sink's limits acted on {since} (seq_jump: rejected, a sequence jump beyond \
             the bounds, as a forged or confused sender makes; new_agent_rate / too_many_agents: \
             rejected, new agent ids arriving faster than admitted; hostname_sanitized: accepted, \
             control characters in the host name replaced by '?'). Next summary in {} s at the earliest",
            WARN_INTERVAL.as_secs()
        );
        self.pending.clear();
        self.last = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], port))
    }

    #[test]
    fn a_spraying_source_is_limited_and_others_get_in() {
        let t0 = Instant::now();
        let mut a = Admission::default();
        let admitted = (0..10_000).filter(|_| a.admit(addr(1), t0).is_ok()).count();
        assert_eq!(admitted, SOURCE_BURST as usize);
        assert_eq!(a.admit(addr(1), t0), Err(Refused::Source));
        assert!(a.admit(addr(2), t0).is_ok());
        // One more per refill period.
        let later = t0 + SOURCE_REFILL;
        assert!(a.admit(addr(1), later).is_ok());
        assert_eq!(a.admit(addr(1), later), Err(Refused::Source));
    }

    #[test]
    fn the_global_bucket_bounds_new_agents_over_all_sources() {
        let t0 = Instant::now();
        let mut a = Admission::default();
        let mut ok = 0;
        for port in 0..20_000u32 {
            let src = SocketAddr::from(([10, 0, (port >> 8) as u8, port as u8], 1));
            if a.admit(src, t0).is_ok() {
                ok += 1;
            }
        }
        assert_eq!(ok, GLOBAL_BURST as usize);
        assert!(a.sources() <= MAX_SOURCES);
        let later = t0 + Duration::from_secs(1);
        let more = (0..100)
            .filter(|i| a.admit(addr(30_000 + i), later).is_ok())
            .count();
        assert_eq!(more, GLOBAL_REFILL_PER_S as usize);
    }
}
