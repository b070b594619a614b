//! Benchmark 8(b): the two-way exchange between two network namespaces
//! (one kernel, one clock: the true offset is 0, every measured offset is
//! error), kernel-stamped vs user-space-stamped, interleaved in one run.
//! `exchange_bench responder --bind IP --port P` serves a kernel responder on
//! P and a user-space one on P+1 (responder axis = its CLOCK_MONOTONIC);
//! `exchange_bench client --server IP --port P --samples N --label L` prints
//! p50/p99/max |error| of min-delay samples for both and their ratio.
//! Driven by bench/clock-exchange.sh.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use clocksync::exchange::{spawn_responder, ExchangeClient, ExchangeConfig, StampMode};
use clocksync::{GlobalClock, ReferenceClock};

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let ip = arg(&args, "--bind", &arg(&args, "--server", "127.0.0.1"));
    let port: u16 = arg(&args, "--port", "31900").parse()?;
    match args.get(1).map(String::as_str) {
        Some("responder") => {
            let k = UdpSocket::bind(format!("{ip}:{port}"))?;
            let u = UdpSocket::bind(format!("{ip}:{}", port + 1))?;
            let clock = GlobalClock::fixed(0);
            // Serve until killed (dropping the workers would stop them).
            let _kernel = spawn_responder(k, clock.clone(), StampMode::Kernel)?;
            let _user = spawn_responder(u, clock, StampMode::User)?;
            loop {
                std::thread::park();
            }
        }
        Some("client") => {
            let samples: usize = arg(&args, "--samples", "300").parse()?;
            let burst: usize = arg(&args, "--burst", "16").parse()?;
            let gap_us: u64 = arg(&args, "--gap-us", "1000").parse()?;
            let label = arg(&args, "--label", "run");
            let server: SocketAddr = format!("{ip}:{port}").parse()?;
            let user_server: SocketAddr = format!("{ip}:{}", port + 1).parse()?;
            let warmup = arg(&args, "--warmup", "1") == "1";
            let cfg = |mode| ExchangeConfig {
                warmup,
                burst,
                burst_gap: Duration::from_micros(gap_us),
                mode,
                ..Default::default()
            };
            let mut kc = ExchangeClient::connect(server, cfg(StampMode::Kernel))?;
            let mut uc = ExchangeClient::connect(user_server, cfg(StampMode::User))?;
            let (mut ke, mut ue, mut kd, mut ud) = (vec![], vec![], vec![], vec![]);
            let mut raw_k = vec![];
            let mut signed_k: Vec<i64> = vec![];
            for _ in 0..samples {
                if let Ok(s) = kc.sample() {
                    ke.push(s.ref_minus_mono_ns().unsigned_abs());
                    signed_k.push(s.ref_minus_mono_ns());
                    kd.push(s.delay_ns);
                    raw_k.extend(kc.last_burst().iter().map(|x| x.offset_ns().unsigned_abs()));
                }
                if let Ok(s) = uc.sample() {
                    ue.push(s.ref_minus_mono_ns().unsigned_abs());
                    ud.push(s.delay_ns);
                }
            }
            signed_k.sort_unstable();
            let mean_k = signed_k.iter().sum::<i64>() as f64 / signed_k.len().max(1) as f64;
            let med_k = signed_k.get(signed_k.len() / 2).copied().unwrap_or(0);
            println!("{label} kernel signed offset: median {med_k} ns, mean {mean_k:.0} ns (a bias, not noise, if close to p50 |error|)");
            for v in [&mut ke, &mut ue, &mut kd, &mut ud, &mut raw_k] {
                v.sort_unstable();
            }
            println!(
                "{:<8} {:<7} {:>7} {:>8} {:>8} {:>9} {:>10}",
                "load", "stamps", "samples", "p50_ns", "p99_ns", "max_ns", "delay_p50"
            );
            for (name, e, d) in [("kernel", &ke, &kd), ("user", &ue, &ud)] {
                println!(
                    "{:<8} {:<7} {:>7} {:>8} {:>8} {:>9} {:>10}",
                    label,
                    name,
                    e.len(),
                    pct(e, 0.5),
                    pct(e, 0.99),
                    e.last().copied().unwrap_or(0),
                    pct(d, 0.5)
                );
            }
            println!(
                "{:<8} ratio user/kernel: p50 {:.1}x  p99 {:.1}x   (kernel raw exchanges, no filter: p50 {} p99 {} ns; timeouts k={} u={})",
                label,
                pct(&ue, 0.5) as f64 / pct(&ke, 0.5).max(1) as f64,
                pct(&ue, 0.99) as f64 / pct(&ke, 0.99).max(1) as f64,
                pct(&raw_k, 0.5),
                pct(&raw_k, 0.99),
                kc.stats().timeouts,
                uc.stats().timeouts
            );
        }
        _ => {
            eprintln!("usage: exchange_bench responder --bind IP [--port P] | client --server IP [--port P] [--samples N] [--burst B] [--gap-us G] [--label L]");
            std::process::exit(2);
        }
    }
    Ok(())
}
