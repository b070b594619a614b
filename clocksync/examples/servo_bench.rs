//! Benchmark 8(a): both servos against the simulated PHC (100 ppm initial
//! frequency error, 50 ns read jitter, 1 s updates), in simulated time.
//! Prints time until |true error| stays < 100 ns, then RMS and max.
//! Run: `cargo run --release -p clocksync --example servo_bench` (or bench/clock-servo.sh).

use clocksync::harness::{simulate, summarize};
use clocksync::sim::SimConfig;
use clocksync::{ServoConfig, ServoKind};

fn main() {
    let updates = 3600; // one simulated hour
    println!(
        "{:<8} {:>5} {:>10} {:>6} {:>11} {:>9} {:>9}",
        "servo", "reads", "wander", "seeds", "settle_s", "rms_ns", "max_ns"
    );
    for wander_ppb in [1.0, 10.0] {
        for reads in [5usize, 1] {
            for kind in [ServoKind::Pi, ServoKind::LinReg] {
                let mut settle = Vec::new();
                let mut rms = Vec::new();
                let mut max = 0u64;
                let seeds = 10u64;
                for seed in 1..=seeds {
                    let sim = SimConfig {
                        freq_error_ppm: 100.0,
                        read_jitter_ns: 50,
                        wander_ppb,
                        reads,
                        seed,
                        ..Default::default()
                    };
                    let steps = simulate(sim, kind, ServoConfig::default(), updates);
                    // Settling: first time after which 10 consecutive updates are < 100 ns.
                    let t = steps
                        .windows(10)
                        .find(|w| w.iter().all(|s| s.true_error_ns.abs() < 100))
                        .map(|w| w[0].t_s)
                        .unwrap_or(f64::NAN);
                    settle.push(t);
                    let tail: Vec<_> = steps.iter().copied().filter(|s| s.t_s >= 10.0).collect();
                    let s = summarize(&tail, u64::MAX);
                    rms.push(s.rms_ns);
                    max = max.max(s.max_ns);
                }
                let worst_settle = settle.iter().copied().fold(0.0, f64::max);
                let mean_rms = rms.iter().sum::<f64>() / rms.len() as f64;
                println!(
                    "{:<8} {:>5} {:>8.0}pb {:>6} {:>11.1} {:>9.1} {:>9}",
                    format!("{kind:?}").to_lowercase(),
                    reads,
                    wander_ppb,
                    seeds,
                    worst_settle,
                    mean_rms,
                    max
                );
            }
        }
    }
    println!("settle_s: worst over seeds; rms_ns: mean over seeds of the RMS after t = 10 s;");
    println!("max_ns: worst |error| after t = 10 s over all seeds. Error = global - true PHC,");
    println!("evaluated at each update instant under the mapping in force before it.");
}
