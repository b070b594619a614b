//! The CPU cost of the network stack, per host and CPU: the agents' CPU
//! events (kind 6) summed. Each event gives one CPU's NET_RX and NET_TX
//! softirq time and its time in socket send and receive calls over one
//! interval (deltas), so the sums are the time covered and the time each
//! category took in it; a lost event leaves its interval out of both.
//!
//! Memory: one small record per (host, CPU), at most [`MAX_CPUS`] CPUs per
//! host (a crafted trace could name 2^32 of them); events of further CPUs
//! are counted, not summed.

use std::collections::BTreeMap;

use serde::Serialize;
use tracer_codec::CpuEvent;

/// CPUs summed per host; the largest `NR_CPUS` Linux builds with.
pub const MAX_CPUS: usize = 8192;

/// Sums over the CPU events of one CPU (or of a host's CPUs), ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTotals {
    /// CPU events summed.
    pub samples: u64,
    /// Time covered: the sum of their intervals.
    pub interval_ns: u64,
    /// NET_RX softirq time.
    pub net_rx_ns: u64,
    /// NET_TX softirq time.
    pub net_tx_ns: u64,
    /// Time in socket send calls.
    pub sock_send_ns: u64,
    /// Time in socket receive calls.
    pub sock_recv_ns: u64,
}

impl CpuTotals {
    /// Add one event (saturating: a crafted trace cannot wrap a sum).
    pub fn add(&mut self, e: &CpuEvent) {
        self.samples += 1;
        self.interval_ns = self.interval_ns.saturating_add(e.interval_ns);
        self.net_rx_ns = self.net_rx_ns.saturating_add(e.net_rx_ns);
        self.net_tx_ns = self.net_tx_ns.saturating_add(e.net_tx_ns);
        self.sock_send_ns = self.sock_send_ns.saturating_add(e.sock_send_ns);
        self.sock_recv_ns = self.sock_recv_ns.saturating_add(e.sock_recv_ns);
    }

    /// Add another CPU's sums.
    pub fn merge(&mut self, o: &CpuTotals) {
        self.samples += o.samples;
        self.interval_ns = self.interval_ns.saturating_add(o.interval_ns);
        self.net_rx_ns = self.net_rx_ns.saturating_add(o.net_rx_ns);
        self.net_tx_ns = self.net_tx_ns.saturating_add(o.net_tx_ns);
        self.sock_send_ns = self.sock_send_ns.saturating_add(o.sock_send_ns);
        self.sock_recv_ns = self.sock_recv_ns.saturating_add(o.sock_recv_ns);
    }
}

/// The CPU events of one host, summed per CPU.
#[derive(Debug, Clone, Default)]
pub struct CpuCosts {
    by_cpu: BTreeMap<u32, CpuTotals>,
    /// Events of CPUs past the first [`MAX_CPUS`] (not summed).
    pub ignored: u64,
}

impl CpuCosts {
    /// Add one CPU event of the host.
    pub fn add(&mut self, e: &CpuEvent) {
        if let Some(t) = self.by_cpu.get_mut(&e.cpu) {
            t.add(e);
        } else if self.by_cpu.len() < MAX_CPUS {
            self.by_cpu.entry(e.cpu).or_default().add(e);
        } else {
            self.ignored += 1;
        }
    }

    /// True when the host sent no CPU event.
    pub fn is_empty(&self) -> bool {
        self.by_cpu.is_empty() && self.ignored == 0
    }

    /// Sums per CPU, by CPU number.
    pub fn cpus(&self) -> impl Iterator<Item = (u32, &CpuTotals)> {
        self.by_cpu.iter().map(|(c, t)| (*c, t))
    }

    /// Sums over all its CPUs (CPU time: two CPUs over one second cover
    /// two seconds).
    pub fn total(&self) -> CpuTotals {
        let mut t = CpuTotals::default();
        for c in self.by_cpu.values() {
            t.merge(c);
        }
        t
    }
}

/// One category's time in the report.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CategoryCost {
    /// Nanoseconds it took over the time covered.
    pub ns: u64,
    /// The same in seconds.
    pub seconds: f64,
    /// Its share of the time covered (0.25: a quarter); `None` when no
    /// time was covered. Categories may overlap (a softirq run inside a
    /// send call counts in both), so shares need not add up to 1.
    pub share: Option<f64>,
}

/// What the network stack cost one CPU, or all CPUs of a host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuCostReport {
    /// The CPU; `None` for the sum over the host's CPUs.
    pub cpu: Option<u32>,
    /// CPU events summed.
    pub samples: u64,
    /// Time covered (the sum of the events' intervals), ns.
    pub covered_ns: u64,
    /// The same in seconds.
    pub covered_s: f64,
    /// NET_RX softirq.
    pub net_rx: CategoryCost,
    /// NET_TX softirq.
    pub net_tx: CategoryCost,
    /// Socket send calls.
    pub sock_send: CategoryCost,
    /// Socket receive calls.
    pub sock_recv: CategoryCost,
}

/// Nanoseconds to seconds.
fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

impl CpuCostReport {
    /// The report of `t`, for `cpu` (`None`: a host's total).
    pub fn new(cpu: Option<u32>, t: &CpuTotals) -> Self {
        let cat = |ns: u64| CategoryCost {
            ns,
            seconds: seconds(ns),
            share: (t.interval_ns != 0).then(|| ns as f64 / t.interval_ns as f64),
        };
        CpuCostReport {
            cpu,
            samples: t.samples,
            covered_ns: t.interval_ns,
            covered_s: seconds(t.interval_ns),
            net_rx: cat(t.net_rx_ns),
            net_tx: cat(t.net_tx_ns),
            sock_send: cat(t.sock_send_ns),
            sock_recv: cat(t.sock_recv_ns),
        }
    }

    /// The categories with their names in the reports, in column order.
    pub fn categories(&self) -> [(&'static str, &CategoryCost); 4] {
        [
            ("NET_RX", &self.net_rx),
            ("NET_TX", &self.net_tx),
            ("send", &self.sock_send),
            ("recv", &self.sock_recv),
        ]
    }
}

/// The CPU cost of the network stack on one host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostCpuCost {
    /// Hostname.
    pub host: String,
    /// Per CPU, by CPU number.
    pub cpus: Vec<CpuCostReport>,
    /// Over all its CPUs (CPU time).
    pub all: CpuCostReport,
    /// CPU events of CPUs past the first 8192 (not summed).
    pub ignored_samples: u64,
}

impl HostCpuCost {
    /// The report of one host's sums.
    pub fn new(host: String, c: &CpuCosts) -> Self {
        HostCpuCost {
            host,
            cpus: c
                .cpus()
                .map(|(cpu, t)| CpuCostReport::new(Some(cpu), t))
                .collect(),
            all: CpuCostReport::new(None, &c.total()),
            ignored_samples: c.ignored,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(cpu: u32, interval_ns: u64, net_rx_ns: u64, sock_send_ns: u64) -> CpuEvent {
        CpuEvent {
            interval_ns,
            net_rx_ns,
            sock_send_ns,
            cpu,
            ..CpuEvent::default()
        }
    }

    #[test]
    fn sums_per_cpu_and_over_the_host() {
        let mut c = CpuCosts::default();
        assert!(c.is_empty());
        c.add(&ev(1, 1_000_000_000, 250_000_000, 0));
        c.add(&ev(0, 2_000_000_000, 0, 100_000_000));
        c.add(&ev(1, 1_000_000_000, 750_000_000, 0));
        let r = HostCpuCost::new("h".into(), &c);
        assert_eq!(r.cpus.len(), 2);
        assert_eq!(r.cpus[0].cpu, Some(0));
        assert_eq!(r.cpus[0].sock_send.share, Some(0.05));
        let one = &r.cpus[1];
        assert_eq!((one.samples, one.covered_ns), (2, 2_000_000_000));
        assert_eq!(one.covered_s, 2.0);
        assert_eq!(one.net_rx.ns, 1_000_000_000);
        assert_eq!(one.net_rx.seconds, 1.0);
        assert_eq!(one.net_rx.share, Some(0.5));
        assert_eq!(r.all.cpu, None);
        assert_eq!((r.all.samples, r.all.covered_ns), (3, 4_000_000_000));
        assert_eq!(r.all.net_rx.share, Some(0.25));
        assert_eq!(r.all.sock_send.share, Some(0.025));
    }

    #[test]
    fn an_empty_interval_has_no_share_and_sums_saturate() {
        let mut c = CpuCosts::default();
        c.add(&ev(3, 0, 7, 0));
        let r = HostCpuCost::new("h".into(), &c);
        assert_eq!(r.all.net_rx.share, None);
        assert_eq!(r.all.net_rx.ns, 7);
        c.add(&ev(3, u64::MAX, u64::MAX, 0));
        assert_eq!(c.total().interval_ns, u64::MAX);
        assert_eq!(c.total().net_rx_ns, u64::MAX);
    }

    #[test]
    fn cpus_past_the_limit_are_counted_not_kept() {
        let mut c = CpuCosts::default();
        for cpu in 0..MAX_CPUS as u32 + 3 {
            c.add(&ev(cpu, 1, 0, 0));
        }
        c.add(&ev(0, 1, 0, 0));
        assert_eq!(c.cpus().count(), MAX_CPUS);
        assert_eq!(c.ignored, 3);
        assert_eq!(c.total().samples, MAX_CPUS as u64 + 1);
    }
}
