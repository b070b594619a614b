//! `tracer-agent`: command line of the agent. Parses options and calls
//! `tracer_agent::run::run`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context};
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};
use clocksync::{SanityConfig, SourceSpec};
use tracer_agent::clock::ClockConfig;
use tracer_agent::metrics::MetricsConfig;
use tracer_agent::pipeline::AgentIdentity;
use tracer_agent::probes::in_registry_order;
use tracer_agent::run::{
    boot_id, hostname, print_stats, run, run_metrics, AgentConfig, AgentKeys, MetricsOnlyConfig,
    NetnsFilter,
};
use tracer_sink::{EmbeddedSink, SinkConfig, SinkKeys, SinkStats, WriterArgs};

mod cli;
use cli::{Cli, ClockArg};

/// Set by SIGINT/SIGTERM; the main loop polls it.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Catch SIGINT and SIGTERM. Installed with sigaction so that a SIGINT
/// ignored by the parent (a shell starts background jobs that way) is
/// caught too: Ctrl-C or `kill -INT` must always detach cleanly.
fn install_stop_handlers() -> std::io::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is valid; the handler only stores to an atomic.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        act.sa_flags = libc::SA_RESTART;
        // SAFETY: act is initialised; the old action is not needed.
        if unsafe { libc::sigaction(sig, &act, std::ptr::null_mut()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match real_main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}`: the message and each cause once, on one line.
            eprintln!("tracer-agent: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn real_main() -> anyhow::Result<()> {
    // Before the binary's own parser: `--generate man|bash|zsh|fish` (for
    // packagers) is no option of the program itself.
    tracer_docgen::run_if_asked(Cli::command);
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Some(problem) = writer_option_without_write(&matches) {
        bail!("{problem}");
    }
    if let Some(id) = cli::MetricsArgs::IDS
        .iter()
        .find(|id| matches.value_source(id) == Some(ValueSource::CommandLine))
        .filter(|_| matches.value_source("metrics").is_none())
    {
        bail!(
            "--{} applies to --metrics ADDR:PORT, which was not given",
            id.replace('_', "-")
        );
    }
    let key = match &cli.key_file {
        Some(path) => Some(tracer_auth::SharedKey::load(path).context("--key-file")?),
        None => None,
    };
    if matches!(cli.clock, ClockArg::Sink) && cli.sink.is_none() {
        bail!(
            "--clock sink follows a remote sink's clock, and --write or --live-iface has none: \
             use --clock system (the default) or a PTP hardware clock (phc:/dev/ptpN, iface:NAME)"
        );
    }
    // Before the clock and the probes: a bad directory fails at once.
    let embedded = if cli.write.is_some() || cli.live_iface.is_some() {
        let config = cli.writer.apply(SinkConfig {
            // Beside a remote sink, the copy's datagrams are bound to that
            // sink (the key's freshness rule would hold them here): the
            // local copy takes them unchecked, on this namespace's loopback.
            keys: match cli.sink {
                Some(_) => None,
                None => key.as_ref().map(SinkKeys::from_shared),
            },
            stats_interval: None,
            files: cli.write.is_some(),
            live_iface: cli.live_iface.clone(),
            ..SinkConfig::new(cli.write.clone().unwrap_or_default())
        });
        let what = [
            cli.write
                .as_ref()
                .map(|d| format!("--write {}", d.display())),
            cli.live_iface.as_ref().map(|i| format!("--live-iface {i}")),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ");
        let sink = EmbeddedSink::start(config).with_context(|| what.clone())?;
        tracing::info!(port = %sink.addr(), "{what}: the agent's embedded sink runs");
        Some(sink)
    } else {
        None
    };
    let metrics = cli.metrics.map(|listen| MetricsConfig {
        listen,
        parts: cli.metrics_opts.metrics_with,
        by_netns: cli.metrics_opts.metrics_by.iter().any(|l| l == "netns"),
        by_iface: cli.metrics_opts.metrics_by.iter().any(|l| l == "iface"),
        max_series: cli.metrics_opts.metrics_max_series,
    });
    // With --sink too, the remote sink is the one the agent answers to
    // (acknowledgements, its clock) and the embedded one gets a copy.
    let (sink, copy_to) = match (&embedded, cli.sink) {
        (Some(e), Some(remote)) => (remote, Some(e.addr())),
        (Some(e), None) => (e.addr(), None),
        (None, Some(a)) => (a, None),
        (None, None) => {
            let Some(metrics) = metrics else {
                bail!(
                    "give --sink HOST:PORT, --write DIR, --live-iface NAME or --metrics ADDR:PORT"
                );
            };
            return metrics_only(cli, metrics);
        }
    };
    let clock = match &cli.clock {
        ClockArg::Spec(spec) => spec.clone(),
        ClockArg::Sink => {
            let port = match cli.clock_port {
                Some(p) => p,
                None => sink.port().checked_add(1).context(
                    "the sink port is 65535: pass --clock-port with the sink's clock responder port",
                )?,
            };
            SourceSpec::Sink(SocketAddr::new(sink.ip(), port))
        }
    };
    let self_endpoints = if cli.trace_self {
        Vec::new()
    } else {
        let mut own = tracer_agent::self_traffic::agent_endpoints(sink, cli.clock_port, &clock);
        if let Some(local) = copy_to {
            own.push(local);
        }
        own
    };
    install_stop_handlers().context("installing the SIGINT/SIGTERM handlers")?;
    let stop = &STOP;
    let clock_cfg = clock_config(
        &cli,
        clock,
        key.as_ref()
            .map(|k| k.mac_key(tracer_auth::Purpose::ClockExchange)),
    );
    let cfg = AgentConfig {
        sink,
        copy_to,
        probes: in_registry_order(&cli.probes),
        cgroup: cli
            .cgroup
            .unwrap_or_else(tracer_agent::preflight::default_cgroup),
        netns: netns_filter(cli.all_netns, cli.netns),
        sample_every: cli.sample_every,
        filter: cli.filter.unwrap_or_default(),
        self_endpoints,
        stats_interval: (!cli.stats_interval.is_zero()).then_some(cli.stats_interval),
        json: cli.json,
        identity: identity(cli.agent_id, cli.hostname)?,
        keys: key.as_ref().map(AgentKeys::from_shared),
        ack_wait: cli.ack_wait,
        metrics,
        max_payload: cli.max_datagram.map(|n| n as usize),
        batch_send: cli.batch_send,
        flush_after: cli.flush_ms,
        poll_interval: cli.poll_ms,
        slots_per_cpu: cli.ring_slots,
        realtime: cli.realtime,
        btf: cli.btf,
        clock_lock_timeout: cli.clock_lock_timeout,
        clock: clock_cfg,
    };
    let stats = run(&cfg, stop)?;
    let Some(embedded) = embedded else {
        print_stats(&stats, cfg.json, true);
        return Ok(());
    };
    // The agent has sent everything and had it acknowledged: the sink
    // writes what it holds and closes the file.
    let written = embedded
        .finish()
        .context("the embedded sink (--write) failed")?;
    print_with_writer(&stats, &written, cfg.json);
    Ok(())
}

/// `--metrics` alone: no trace, the metrics program and the clock.
fn metrics_only(cli: Cli, metrics: MetricsConfig) -> anyhow::Result<()> {
    let clock = match &cli.clock {
        ClockArg::Spec(spec) => spec.clone(),
        ClockArg::Sink => {
            bail!("--clock sink needs --sink: the metrics alone follow a local clock")
        }
    };
    install_stop_handlers().context("installing the SIGINT/SIGTERM handlers")?;
    let clock = clock_config(&cli, clock, None);
    let cfg = MetricsOnlyConfig {
        metrics,
        cgroup: cli
            .cgroup
            .unwrap_or_else(tracer_agent::preflight::default_cgroup),
        netns: netns_filter(cli.all_netns, cli.netns),
        sample_every: cli.sample_every,
        filter: cli.filter.unwrap_or_default(),
        btf: cli.btf,
        identity: identity(cli.agent_id, cli.hostname)?,
        clock,
    };
    Ok(run_metrics(&cfg, &STOP)?)
}

/// `--netns` / `--all-netns`.
fn netns_filter(all: bool, path: Option<std::path::PathBuf>) -> NetnsFilter {
    match (all, path) {
        (true, _) => NetnsFilter::All,
        (false, Some(p)) => NetnsFilter::Path(p),
        (false, None) => NetnsFilter::Own,
    }
}

/// The agent's identity: `--agent-id` or a random one, `--hostname` or
/// the kernel's (refused when it cannot name a host in a trace).
fn identity(agent_id: Option<u64>, name: Option<String>) -> anyhow::Result<AgentIdentity> {
    let hostname = match name {
        Some(h) => h,
        None => {
            let h = hostname();
            if let Some(p) = tracer_cli::hostname_problem(&h, tracer_codec::MAX_HOSTNAME_LEN) {
                bail!("the kernel host name {h:?} cannot name this host in the trace: {p}; pass --hostname NAME");
            }
            h
        }
    };
    Ok(AgentIdentity {
        agent_id: agent_id.unwrap_or_else(rand::random),
        boot_id: boot_id(),
        hostname,
        incarnation: AgentIdentity::new_incarnation(),
    })
}

/// The clock options, following `choice`.
fn clock_config(cli: &Cli, choice: SourceSpec, auth: Option<tracer_auth::MacKey>) -> ClockConfig {
    ClockConfig {
        choice,
        servo: cli.servo,
        interval: cli.clock_interval,
        inject_offset_ns: cli.inject_clock_offset_ns,
        inject_drift_ppm: cli.inject_clock_drift_ppm,
        hw_iface: cli.clock_hw_iface.clone(),
        oscillator: cli.simulate_oscillator,
        truth_log: cli.oscillator_truth.clone(),
        auth,
        sanity: SanityConfig {
            enabled: !cli.no_servo_sanity,
            max_change_ns: cli.servo_max_change.0,
            max_freq_change_ppb: cli.servo_max_freq_change,
            ..SanityConfig::default()
        },
    }
}

/// A writer option given without `--write` or `--live-iface` (the agent's
/// own writer), which it needs.
fn writer_option_without_write(matches: &clap::ArgMatches) -> Option<String> {
    if matches.value_source("write").is_some() || matches.value_source("live_iface").is_some() {
        return None;
    }
    let id = WriterArgs::ids()
        .into_iter()
        .find(|id| matches.value_source(id) == Some(ValueSource::CommandLine))?;
    Some(format!(
        "--{} applies to the files of --write (the agent's own writer); with --sink, give it to the sink",
        id.replace('_', "-")
    ))
}

/// The final statistics of `--write`: the agent's, then its writer's
/// (the sink's figures: events written, losses, files).
fn print_with_writer(stats: &tracer_agent::stats::AgentStats, writer: &SinkStats, json: bool) {
    if json {
        let v = serde_json::json!({ "final": true, "stats": stats, "writer": writer });
        println!("{v}");
    } else {
        print_stats(stats, false, true);
        println!("final writer (--write) statistics");
        print!("{}", writer.to_table());
    }
}

#[cfg(test)]
mod tests {
    use super::cli::*;
    use super::*;
    use clap::Parser;
    use clocksync::MaxChange;
    use tracer_agent::probes::known_probe_names;
    use tracer_agent::sender::BatchSend;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(["tracer-agent", "--sink", "127.0.0.1:9"].iter().chain(args))
    }

    #[test]
    fn batch_send_is_one_of_three_modes() {
        assert_eq!(parse(&[]).unwrap().batch_send, BatchSend::Gso);
        for (v, want) in [
            ("gso", BatchSend::Gso),
            ("mmsg", BatchSend::Mmsg),
            ("off", BatchSend::Off),
        ] {
            assert_eq!(parse(&["--batch-send", v]).unwrap().batch_send, want);
        }
        for bad in ["", "GSO2", "1", "sendmmsg"] {
            assert!(parse(&["--batch-send", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_output_is_needed_and_they_combine() {
        let c = Cli::try_parse_from(["tracer-agent", "--write", "out"]).unwrap();
        assert_eq!(c.write.as_deref(), Some(std::path::Path::new("out")));
        assert!(c.sink.is_none());
        let e = Cli::try_parse_from(["tracer-agent"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        for o in ["--sink", "--write", "--live-iface"] {
            assert!(e.to_string().contains(o), "{e}");
        }
        let c = parse(&["--write", "out", "--live-iface", "nettrace0"]).unwrap();
        assert!(c.sink.is_some() && c.write.is_some() && c.live_iface.is_some());
        assert!(parse(&["--live-iface", "bad name"]).is_err());
    }

    #[test]
    fn file_options_need_write() {
        let m = |args: &[&str]| {
            Cli::command()
                .try_get_matches_from(["tracer-agent"].iter().chain(args))
                .unwrap()
        };
        let problem =
            writer_option_without_write(&m(&["--sink", "127.0.0.1:9", "--rotate-size", "1M"]));
        assert!(problem
            .unwrap()
            .contains("--rotate-size applies to the files of --write"));
        assert!(writer_option_without_write(&m(&["--sink", "127.0.0.1:9"])).is_none());
        assert!(writer_option_without_write(&m(&[
            "--write",
            "d",
            "--rotate-size",
            "1M",
            "--comments"
        ]))
        .is_none());
        let c =
            Cli::try_parse_from(["tracer-agent", "--write", "d", "--rotate-size", "1M"]).unwrap();
        assert_eq!(c.writer.rotate_size, Some(1 << 20));
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn help_says_the_rx_probe_turns_rx_stamping_on() {
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("SOF_TIMESTAMPING_RX_SOFTWARE"), "{help}");
        let c = parse(&["--probes", "tx,rx"]).unwrap();
        let names: Vec<_> = in_registry_order(&c.probes)
            .iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(names, ["tx", "rx"]);
    }

    #[test]
    fn probes_default_to_tx_rx_and_unknown_names_list_the_known_ones() {
        let names = |c: Cli| -> Vec<&str> {
            in_registry_order(&c.probes)
                .iter()
                .map(|p| p.name)
                .collect()
        };
        assert_eq!(names(parse(&[]).unwrap()), ["tx", "rx"]);
        assert_eq!(names(parse(&["--probes", "tx,tx"]).unwrap()), ["tx"]);
        let e = parse(&["--probes", "tx,bogus"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
        let msg = e.to_string();
        assert!(msg.contains("unknown probe \"bogus\""), "{msg}");
        assert!(
            msg.contains(&format!("known probes are {}", known_probe_names())),
            "{msg}"
        );
    }

    #[test]
    fn sink_takes_host_names_and_addresses() {
        let c = Cli::try_parse_from(["tracer-agent", "--sink", "localhost:7420"]).unwrap();
        let sink = c.sink.unwrap();
        assert!(sink.ip().is_loopback(), "{sink}");
        assert_eq!(sink.port(), 7420);
        let c = Cli::try_parse_from(["tracer-agent", "--sink", "[::1]:9"]).unwrap();
        assert_eq!(c.sink, Some("[::1]:9".parse().unwrap()));
        for bad in [
            "localhost",
            "localhost:x",
            ":7420",
            "no-such-host.invalid:7420",
        ] {
            let e = Cli::try_parse_from(["tracer-agent", "--sink", bad]).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{bad}");
        }
    }

    #[test]
    fn hostname_and_max_datagram_are_checked_not_cut() {
        assert_eq!(
            parse(&["--hostname", "web-1"]).unwrap().hostname.as_deref(),
            Some("web-1")
        );
        for bad in ["", "a\nb", "tab\there", &"x".repeat(65)] {
            assert!(parse(&["--hostname", bad]).is_err(), "{bad:?}");
        }
        assert!(parse(&["--hostname", &"é".repeat(32)]).is_ok(), "64 bytes");
        assert!(parse(&["--hostname", &"é".repeat(33)]).is_err(), "66 bytes");
        assert_eq!(
            parse(&["--max-datagram", "256"]).unwrap().max_datagram,
            Some(256)
        );
        assert_eq!(
            parse(&["--max-datagram", "65507"]).unwrap().max_datagram,
            Some(65507)
        );
        for bad in ["255", "65508", "0"] {
            assert!(parse(&["--max-datagram", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn servo_sanity_options_parse_and_say_what_they_bound() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.servo_max_change, MaxChange::default());
        assert!(!c.no_servo_sanity);
        let c = parse(&["--servo-max-change", "unlimited"]).unwrap();
        assert_eq!(c.servo_max_change, MaxChange(None));
        let c = parse(&["--servo-max-change", "0", "--servo-max-freq-change", "2000"]).unwrap();
        assert_eq!(
            (c.servo_max_change, c.servo_max_freq_change),
            (MaxChange(Some(0)), 2000.0)
        );
        assert!(parse(&["--servo-max-change", "1ms"]).is_err());
        assert!(parse(&["--no-servo-sanity", "--servo-max-change", "5"]).is_err());
        let help = Cli::command().render_long_help().to_string();
        for words in ["HOLDOVER", "forged", "ns per second", "--key-file"] {
            assert!(help.contains(words), "--help lacks {words:?}");
        }
    }

    #[test]
    fn simulate_oscillator_is_parsed_and_documented() {
        assert!(parse(&[]).unwrap().simulate_oscillator.is_none());
        let c = parse(&["--simulate-oscillator", "-2000000,-30,5,20"]).unwrap();
        let o = c.simulate_oscillator.unwrap();
        assert_eq!(
            (o.offset_ns, o.drift_ppm, o.noise_ns),
            (-2_000_000, -30.0, 20.0)
        );
        let e = parse(&["--simulate-oscillator", "1,5000"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
        assert!(e.to_string().contains("drift_ppm"), "{e}");
        // The truth log needs an oscillator.
        let e = parse(&["--oscillator-truth", "/tmp/x"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        let help = Cli::command().render_long_help().to_string();
        assert!(
            help.contains("offset_ns,drift_ppm[,wander_ppb_per_s[,noise_ns[,seed]]]"),
            "{help}"
        );
    }

    #[test]
    fn own_traffic_is_excluded_unless_trace_self() {
        assert!(!parse(&[]).unwrap().trace_self);
        assert!(parse(&["--trace-self"]).unwrap().trace_self);
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("Trace nettrace's own traffic too"), "{help}");
    }

    #[test]
    fn filter_is_parsed_at_argument_parsing() {
        assert!(parse(&[]).unwrap().filter.is_none());
        let c = parse(&["--filter", "port 5201 and host 10.0.0.2"]).unwrap();
        assert_eq!(c.filter.unwrap().clauses.len(), 2);
        let e = parse(&["--filter", "port x"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
        assert_eq!(e.exit_code(), 2);
        let msg = e.to_string();
        assert!(
            msg.contains("filter column 6: \"x\" is not a port number"),
            "{msg}"
        );
        let help = Cli::command().render_long_help().to_string();
        assert!(
            help.contains("src/dst are the ends as the event shows them"),
            "{help}"
        );
    }
}
