//! The CPU cost accounting against independent views (root only), over a
//! fixed UDP flood between two network namespaces, the sender pinned to
//! one CPU (where the receiver's NET_RX runs, inside its sendto) and the
//! receiver to another:
//!   - it sees every softirq the kernel ran: its runs per CPU and vector
//!     equal /proc/softirqs' counts for the same interval;
//!   - its NET_RX seconds on the sender's CPU agree with the softirq time
//!     /proc/stat reports there, within the band derived below;
//!   - no CPU is charged more than the wall time, nor all of them more
//!     than wall time x CPUs;
//!   - both socket categories are charged, and the receiver's recv time
//!     lies between a quarter of its kernel time and all of it.
//!
//! The band. /proc/stat's softirq column is tick-sampled here (no
//! CONFIG_IRQ_TIME_ACCOUNTING): each tick (CONFIG_HZ a second per CPU)
//! adds a whole tick to the column when it lands while the CPU serves
//! softirqs. (1) Sampling: over N ticks with the softirq share p (the
//! accounting's own), the count spreads like a binomial, sd
//! sqrt(N p (1-p)) ticks (about 63 ms over 4 s at 250 Hz and p = 0.44,
//! 3.6% of the NET_RX time); the band allows [`SIGMAS`] of it either way,
//! plus the column's USER_HZ truncation at each end. (2) Where ticks land:
//! /proc/stat counts a tick when `in_serving_softirq()`, from
//! `handle_softirqs` raising the softirq count until it drops it; the
//! accounting charges from the tracepoint before each handler to the one
//! after it. Counting ticks (irq_vectors:local_timer_entry) against the
//! accounting's own state showed: ticks inside its handler windows match
//! its time share (421-448 of 1000 for a share of 0.437, five runs), and
//! /proc/stat counted 36-48 ticks in 1000 more, landing inside the softirq
//! but outside any handler. On this PVM guest ticks arrive 2-50 us late
//! (hrtimer_expire_entry's lateness; none under 2 us), at the points where
//! interrupts get delivered, such as the interrupt enable that opens
//! `handle_softirqs`' loop: /proc/stat read 4-15% above the accounting on
//! a quiet machine (23 runs, about 166 ns per softirq run: the same gap
//! per run at 1000-, 8000- and 30000-byte datagrams). While other
//! workloads shared the CPUs the sign flipped, to between +4% and -17%
//! (17 runs): where interrupts get delivered then depends on what else
//! runs. The band allows [`PLACEMENT`] of the NET_RX time either way for
//! this, and /proc/stat's other vectors on its upper side.
//!
//! The comparison is on the sender's CPU, which is busy throughout: on a
//! CPU that idles, NO_HZ stops the tick and /proc/stat misses the
//! softirqs run from the idle loop (0.01 s against the accounting's
//! 0.17 s on the receiver's CPU in one run). The machine total is printed.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tracer_agent::cpucost::{
    Category, CpuCost, CpuCostDelta, CpuCostReading, N_SOFTIRQS, SOFTIRQ_NAMES,
};
use tracer_e2e::netns::{in_netns, NetnsPair};

/// How long the flood runs before the interval starts (sockets, queues
/// and ksoftirqd in their steady state).
const WARMUP: Duration = Duration::from_millis(500);
/// The measured interval.
const INTERVAL: Duration = Duration::from_secs(4);
/// Datagram payload, bytes: one skb, one softirq run per datagram.
const PAYLOAD: usize = 1000;
const PORT: u16 = 7790;
/// Standard deviations of tick sampling the band allows.
const SIGMAS: f64 = 3.0;
/// Share of the NET_RX time by which where ticks land may move /proc/stat
/// (module doc).
const PLACEMENT: f64 = 0.10;
/// A segment that began before the first reading is charged whole in the
/// interval: a CPU's sum may exceed the wall time by that much. A softirq
/// run is bounded to 2 ms by the kernel; a call's segment ends at every
/// softirq and switch, and this flood's calls are microseconds long.
const STRADDLE: Duration = Duration::from_millis(10);

/// One CPU's softirq and busy columns of /proc/stat, USER_HZ ticks.
#[derive(Debug, Clone, Copy, Default)]
struct StatCpu {
    softirq: u64,
    busy: u64,
}

/// Per CPU (by number) softirq and busy ticks from /proc/stat.
fn proc_stat() -> Vec<StatCpu> {
    let text = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    let mut out = Vec::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let Some(name) = f.next() else { continue };
        let Some(cpu) = name
            .strip_prefix("cpu")
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        let v: Vec<u64> = f.map(|x| x.parse().expect("a /proc/stat count")).collect();
        if out.len() <= cpu {
            out.resize(cpu + 1, StatCpu::default());
        }
        // user nice system idle iowait irq softirq steal ...
        out[cpu] = StatCpu {
            softirq: v[6],
            busy: v[0] + v[1] + v[2] + v[5] + v[6] + v[7],
        };
    }
    out
}

/// Per CPU, handler runs per softirq vector from /proc/softirqs (the
/// kernel counts each one just before its softirq_entry tracepoint).
fn proc_softirqs() -> Vec<[u64; N_SOFTIRQS]> {
    let text = std::fs::read_to_string("/proc/softirqs").expect("/proc/softirqs");
    let rows: Vec<Vec<u64>> = text
        .lines()
        .skip(1)
        .map(|l| {
            l.split_whitespace()
                .skip(1)
                .map(|x| x.parse().expect("a /proc/softirqs count"))
                .collect()
        })
        .collect();
    assert_eq!(
        rows.len(),
        N_SOFTIRQS,
        "/proc/softirqs has another vector set"
    );
    (0..rows[0].len())
        .map(|cpu| std::array::from_fn(|v| rows[v][cpu]))
        .collect()
}

/// USER_HZ, the unit of /proc/stat and /proc/PID/stat.
fn user_hz() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as f64 }
}

/// The kernel's tick rate (CONFIG_HZ), from /proc/config.gz; 100, the
/// lowest, when it cannot be read (fewer ticks: a wider band).
fn kernel_hz() -> f64 {
    std::process::Command::new("zcat")
        .arg("/proc/config.gz")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find_map(|l| l.strip_prefix("CONFIG_HZ=")?.parse().ok())
        })
        .unwrap_or(100.0)
}

/// Kernel-mode CPU time of thread `tid` of this process, seconds. Not
/// tick noise: the kernel scales the tick-sampled split of user and system
/// time to the thread's precise run time (cputime_adjust).
fn thread_stime(tid: i32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).expect("thread stat");
    // After "pid (comm) ": state is field 3, stime field 15.
    let rest = &s[s.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[12].parse::<f64>().expect("stime") / user_hz()
}

fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// Pin the calling thread to `cpu`.
fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes within it
    // (cpu < CPU_SETSIZE); sched_setaffinity only reads it.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(
        rc,
        0,
        "pinning to CPU {cpu}: {}",
        std::io::Error::last_os_error()
    );
}

/// Tells the flood's threads to stop when dropped, also on a panic.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Everything one run measured, and the report the assertions print.
struct Run {
    d: CpuCostDelta,
    /// Per CPU, /proc/stat softirq and busy seconds.
    stat_softirq: Vec<f64>,
    stat_busy: Vec<f64>,
    /// Per CPU and vector, softirq runs the kernel counted.
    kernel_runs: Vec<[u64; N_SOFTIRQS]>,
    /// The receiver thread's kernel time, seconds.
    recv_stime: f64,
    recv_cpu: usize,
    send_cpu: usize,
    sent: u64,
    received: u64,
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

impl Run {
    /// Softirq seconds of every vector on `cpu`, as the accounting has them.
    fn softirq_on(&self, cpu: usize) -> f64 {
        secs(self.d.softirq_cpu_sum(cpu))
    }

    /// NET_RX seconds on `cpu`.
    fn net_rx_on(&self, cpu: usize) -> f64 {
        secs(self.d.per_cpu[cpu][Category::NetRx as usize])
    }

    /// Tick sampling's sd of /proc/stat's softirq seconds on `cpu`.
    fn sampling_sd(&self, cpu: usize, hz: f64) -> f64 {
        let t = self.d.elapsed.as_secs_f64();
        let p = (self.softirq_on(cpu) / t).min(1.0);
        (hz * t * p * (1.0 - p)).sqrt() / hz
    }

    fn report(&self) -> String {
        let d = &self.d;
        let cpus = 0..d.per_cpu.len();
        let mut s = format!(
            "{} datagrams sent (cpu{}), {} received (cpu{}); interval {:.3} s; machine: \
             net_rx {:.3} s, all softirqs {:.3} s, /proc/stat softirq {:.3} s; net_tx {:.3} s; \
             sock_send {:.3} s; sock_recv {:.3} s; receiver stime {:.3} s\n",
            self.sent,
            self.send_cpu,
            self.received,
            self.recv_cpu,
            d.elapsed.as_secs_f64(),
            secs(d.total(Category::NetRx)),
            cpus.clone().map(|c| self.softirq_on(c)).sum::<f64>(),
            self.stat_softirq.iter().sum::<f64>(),
            secs(d.total(Category::NetTx)),
            secs(d.total(Category::SockSend)),
            secs(d.total(Category::SockRecv)),
            self.recv_stime,
        );
        for cpu in cpus {
            let row = d.per_cpu[cpu];
            let vectors: Vec<String> = SOFTIRQ_NAMES
                .iter()
                .zip(&d.softirq_per_cpu[cpu])
                .filter(|(_, &ns)| ns > 0)
                .map(|(n, &ns)| format!("{n} {:.4}", secs(ns)))
                .collect();
            s += &format!(
                "  cpu{cpu}: net_rx {:.3} net_tx {:.3} send {:.3} recv {:.3} (sum {:.3}); \
                 /proc/stat softirq {:.3} busy {:.3}; vectors: {}; runs {:?}, kernel's {:?}\n",
                secs(row[0]),
                secs(row[1]),
                secs(row[2]),
                secs(row[3]),
                secs(d.cpu_sum(cpu)),
                self.stat_softirq.get(cpu).copied().unwrap_or(0.0),
                self.stat_busy.get(cpu).copied().unwrap_or(0.0),
                vectors.join(", "),
                d.softirq_runs_per_cpu[cpu],
                self.kernel_runs.get(cpu),
            );
        }
        s + &format!("  anomalies: {:?}", d.anomalies)
    }
}

/// Flood from a to b for WARMUP + INTERVAL with the accounting attached;
/// every view of the interval.
fn flood(pair: &NetnsPair, recv_cpu: usize, send_cpu: usize) -> Run {
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_guard = StopOnDrop(Arc::clone(&stop));
    let dest = SocketAddr::from((pair.addr_b, PORT));
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let receiver = {
        let stop = Arc::clone(&stop);
        in_netns(NetnsPair::path(&pair.b), "cpucost-rx", move || {
            pin_to(recv_cpu);
            let sock = UdpSocket::bind(("0.0.0.0", PORT)).expect("bind receiver");
            // A timeout, so that it sees `stop` once the flood ends.
            sock.set_read_timeout(Some(Duration::from_millis(100)))
                .expect("timeout");
            tid_tx.send(gettid()).expect("main thread waits");
            let mut buf = [0u8; 2048];
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if sock.recv(&mut buf).is_ok() {
                    n += 1;
                }
            }
            n
        })
        .expect("receiver thread")
    };
    let recv_tid = tid_rx.recv().expect("receiver ready");
    // After the receiver blocks in recvfrom: its first call was entered
    // before the attach (counted as unseen, not charged).
    let cost = CpuCost::start().expect("starting the CPU cost accounting");
    let sender = {
        let stop = Arc::clone(&stop);
        in_netns(NetnsPair::path(&pair.a), "cpucost-tx", move || {
            pin_to(send_cpu);
            let sock = UdpSocket::bind(("0.0.0.0", 0)).expect("bind sender");
            sock.connect(dest).expect("connect");
            let buf = [0x5au8; PAYLOAD];
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // ENOBUFS or ECONNREFUSED under load are part of a flood.
                if sock.send(&buf).is_ok() {
                    n += 1;
                }
            }
            n
        })
        .expect("sender thread")
    };

    std::thread::sleep(WARMUP);
    // Every view read back to back, in mirrored order at the two ends, so
    // that the kernel's counts bracket the accounting's.
    let stime0 = thread_stime(recv_tid);
    let runs0 = proc_softirqs();
    let stat0 = proc_stat();
    let cc0: CpuCostReading = cost.read().expect("reading the accounting");
    std::thread::sleep(INTERVAL);
    let cc1 = cost.read().expect("reading the accounting");
    let stat1 = proc_stat();
    let runs1 = proc_softirqs();
    let stime1 = thread_stime(recv_tid);
    stop.store(true, Ordering::Relaxed);
    let sent = sender.join().expect("sender");
    let received = receiver.join().expect("receiver");

    let hz = user_hz();
    let diff = |f: fn(&StatCpu) -> u64| -> Vec<f64> {
        stat1
            .iter()
            .zip(&stat0)
            .map(|(b, a)| (f(b) - f(a)) as f64 / hz)
            .collect()
    };
    Run {
        d: cc1.since(&cc0),
        stat_softirq: diff(|c| c.softirq),
        stat_busy: diff(|c| c.busy),
        kernel_runs: runs1
            .iter()
            .zip(&runs0)
            .map(|(b, a)| std::array::from_fn(|v| b[v] - a[v]))
            .collect(),
        recv_stime: stime1 - stime0,
        recv_cpu,
        send_cpu,
        sent,
        received,
    }
}

#[test]
fn net_rx_agrees_with_proc_stat_over_a_udp_flood() {
    if !tracer_e2e::skip::require_root() {
        return;
    }
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    if ncpu < 2 {
        tracer_e2e::skip::skip("needs two CPUs: the sender's own, and the receiver's");
        return;
    }
    let pair = NetnsPair::create("ntcpu", 221).expect("creating namespaces");
    let run = flood(&pair, 0, 1);
    drop(pair);
    let report = run.report();
    eprintln!("{report}");
    let d = &run.d;

    // Every softirq the kernel ran, the accounting saw. The kernel's
    // counts bracket the interval (read before and after the accounting's),
    // so they may be ahead by the runs between two reads; the accounting
    // counts a run at its exit, the kernel at its entry, so a run open at
    // the first read may be the accounting's alone.
    for (cpu, kernel) in run.kernel_runs.iter().enumerate() {
        let seen = d.softirq_runs_per_cpu[cpu];
        for v in 0..N_SOFTIRQS {
            let skew = 50 + kernel[v] / 200;
            assert!(
                seen[v] <= kernel[v] + 1 && kernel[v] <= seen[v] + skew,
                "cpu{cpu} {}: {} runs seen, the kernel counted {}:\n{report}",
                SOFTIRQ_NAMES[v],
                seen[v],
                kernel[v]
            );
        }
    }

    // NET_RX against /proc/stat on the sender's CPU, where it runs.
    let cpu = run.send_cpu;
    let net_rx = run.net_rx_on(cpu);
    let stat = run.stat_softirq[cpu];
    let other_vectors = run.softirq_on(cpu) - net_rx;
    assert!(
        net_rx > 0.2 * INTERVAL.as_secs_f64() && net_rx >= 0.95 * run.softirq_on(cpu),
        "the flood's NET_RX should be a good share of its CPU and most of its softirq time:\n{report}"
    );
    let sampling = SIGMAS * run.sampling_sd(cpu, kernel_hz()) + 2.0 / user_hz();
    let placement = PLACEMENT * net_rx;
    let (low, high) = (
        -(sampling + placement),
        other_vectors + sampling + placement,
    );
    let gap = stat - net_rx;
    eprintln!(
        "cpu{cpu}: /proc/stat - net_rx = {gap:.4} s, allowed [{low:.4}, {high:.4}] \
         (sampling {sampling:.4}, placement {placement:.4}, other vectors {other_vectors:.4}); \
         net_rx/stat {:.3}",
        net_rx / stat
    );
    assert!(
        (low..=high).contains(&gap),
        "cpu{cpu}: /proc/stat softirq {stat:.4} s - net_rx {net_rx:.4} s = {gap:.4} s, outside \
         [{low:.4}, {high:.4}]:\n{report}"
    );

    // No CPU is charged more than the wall time, nor all of them more
    // than wall time x CPUs.
    let wall = d.elapsed + STRADDLE;
    for c in 0..d.per_cpu.len() {
        assert!(
            Duration::from_nanos(d.cpu_sum(c)) <= wall,
            "cpu{c} charged {} ns in {:?}:\n{report}",
            d.cpu_sum(c),
            d.elapsed
        );
    }
    let all: u64 = (0..d.per_cpu.len()).map(|c| d.cpu_sum(c)).sum();
    assert!(
        Duration::from_nanos(all) <= wall * ncpu as u32,
        "{all} ns charged over {ncpu} CPUs in {:?}:\n{report}",
        d.elapsed
    );

    // Both socket categories; the receiver's recv time on its CPU. Most of
    // its kernel time is in recvfrom, the rest syscall entry and exit (on
    // the traced slow path) around the hooks: runs here charged 59-75% of
    // it to recv on a quiet machine, 36-50% while other workloads shared
    // the receiver's CPU (their cache and TLB footprint makes each entry
    // and exit dearer). A quarter is the floor; all of it, plus the
    // interval's 5% for other tasks' recv calls on that CPU, the ceiling:
    // a call charged beyond its own running time would break it.
    assert!(
        d.per_cpu[cpu][Category::SockSend as usize] > 0 && d.total(Category::SockRecv) > 0,
        "{report}"
    );
    let recv_here = secs(d.per_cpu[run.recv_cpu][Category::SockRecv as usize]);
    let ceiling = run.recv_stime + 0.05 * INTERVAL.as_secs_f64();
    assert!(
        run.recv_stime > 0.1 && recv_here >= 0.25 * run.recv_stime && recv_here <= ceiling,
        "recv charged {recv_here:.3} s on the receiver's CPU, its kernel time {:.3} s:\n{report}",
        run.recv_stime
    );

    // The bookkeeping never lost track during the flood. (Unreported
    // switches are the kernel's doing: counted, not failed.)
    let a = &d.anomalies;
    assert_eq!(
        (
            a.calls_reopened,
            a.softirqs_unmatched,
            a.stash_lost,
            a.switch_in_softirq
        ),
        (0, 0, 0, 0),
        "{report}"
    );
}
