//! `clocksync`: watch the servo discipline the global clock to a source,
//! printing one line per update like `phc2sys -m` (or JSON with `--json`).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{CommandFactory, Parser};
use clocksync::servo::algorithm::MAX_FREQUENCY_PPB;
use clocksync::{
    Discipline, ErrorInjection, FrequencyLimit, GlobalClock, MaxChange, OscillatorSpec, PiGains,
    SanityConfig, Servo, ServoConfig, ServoKind, SourceOptions, SourceSpec, MAX_INJECTED_DRIFT_PPM,
    MAX_INJECTED_OFFSET_NS,
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
    /// Update interval, seconds (phc2sys's -R is its inverse).
    /// [range: 0.01..=3600 s]
    #[arg(long, default_value = "1", value_name = "SECS", value_parser = tracer_cli::secs(0.01, 3600.0))]
    interval: Duration,
    /// Where the PI gains come from. `phc2sys`: fixed kp 0.7 / ki 0.3 at any
    /// interval (capped at 1/interval and 2/interval, where the loop would
    /// turn unstable), so each update does what phc2sys's does. `ptp4l`:
    /// derived from the interval (kp = 0.7·interval^-0.3 ≤ 0.7/interval,
    /// ki = 0.3·interval^0.4 ≤ 0.3/interval). Identical at 1 s.
    #[arg(long, default_value = "phc2sys", value_name = "phc2sys|ptp4l")]
    pi_gains: PiGains,
    /// Proportional constant, as phc2sys -P (default: from --pi-gains;
    /// 0 = derive it from the interval); the loop caps it at 1/interval,
    /// as phc2sys does. [range: 0..=100]
    #[arg(long, value_name = "KP", value_parser = tracer_cli::real(0.0, 100.0))]
    pi_kp: Option<f64>,
    /// Integral constant, as phc2sys -I (default: from --pi-gains;
    /// 0 = derive it from the interval); the loop caps it at 2/interval,
    /// as phc2sys does. [range: 0..=100]
    #[arg(long, value_name = "KI", value_parser = tracer_cli::real(0.0, 100.0))]
    pi_ki: Option<f64>,
    /// Number of updates; 0 runs until killed. [range: 0..=1000000000]
    #[arg(long, default_value = "0", value_name = "N", value_parser = tracer_cli::int(0u64, 1_000_000_000))]
    count: u64,
    /// One JSON object per line instead of text.
    #[arg(long)]
    json: bool,
    /// Readings per sample (0 = the source's default: 5 readings, or a
    /// burst of 16 exchanges for `sink:`). [range: 0..=1000]
    #[arg(long, default_value = "0", value_name = "N", value_parser = tracer_cli::int(0usize, 1000))]
    reads: usize,
    /// Step on the first update above this offset, ns (0 = never).
    /// [range: 0..=1000000000000]
    #[arg(long, default_value_t = ServoConfig::default().first_step_threshold_ns, value_name = "NS",
        value_parser = tracer_cli::int(0i64, MAX_STEP_THRESHOLD_NS))]
    first_step_threshold_ns: i64,
    /// Above this offset after the first estimate the servo starts over
    /// (UNLOCKED, re-estimates the frequency, then steps), as phc2sys -S;
    /// ns (0 = never). [range: 0..=1000000000000]
    #[arg(long, default_value = "0", value_name = "NS", value_parser = tracer_cli::int(0i64, MAX_STEP_THRESHOLD_NS))]
    step_threshold_ns: i64,
    /// Caps the frequency correction, ppb (linuxptp's max_frequency; 0 = no
    /// cap). The clamp is the reference clock's own limit (a PHC's max_adj,
    /// the kernel's limit for system clocks and the exchange) below this cap.
    /// [range: 0..=900000000]
    #[arg(long, default_value_t = MAX_FREQUENCY_PPB, value_name = "PPB",
        value_parser = tracer_cli::real(0.0, MAX_FREQUENCY_PPB))]
    max_frequency_ppb: f64,
    /// Interval-derived PI gains use ptp4l's software-timestamping scales
    /// (kp 0.1, ki 0.001 at 1 s) instead of the hardware ones.
    #[arg(long)]
    software_gains: bool,
    /// The sanity check: once locked, a sample beyond max(10 x the recent
    /// residual, 20 µs) is held (HOLDOVER, a warning on stderr); a move
    /// that stays put for 4 updates is followed (UNLOCKED, JUMP) while the
    /// moves followed add up to at most NS. `unlimited` follows any; 0
    /// none. See docs/clock-model.md.
    /// [range: 0..=1000000000000 ns; or `unlimited`]
    #[arg(long, default_value_t = MaxChange::default(), value_name = "NS")]
    servo_max_change: MaxChange,
    /// Once the frequency is learned (16 s after lock) the correction stays
    /// within ± PPB of it (HOLDOVER beyond); 0: only the clock's limit.
    /// [range: 0..=1000000]
    #[arg(long, default_value_t = clocksync::servo::sanity::MAX_FREQ_CHANGE_PPB, value_name = "PPB",
        value_parser = tracer_cli::real(0.0, clocksync::servo::sanity::MAX_FREQ_CHANGE_LIMIT_PPB))]
    servo_max_freq_change: f64,
    /// No sanity check: follow every sample, as phc2sys does.
    #[arg(long, conflicts_with_all = ["servo_max_change", "servo_max_freq_change"])]
    no_servo_sanity: bool,
    /// Test only: pretend CLOCK_REALTIME/TAI are off by this much, ns.
    /// [range: -86400000000000..=86400000000000] (one day either way)
    #[arg(long, default_value = "0", value_name = "NS", allow_hyphen_values = true,
        value_parser = tracer_cli::int(-MAX_INJECTED_OFFSET_NS, MAX_INJECTED_OFFSET_NS))]
    inject_clock_offset_ns: i64,
    /// Test only: and drift by this much, ppm. [range: -1000..=1000]
    #[arg(long, default_value = "0", value_name = "PPM", allow_hyphen_values = true,
        value_parser = tracer_cli::real(-MAX_INJECTED_DRIFT_PPM, MAX_INJECTED_DRIFT_PPM))]
    inject_clock_drift_ppm: f64,
    /// Test only: read every clock as a machine on a simulated oscillator
    /// would (offset_ns,drift_ppm[,wander_ppb_per_s[,noise_ns[,seed]]]; see
    /// tracer-agent --help): the servo must learn it.
    #[arg(long, value_name = "SPEC", allow_hyphen_values = true)]
    simulate_oscillator: Option<OscillatorSpec>,
    /// With `--source sink:IP:PORT`: use this interface's NIC hardware
    /// stamps instead of kernel software stamps.
    #[arg(long, value_name = "IFACE", value_parser = tracer_cli::iface_name)]
    hw_iface: Option<String>,
    /// With `--source sink:IP:PORT`: the deployment's shared key file (the
    /// one the sink was started with). Requests are tagged with it and only
    /// answers tagged with it are taken. The file must be private to its
    /// owner (chmod 600).
    #[arg(long, value_name = "PATH")]
    key_file: Option<std::path::PathBuf>,
}

/// Largest step threshold, ns (1000 s: past it a step would never happen).
const MAX_STEP_THRESHOLD_NS: i64 = 1_000_000_000_000;

fn main() -> ExitCode {
    // The servo's warnings (a reference it does not follow) go to stderr.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    // Before the binary's own parser: `--generate man|bash|zsh|fish` (for
    // packagers) is no option of the program itself.
    tracer_docgen::run_if_asked(Args::command);
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
    let mut pi_gains = args.pi_gains;
    if let Some(kp) = args.pi_kp {
        pi_gains.kp_const = kp;
    }
    if let Some(ki) = args.pi_ki {
        pi_gains.ki_const = ki;
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
            oscillator: args
                .simulate_oscillator
                .map(OscillatorSpec::start_now)
                .transpose()?,
            reads: args.reads,
            hw_iface: args.hw_iface.clone(),
            auth,
        })
        .with_context(|| format!("opening clock source {}", args.source))?;
    // As phc2sys does before it creates its servo: ask the clock.
    let clock_max_freq_ppb = match args.source.max_freq_ppb() {
        Ok(ppb) => Some(ppb),
        Err(e) => {
            eprintln!(
                "clocksync: cannot read the frequency limit of {} ({:#}); assuming {} ppb",
                args.source,
                anyhow::Error::new(e),
                clocksync::servo::algorithm::FALLBACK_MAX_FREQ_PPB
            );
            None
        }
    };
    let cfg = ServoConfig {
        interval_s: args.interval.as_secs_f64(),
        pi_gains,
        clock_max_freq_ppb,
        max_frequency_ppb: args.max_frequency_ppb,
        first_step_threshold_ns: args.first_step_threshold_ns,
        step_threshold_ns: args.step_threshold_ns,
        hardware_timestamps: source.hardware_stamped() && !args.software_gains,
        sanity: SanityConfig {
            enabled: !args.no_servo_sanity,
            max_change_ns: args.servo_max_change.0,
            max_freq_change_ppb: args.servo_max_freq_change,
            ..SanityConfig::default()
        },
        ..Default::default()
    };
    let name = source.name();
    let mut d = Discipline::new(source, Servo::new(args.servo, cfg), GlobalClock::default());
    let interval = args.interval;
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
