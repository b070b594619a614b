//! `clocksync`: watch the servo discipline the global clock to a source,
//! printing one line per update like `phc2sys -m` (or JSON with `--json`).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use clocksync::{
    Discipline, ErrorInjection, GlobalClock, Servo, ServoConfig, ServoKind, SourceOptions,
    SourceSpec,
};

/// nettrace clock sync: discipline a software global clock to a source and
/// print each update.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// system|tai|realtime|monotonic_raw|phc:/dev/ptpN|iface:NAME|sim[:k=v,..]|sink:IP:PORT
    #[arg(long, default_value = "tai")]
    source: SourceSpec,
    /// pi|linreg
    #[arg(long, default_value = "pi")]
    servo: ServoKind,
    /// Update interval, seconds.
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
    /// Number of updates (0 = until killed).
    #[arg(long, default_value_t = 0)]
    count: u64,
    /// One JSON object per line instead of text.
    #[arg(long)]
    json: bool,
    /// Readings per sample (0 = source default).
    #[arg(long, default_value_t = 0)]
    reads: usize,
    /// Step on the first update above this offset, ns (0 = never).
    #[arg(long, default_value_t = ServoConfig::default().first_step_threshold_ns)]
    first_step_threshold_ns: i64,
    /// Step whenever the offset exceeds this, ns (0 = never).
    #[arg(long, default_value_t = 0)]
    step_threshold_ns: i64,
    /// Use linuxptp's software-timestamping PI gains.
    #[arg(long)]
    software_gains: bool,
    /// Test only: pretend CLOCK_REALTIME/TAI are off by this much, ns.
    #[arg(long, default_value_t = 0)]
    inject_clock_offset_ns: i64,
    /// Test only: and drift by this much, ppm.
    #[arg(long, default_value_t = 0.0)]
    inject_clock_drift_ppm: f64,
    /// With `--source sink:IP:PORT`: use this interface's NIC hardware
    /// stamps instead of kernel software stamps.
    #[arg(long, value_name = "IFACE")]
    hw_iface: Option<String>,
    /// With `--source sink:IP:PORT`: the deployment's shared key file (the
    /// one the sink was started with). Requests are tagged with it and only
    /// answers tagged with it are taken. The file must be private to its
    /// owner (chmod 600).
    #[arg(long, value_name = "PATH")]
    key_file: Option<std::path::PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("clocksync: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> anyhow::Result<()> {
    if !(args.interval > 0.0 && args.interval.is_finite()) {
        bail!("--interval must be a positive number of seconds");
    }
    let injection =
        ErrorInjection::nonzero(args.inject_clock_offset_ns, args.inject_clock_drift_ppm)?;
    let auth = match &args.key_file {
        Some(path) => Some(
            tracer_auth::SharedKey::load(path)
                .context("--key-file")?
                .mac_key(tracer_auth::Purpose::ClockExchange),
        ),
        None => None,
    };
    let source = args
        .source
        .open(&SourceOptions {
            injection,
            reads: args.reads,
            hw_iface: args.hw_iface.clone(),
            auth,
        })
        .with_context(|| format!("opening clock source {}", args.source))?;
    let cfg = ServoConfig {
        interval_s: args.interval,
        first_step_threshold_ns: args.first_step_threshold_ns,
        step_threshold_ns: args.step_threshold_ns,
        hardware_timestamps: source.hardware_stamped() && !args.software_gains,
        ..Default::default()
    };
    let name = source.name();
    let mut d = Discipline::new(source, Servo::new(args.servo, cfg), GlobalClock::default());
    let interval = Duration::from_secs_f64(args.interval);
    let mut n = 0u64;
    while args.count == 0 || n < args.count {
        match d.tick() {
            Ok(r) if args.json => {
                let mut v = serde_json::to_value(r)?;
                v["source"] = name.clone().into();
                v["servo"] = d.servo().name().into();
                println!("{v}");
            }
            Ok(r) => println!(
                "clocksync[{:.3}]: {} {}",
                r.mono_ns as f64 / 1e9,
                name,
                r.phc2sys_line()
            ),
            Err(e) => eprintln!("clocksync: sample failed: {:#}", anyhow::Error::new(e)),
        }
        n += 1;
        if args.count == 0 || n < args.count {
            d.wait(interval);
        }
    }
    Ok(())
}
