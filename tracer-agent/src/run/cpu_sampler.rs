//! CPU events in the trace: every period, one event per CPU with the time
//! each category took on it since the previous one, from the cumulative
//! counters of the CPU accounting.

use std::time::{Duration, Instant};

use tracer_codec::CpuEvent;

/// Turns cumulative per-CPU readings into per-interval CPU events.
#[derive(Debug)]
pub struct CpuSampler {
    period: Duration,
    last_at: Instant,
    last_mono_ns: u64,
    last: Vec<[u64; 4]>,
}

impl CpuSampler {
    /// Sampling every `period`; the accounting started at `now`, at
    /// `start_mono_ns` (CLOCK_MONOTONIC, the first interval's start), with
    /// zero counters.
    pub fn new(period: Duration, now: Instant, start_mono_ns: u64) -> Self {
        CpuSampler {
            period,
            last_at: now,
            last_mono_ns: start_mono_ns,
            last: Vec::new(),
        }
    }

    /// Whether a period has passed since the last sample.
    pub fn due(&self, now: Instant) -> bool {
        now.duration_since(self.last_at) >= self.period
    }

    /// The events of `reading` (cumulative ns per CPU and category, read at
    /// `mono_ns`): one per CPU, `global_ns` left for the caller's stamper.
    /// A counter that went backwards (it cannot, unless the accounting
    /// restarted) yields 0 for its category.
    pub fn sample(&mut self, now: Instant, mono_ns: u64, reading: &[[u64; 4]]) -> Vec<CpuEvent> {
        let interval_ns = mono_ns.saturating_sub(self.last_mono_ns);
        let events = reading
            .iter()
            .enumerate()
            .map(|(cpu, cur)| {
                let prev = self.last.get(cpu).copied().unwrap_or([0; 4]);
                let d = |i: usize| cur[i].saturating_sub(prev[i]);
                CpuEvent {
                    mono_ns,
                    global_ns: 0,
                    interval_ns,
                    net_rx_ns: d(0),
                    net_tx_ns: d(1),
                    sock_send_ns: d(2),
                    sock_recv_ns: d(3),
                    cpu: cpu as u32,
                }
            })
            .collect();
        self.last = reading.to_vec();
        self.last_mono_ns = mono_ns;
        self.last_at = now;
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_are_deltas_of_the_cumulative_counters() {
        let t0 = Instant::now();
        let mut s = CpuSampler::new(Duration::from_secs(1), t0, 1_000);
        assert!(!s.due(t0));
        assert!(s.due(t0 + Duration::from_secs(1)));
        let e = s.sample(t0, 1_000_001_000, &[[10, 0, 5, 7], [1, 2, 3, 4]]);
        assert_eq!(e.len(), 2);
        assert_eq!(
            (e[0].interval_ns, e[0].net_rx_ns, e[0].cpu),
            (1_000_000_000, 10, 0)
        );
        assert_eq!((e[1].sock_recv_ns, e[1].cpu), (4, 1));
        let e = s.sample(t0, 2_000_001_000, &[[15, 1, 5, 9], [0, 2, 3, 4]]);
        assert_eq!(e[0].interval_ns, 1_000_000_000);
        assert_eq!(
            (
                e[0].net_rx_ns,
                e[0].net_tx_ns,
                e[0].sock_send_ns,
                e[0].sock_recv_ns
            ),
            (5, 1, 0, 2)
        );
        // A counter that fell reads as nothing, never as a huge value.
        assert_eq!(e[1].net_rx_ns, 0);
        assert!(!s.due(t0 + Duration::from_millis(999)));
    }
}
