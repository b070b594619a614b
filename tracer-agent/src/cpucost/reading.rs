//! What one read of the CPU cost accounting gives: per CPU, the
//! nanoseconds charged to each [`Category`] and to each softirq vector
//! since the accounting started, and the events it could not charge; and
//! the difference of two readings, which is what an interval cost.

use std::time::{Duration, Instant};

/// What the accounting charges, per CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Category {
    /// NET_RX softirqs: the receive path below the socket (drivers, GRO,
    /// IP, TCP/UDP input), wherever they run (after a hardirq, inside a
    /// sender's local_bh_enable, in ksoftirqd).
    NetRx = 0,
    /// NET_TX softirqs: queued transmissions and freed skbs.
    NetTx = 1,
    /// sendto, sendmsg and sendmmsg, without the softirqs run inside them
    /// and without the time their task was switched away.
    SockSend = 2,
    /// recvfrom, recvmsg and recvmmsg, likewise.
    SockRecv = 3,
}

/// How many categories there are (the length of a CPU's row).
pub const N_CATEGORIES: usize = 4;

/// Names of the softirq vectors (include/linux/interrupt.h), by number, as
/// /proc/softirqs spells them in lower case.
pub const SOFTIRQ_NAMES: [&str; N_SOFTIRQS] = [
    "hi", "timer", "net_tx", "net_rx", "block", "irq_poll", "tasklet", "sched", "hrtimer", "rcu",
];

/// How many softirq vectors the accounting keeps a total of.
pub const N_SOFTIRQS: usize = 10;

impl Category {
    /// Every category, in index order.
    pub const ALL: [Category; N_CATEGORIES] = [
        Category::NetRx,
        Category::NetTx,
        Category::SockSend,
        Category::SockRecv,
    ];

    /// Its name in metrics and output.
    pub fn name(self) -> &'static str {
        match self {
            Category::NetRx => "net_rx",
            Category::NetTx => "net_tx",
            Category::SockSend => "sock_send",
            Category::SockRecv => "sock_recv",
        }
    }
}

/// What the accounting saw but could not charge, summed over CPUs (each a
/// count of events, see `enum cc_counter` in ebpf/include/cpucost.h).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Anomalies {
    /// Socket calls whose exit came with no call open: entered before the
    /// accounting attached. Expected in the first moments, then rare.
    pub calls_unseen: u64,
    /// Calls entered while one was open (an exit never seen).
    pub calls_reopened: u64,
    /// Softirq exits without their entry (begun before the attach).
    pub softirqs_unmatched: u64,
    /// Segments cut short because one program ran inside another.
    pub nested: u64,
    /// Task switches inside a call whose rest could not be kept (no task
    /// storage): that rest is not charged.
    pub stash_lost: u64,
    /// Task switches seen inside a softirq (never expected).
    pub switch_in_softirq: u64,
    /// Switches sched_switch did not report, found when the running task
    /// was not the one the CPU's state was of: the other task's open call
    /// was dropped (its rest not charged). A kernel that reports every
    /// switch has none.
    pub untraced_switches: u64,
}

impl Anomalies {
    /// Each counter minus `earlier`'s.
    pub fn since(&self, earlier: &Anomalies) -> Anomalies {
        Anomalies {
            calls_unseen: self.calls_unseen.saturating_sub(earlier.calls_unseen),
            calls_reopened: self.calls_reopened.saturating_sub(earlier.calls_reopened),
            softirqs_unmatched: self
                .softirqs_unmatched
                .saturating_sub(earlier.softirqs_unmatched),
            nested: self.nested.saturating_sub(earlier.nested),
            stash_lost: self.stash_lost.saturating_sub(earlier.stash_lost),
            switch_in_softirq: self
                .switch_in_softirq
                .saturating_sub(earlier.switch_in_softirq),
            untraced_switches: self
                .untraced_switches
                .saturating_sub(earlier.untraced_switches),
        }
    }
}

/// The totals at one moment, cumulative since the accounting started. A
/// segment (a softirq, a stretch of a call) is added when it ends, so a
/// reading misses the segment each CPU has open.
#[derive(Debug, Clone)]
pub struct CpuCostReading {
    /// Per possible CPU, ns charged to each category, indexed by
    /// `Category as usize`.
    pub per_cpu: Vec<[u64; N_CATEGORIES]>,
    /// When it was read.
    pub taken: Instant,
    /// Per possible CPU, ns spent in each softirq vector (every vector,
    /// [`SOFTIRQ_NAMES`]), what /proc/stat's softirq column samples.
    pub softirq_per_cpu: Vec<[u64; N_SOFTIRQS]>,
    /// Per possible CPU, how many softirqs of each vector were charged
    /// (entry and exit seen).
    pub softirq_runs_per_cpu: Vec<[u64; N_SOFTIRQS]>,
    /// Events that could not be charged.
    pub anomalies: Anomalies,
}

impl CpuCostReading {
    /// ns charged to `cat`, over all CPUs.
    pub fn total(&self, cat: Category) -> u64 {
        self.per_cpu.iter().map(|row| row[cat as usize]).sum()
    }

    /// ns spent in softirq vector `vec`, over all CPUs.
    pub fn softirq_total(&self, vec: usize) -> u64 {
        self.softirq_per_cpu
            .iter()
            .map(|row| row.get(vec).copied().unwrap_or(0))
            .sum()
    }

    /// What the interval from `earlier` to this reading cost: every total
    /// minus `earlier`'s (both from the same accounting).
    pub fn since(&self, earlier: &CpuCostReading) -> CpuCostDelta {
        CpuCostDelta {
            per_cpu: sub_rows(&self.per_cpu, &earlier.per_cpu),
            softirq_per_cpu: sub_rows(&self.softirq_per_cpu, &earlier.softirq_per_cpu),
            softirq_runs_per_cpu: sub_rows(
                &self.softirq_runs_per_cpu,
                &earlier.softirq_runs_per_cpu,
            ),
            elapsed: self.taken.saturating_duration_since(earlier.taken),
            anomalies: self.anomalies.since(&earlier.anomalies),
        }
    }
}

/// The cost of an interval between two readings.
#[derive(Debug, Clone)]
pub struct CpuCostDelta {
    /// Per CPU, ns charged to each category in the interval.
    pub per_cpu: Vec<[u64; N_CATEGORIES]>,
    /// Per CPU, ns spent in each softirq vector in the interval.
    pub softirq_per_cpu: Vec<[u64; N_SOFTIRQS]>,
    /// Per CPU, softirqs of each vector charged in the interval.
    pub softirq_runs_per_cpu: Vec<[u64; N_SOFTIRQS]>,
    /// The interval's wall time.
    pub elapsed: Duration,
    /// Events that could not be charged in the interval.
    pub anomalies: Anomalies,
}

impl CpuCostDelta {
    /// ns charged to `cat`, over all CPUs.
    pub fn total(&self, cat: Category) -> u64 {
        self.per_cpu.iter().map(|row| row[cat as usize]).sum()
    }

    /// ns charged to any category on `cpu`. Categories never overlap, so
    /// this is at most the interval's wall time (plus the segments that
    /// began before it and ended inside it: at most one per CPU and end).
    pub fn cpu_sum(&self, cpu: usize) -> u64 {
        self.per_cpu.get(cpu).map_or(0, |row| row.iter().sum())
    }

    /// ns spent in softirq vector `vec`, over all CPUs.
    pub fn softirq_total(&self, vec: usize) -> u64 {
        self.softirq_per_cpu
            .iter()
            .map(|row| row.get(vec).copied().unwrap_or(0))
            .sum()
    }

    /// ns spent in softirqs of any vector on `cpu`.
    pub fn softirq_cpu_sum(&self, cpu: usize) -> u64 {
        self.softirq_per_cpu
            .get(cpu)
            .map_or(0, |row| row.iter().sum())
    }
}

/// Row by row, `a - b` (0 where a counter seems to have gone back, which
/// totals of one accounting never do; a missing row of `b` counts as 0).
fn sub_rows<const N: usize>(a: &[[u64; N]], b: &[[u64; N]]) -> Vec<[u64; N]> {
    a.iter()
        .enumerate()
        .map(|(cpu, row)| {
            let zero = [0; N];
            let old = b.get(cpu).unwrap_or(&zero);
            std::array::from_fn(|i| row[i].saturating_sub(old[i]))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(per_cpu: Vec<[u64; 4]>, taken: Instant, unseen: u64) -> CpuCostReading {
        let softirq_per_cpu = per_cpu
            .iter()
            .map(|r| {
                let mut v = [0; N_SOFTIRQS];
                v[3] = r[0];
                v[1] = 1;
                v
            })
            .collect();
        CpuCostReading {
            softirq_runs_per_cpu: vec![[1; N_SOFTIRQS]; per_cpu.len()],
            per_cpu,
            taken,
            softirq_per_cpu,
            anomalies: Anomalies {
                calls_unseen: unseen,
                ..Anomalies::default()
            },
        }
    }

    #[test]
    fn names_and_indexes() {
        let names: Vec<_> = Category::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(names, ["net_rx", "net_tx", "sock_send", "sock_recv"]);
        for (i, c) in Category::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
        assert_eq!(SOFTIRQ_NAMES[3], "net_rx");
        assert_eq!(SOFTIRQ_NAMES[2], "net_tx");
    }

    #[test]
    fn totals_and_deltas() {
        let t0 = Instant::now();
        let a = reading(vec![[10, 0, 5, 1], [20, 1, 0, 0]], t0, 3);
        let b = reading(
            vec![[15, 0, 9, 1], [50, 1, 2, 7]],
            t0 + Duration::from_millis(5),
            4,
        );
        assert_eq!(b.total(Category::NetRx), 65);
        assert_eq!(b.softirq_total(3), 65);
        assert_eq!(b.softirq_total(1), 2);
        assert_eq!(b.softirq_total(99), 0);
        let d = b.since(&a);
        assert_eq!(d.per_cpu, vec![[5, 0, 4, 0], [30, 0, 2, 7]]);
        assert_eq!(d.elapsed, Duration::from_millis(5));
        assert_eq!(d.total(Category::SockRecv), 7);
        assert_eq!(d.cpu_sum(1), 39);
        assert_eq!(d.cpu_sum(9), 0);
        assert_eq!(d.softirq_total(3), 35);
        assert_eq!(d.softirq_cpu_sum(0), 5);
        assert_eq!(d.anomalies.calls_unseen, 1);
        // Never negative, whatever the order.
        let back = a.since(&b);
        assert!(back.per_cpu.iter().flatten().all(|&v| v == 0));
        assert_eq!(back.elapsed, Duration::ZERO);
    }
}
