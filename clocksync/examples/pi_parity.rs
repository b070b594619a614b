//! The Rust half of the side-by-side check against linuxptp's PI servo:
//! runs `clocksync::harness::parity_loop` and prints one line per update
//! in the format of `bench/ref/pi_parity.c` (the C half, built against
//! linuxptp's own `servo.c` + `pi.c`):
//! `k offset state ppb | <phc2sys -m line>`, where `ppb` is linuxptp's
//! servo output (the negated correction). Same `key=value` arguments as
//! the C half; `bench/clock-servo.sh` runs both and compares.
//! Run: `cargo run -p clocksync --example pi_parity -- interval=0.25 drift_ppb=50000`.

use clocksync::harness::{parity_loop, ParityPlant};
use clocksync::{PiGains, ServoConfig, ServoKind};

fn main() -> anyhow::Result<()> {
    let mut plant = ParityPlant::default();
    let mut cfg = ServoConfig {
        pi_gains: PiGains::PHC2SYS,
        // linuxptp's defaults where this crate's differ.
        stable_offset_threshold_ns: 0,
        ..Default::default()
    };
    // The C half's clock limit: this crate's system clock limit at USER_HZ 100.
    cfg.clock_max_freq_ppb = Some(100_000_000.0);
    let (mut n, mut delay, mut event_at, mut event_ns) = (20usize, 0u64, None, 0i64);
    for arg in std::env::args().skip(1) {
        let (k, v) = arg
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("expected key=value, got {arg:?}"))?;
        let f = || -> anyhow::Result<f64> { Ok(v.parse::<f64>()?) };
        let secs_to_ns = |s: f64| (s * 1e9).round() as i64;
        match k {
            "interval" => cfg.interval_s = f()?,
            "kp" => cfg.pi_gains.kp_const = f()?,
            "ki" => cfg.pi_gains.ki_const = f()?,
            "step" => cfg.step_threshold_ns = secs_to_ns(f()?),
            "first_step" => cfg.first_step_threshold_ns = secs_to_ns(f()?),
            "max_frequency" => cfg.max_frequency_ppb = f()?,
            "max_ppb" => cfg.clock_max_freq_ppb = Some(f()?),
            "offset_threshold" => cfg.stable_offset_threshold_ns = v.parse()?,
            "num_offset_values" => cfg.num_offset_values = v.parse()?,
            "sw_ts" => cfg.hardware_timestamps = v == "0",
            "n" => n = v.parse()?,
            "drift_ppb" => plant.drift_ppb = f()?,
            "phase_ns" => plant.phase_ns = f()?,
            "noise_ns" => plant.noise_ns = v.parse()?,
            "seed" => plant.seed = v.parse()?,
            "event_at" => event_at = Some(v.parse()?),
            "event_ns" => event_ns = v.parse()?,
            "delay" => delay = v.parse()?,
            _ => anyhow::bail!("unknown key {k:?}"),
        }
    }
    plant.event = event_at.map(|at| (at, event_ns));
    for (k, mut r) in parity_loop(plant, ServoKind::Pi, cfg, n)
        .into_iter()
        .enumerate()
    {
        r.delay_ns = delay;
        println!(
            "{k} {} {} {:.9} | {}",
            r.offset_ns,
            r.state.code(),
            -r.freq_ppb,
            r.phc2sys_line()
        );
    }
    Ok(())
}
