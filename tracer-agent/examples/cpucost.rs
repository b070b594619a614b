//! The CPU cost accounting on its own (`tracer_agent::cpucost`): starts
//! it, prints one JSON line per interval with what each CPU spent per
//! category and per softirq vector in that interval, the events it could
//! not charge and each program's bpf_stats totals (run_time_ns, run_cnt;
//! zero unless kernel.bpf_stats_enabled=1), and stops on SIGINT or
//! SIGTERM. bench/cpucost-overhead.sh runs it.
//!
//!     cargo run --release -p tracer-agent --example cpucost -- [--interval-ms 1000] [--exclude-self]

use std::time::Duration;

use clap::Parser;
use serde_json::{json, Value};
use tracer_agent::cpucost::{Category, CpuCost, CpuCostConfig, CpuCostDelta, SOFTIRQ_NAMES};

/// Per-CPU network CPU cost, one JSON line per interval.
#[derive(Debug, Parser)]
struct Args {
    /// Milliseconds between lines.
    #[arg(long, default_value = "1000", value_parser = tracer_cli::int(10u64, 3_600_000))]
    interval_ms: u64,
    /// Do not count this process's own socket calls (it makes none but
    /// reading its maps; the agent uses this).
    #[arg(long)]
    exclude_self: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // Blocked before anything starts, so that the signal is taken by the
    // wait below and never ends the process before the programs detach.
    let signals = block_stop_signals()?;
    let cfg = CpuCostConfig {
        exclude_pid: args.exclude_self.then(std::process::id),
        ..CpuCostConfig::default()
    };
    let cost = CpuCost::start_with(&cfg)?;
    let ids: Vec<Value> = cost
        .programs()
        .into_iter()
        .zip(CpuCost::program_names())
        .map(|(fd, (name, tp))| {
            let id = tracer_agent::stats::bpf_prog_info(fd).map_or(0, |i| i.id);
            json!({"name": name, "tracepoint": tp, "id": id})
        })
        .collect();
    println!("{}", json!({"started": true, "programs": ids}));
    let mut last = cost.read()?;
    let first = last.clone();
    loop {
        let stop = wait_signal(&signals, Duration::from_millis(args.interval_ms))?;
        let now = cost.read()?;
        println!("{}", line(&now.since(&last), &cost, false));
        last = now;
        if stop {
            break;
        }
    }
    println!("{}", line(&last.since(&first), &cost, true));
    Ok(())
}

/// One interval (or, `total`, the whole run) as JSON.
fn line(d: &CpuCostDelta, cost: &CpuCost, total: bool) -> Value {
    let per_cpu: Vec<Value> = d
        .per_cpu
        .iter()
        .zip(&d.softirq_per_cpu)
        .map(|(row, sirq)| {
            let mut o = serde_json::Map::new();
            for c in Category::ALL {
                o.insert(c.name().into(), row[c as usize].into());
            }
            o.insert("softirq_all".into(), sirq.iter().sum::<u64>().into());
            Value::Object(o)
        })
        .collect();
    let softirq: serde_json::Map<String, Value> = SOFTIRQ_NAMES
        .iter()
        .enumerate()
        .map(|(v, n)| ((*n).to_owned(), d.softirq_total(v).into()))
        .collect();
    let programs: Vec<Value> = cost
        .programs()
        .into_iter()
        .zip(CpuCost::program_names())
        .map(|(fd, (name, _))| {
            let i = tracer_agent::stats::bpf_prog_info(fd);
            json!({
                "name": name,
                "run_time_ns": i.map_or(0, |i| i.run_time_ns),
                "run_cnt": i.map_or(0, |i| i.run_cnt),
            })
        })
        .collect();
    let a = &d.anomalies;
    json!({
        "total": total,
        "elapsed_ns": d.elapsed.as_nanos() as u64,
        "per_cpu_ns": per_cpu,
        "softirq_ns": softirq,
        "anomalies": {
            "calls_unseen": a.calls_unseen, "calls_reopened": a.calls_reopened,
            "softirqs_unmatched": a.softirqs_unmatched, "nested": a.nested,
            "stash_lost": a.stash_lost, "switch_in_softirq": a.switch_in_softirq,
            "untraced_switches": a.untraced_switches,
        },
        "programs": programs,
    })
}

/// Block SIGINT and SIGTERM in this thread (the only one): they wait for
/// [`wait_signal`].
fn block_stop_signals() -> std::io::Result<libc::sigset_t> {
    // SAFETY: a zeroed sigset_t is a valid argument for sigemptyset, which
    // initialises it; sigaddset and sigprocmask get valid pointers.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        if libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(set)
    }
}

/// Wait up to `timeout` for one of `set`; true if one came.
fn wait_signal(set: &libc::sigset_t, timeout: Duration) -> std::io::Result<bool> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: set and ts are valid for the call; siginfo may be null.
    let rc = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
    if rc >= 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(false),
        _ => Err(e),
    }
}
