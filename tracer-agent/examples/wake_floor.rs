//! The floor under an idle agent's CPU figure: a thread that does nothing
//! but wake up, `--rate` times a second, until it is interrupted. Each
//! wakeup arms a timer, sleeps, is woken and switched in, which on a VM
//! costs the sleeper tens of µs of run time by itself (the timer's
//! programming and the switch are charged to it). bench/idle-agent.sh runs
//! it at the wakeup rate it measured for the agent and reads its run time
//! the same way (schedstat), so the agent's idle CPU is read against what
//! waking that often costs on the same machine in the same run.
//!
//!     wake_floor --rate 14

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;

/// A process that only wakes up.
#[derive(Debug, Parser)]
struct Args {
    /// Wakeups per second, evenly spaced.
    #[arg(long, default_value_t = 10.0)]
    rate: f64,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(
        args.rate.is_finite() && args.rate > 0.0 && args.rate <= 100_000.0,
        "--rate must be a number of wakeups per second in (0, 100000]"
    );
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: installing a handler that only stores to an atomic.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
    let period = Duration::from_secs_f64(1.0 / args.rate);
    let mut next = Instant::now();
    let mut wakeups = 0u64;
    while !STOP.load(Ordering::Relaxed) {
        next += period;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        wakeups += 1;
    }
    println!("{{\"wakeups\": {wakeups}}}");
    Ok(())
}
