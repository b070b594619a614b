//! `tracer-sink` binary: parses the command line, binds the socket,
//! installs SIGINT/SIGTERM handling and runs the library's sink.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{CommandFactory, Parser};
use clocksync::SourceSpec;
use tracer_sink::timesync::{ClockService, ResponderConfig};
use tracer_sink::{
    bind_udp, parse_rcvbuf, prepare_output_dir, LiveStreamConfig, SinkClock, SinkConfig, SinkError,
    SinkKeys, SinkMetrics, SinkStats, WriterArgs,
};

const AFTER_HELP: &str = "\
Examples:
  tracer-sink --listen 0.0.0.0:7420 --output traces/
  tracer-sink --output /var/lib/traces --rotate-size 512M --rotate-interval 3600 --json
  tracer-sink --output traces/ --live-iface nettrace0     # then: wireshark -k -i nettrace0
  tracer-sink --output traces/ --live-listen 0.0.0.0:7431 --key-file nettrace.key
  tracer-sink --output traces/ --metrics 0.0.0.0:7432   # then: curl http://localhost:7432/metrics

New agents are admitted at a limited rate per source address (a sender
that invents agent ids cannot fill the agent table), and a datagram whose
sequence jumps beyond a bound is rejected as seq_jump; when a limit bites
it is logged at warn level once per 10 s with the counts.

Files are named <prefix>-<UTC YYYYmmddTHHMMSSZ>-<NNN>.pcapng.zst (zstd,
the default) or .pcapng (--compress none). Wireshark, tshark, capinfos
and mergecap (4.0 built with zstd, as Debian's) and nettrace-match open
both directly; `zstd -d` turns a .zst into plain pcapng for other tools. Open them in Wireshark
with the tracer dissector. Logs go to stderr (set RUST_LOG, e.g.
RUST_LOG=debug); stdout carries only the stats. SIGINT or SIGTERM stops the
sink cleanly: queued datagrams are read, every accepted event is written,
the file is closed with interface statistics, and the exit status is 0.";

/// nettrace sink: receive the agents' events over UDP and write them to pcapng files,
/// one interface per agent, in global-time order, with loss accounting.
#[derive(Debug, Parser)]
#[command(name = "tracer-sink", version, after_help = AFTER_HELP)]
struct Cli {
    /// UDP address to receive agent datagrams on (IP:PORT): a unicast
    /// address of this host, or 0.0.0.0 / [::] for all of them. Port 0
    /// picks a free port (the "started" log line names it).
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:7420", value_parser = tracer_cli::listen_addr)]
    listen: SocketAddr,

    /// Directory for the pcapng files; created if missing.
    #[arg(long, value_name = "DIR", default_value = "traces")]
    output: PathBuf,

    /// Print stats every SECS seconds to stdout; 0 prints them only at exit.
    /// [range: 0 or 0.1..=86400 s]
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = tracer_cli::secs_or_zero(0.1, 86_400.0))]
    stats_interval: Duration,

    /// Print stats as JSON (one object per line) instead of a table.
    #[arg(long)]
    json: bool,

    /// Socket receive buffer in bytes (suffixes K, M, G), or 0 for the
    /// kernel's default. Set with SO_RCVBUFFORCE when root, else
    /// SO_RCVBUF, which net.core.rmem_max caps (the sink then warns with
    /// the size it got). [range: 0 or 64K..=512M]
    #[arg(long, value_name = "BYTES", default_value = "32M", value_parser = parse_rcvbuf)]
    rcvbuf: u64,

    #[command(flatten)]
    writer: WriterArgs,

    /// The sink's own clock, which agents started with `--clock sink` follow
    /// through a kernel-stamped two-way exchange, and which stamps events of
    /// kinds this build does not know: `system` (CLOCK_TAI),
    /// `phc:/dev/ptpN` or `iface:NAME` (a PTP hardware clock).
    #[arg(long, default_value = "system", value_name = "CLOCK")]
    clock: SourceSpec,

    /// Address of the clock responder (UDP IP:PORT, unicast or 0.0.0.0;
    /// port 0 picks a free port). Default: the address --listen bound,
    /// with the port + 1.
    #[arg(long, value_name = "ADDR", value_parser = tracer_cli::listen_addr)]
    clock_listen: Option<SocketAddr>,

    /// Seconds between updates of the sink's clock.
    /// [range: 0.01..=3600 s]
    #[arg(long, default_value = "1", value_name = "SECS", value_parser = tracer_cli::secs(0.01, 3600.0))]
    clock_interval: Duration,

    /// Stamp clock exchanges with the NIC hardware stamps of this interface
    /// (it needs a PHC, and hardware timestamping switched on, as ptp4l
    /// does) instead of kernel software stamps.
    #[arg(long, value_name = "IFACE", value_parser = tracer_cli::iface_name)]
    clock_hw_iface: Option<String>,

    /// Do not answer clock exchanges (agents then cannot use --clock sink).
    #[arg(long)]
    no_clock_responder: bool,

    /// An agent that sends nothing for SECS seconds leaves the agent table
    /// (its interface stays in the file written so far; if it comes back
    /// it is a new agent). 0: agents never expire. An agent sends a clock
    /// event every clock interval even when idle.
    /// [range: 0 or 1..=604800 s]
    #[arg(long, value_name = "SECS", default_value = "120", value_parser = tracer_cli::secs_or_zero(1.0, 604_800.0))]
    agent_idle_timeout: Duration,

    /// List at most N agents in the stats (the ones with the most events);
    /// the others are added up in one line (`agents_not_listed` in JSON);
    /// 0 lists none. [range: 0..=10000]
    #[arg(long, value_name = "N", default_value_t = SinkConfig::DEFAULT_STATS_MAX_AGENTS,
        value_parser = tracer_cli::int(0usize, 10_000))]
    stats_max_agents: usize,
    /// The deployment's shared key file (the same file on every agent; make
    /// one with `head -c 32 /dev/urandom > nettrace.key && chmod 600
    /// nettrace.key`). Only datagrams tagged with it are accepted: untagged
    /// ones are rejected as `auth_missing`, wrongly tagged or altered ones as
    /// `auth_bad`, replayed ones as `replay`. Acknowledgements to the agents
    /// and the clock responder's answers are tagged too, and the responder
    /// answers only tagged requests. Without it every well-formed datagram is
    /// accepted (tags are not checked). The file must be private to its owner
    /// (mode 0600 or 0400); the key is never printed.
    #[arg(long, value_name = "PATH")]
    key_file: Option<PathBuf>,

    /// Show every event, as it is written, on a network interface of this
    /// name (a TAP device, e.g. nettrace0): one Ethernet frame per event
    /// (EtherType 0x88B5) holding the same capture record as the file, in
    /// the file's global-time order. Capture it live with `wireshark -k -i
    /// nettrace0` (with the tracer's dissector), `dumpcap -i nettrace0 -w
    /// live.pcapng` or `tcpdump -i nettrace0`. Needs CAP_NET_ADMIN; the
    /// interface goes when the sink exits (also when killed), and a stale
    /// one of the name is taken over. A reader that falls behind never
    /// slows the sink: frames are dropped and counted (`live` in the stats).
    #[arg(long, value_name = "NAME", value_parser = tracer_cli::iface_name)]
    live_iface: Option<String>,

    /// Offer the live events as a pcapng stream on this TCP address
    /// (IP:PORT; port 0 picks one, the log names it), for Wireshark's
    /// nettrace extcap on another machine. With --key-file, a client must
    /// prove it holds the key. Each client is bounded (8 MiB queued): one
    /// that reads too slowly is cut loose and counted, and the file never
    /// waits for a client. Off unless given.
    #[arg(long, value_name = "ADDR", value_parser = tracer_cli::listen_addr)]
    live_listen: Option<SocketAddr>,

    /// Most live stream clients at once; more are refused (counted).
    /// [range: 1..=64]
    #[arg(long, value_name = "N", default_value_t = tracer_sink::live::DEFAULT_MAX_CLIENTS,
        value_parser = tracer_cli::int(1usize, 64), requires = "live_listen")]
    live_max_clients: usize,

    /// Serve the sink's counters to Prometheus at http://ADDR/metrics
    /// (TCP IP:PORT; port 0 picks one, the log names it): datagrams,
    /// events and bytes received and written, rejects by reason, events
    /// accepted, delivered and lost per agent, the reorder buffer,
    /// live-interface drops, the sink's CPU time; OpenMetrics text with
    /// HELP and TYPE lines, read at each scrape (docs/metrics.md). In
    /// prometheus.yml: `scrape_configs: [{job_name: nettrace-sink,
    /// static_configs: [{targets: ['sinkhost:7432']}]}]`. Anyone who
    /// reaches the address reads the counters (agent ids, host names):
    /// bind a private address. Off unless given; an address that cannot
    /// be bound stops the sink at start.
    #[arg(long, value_name = "ADDR", value_parser = tracer_cli::listen_addr)]
    metrics: Option<SocketAddr>,
}

fn main() -> std::process::ExitCode {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    // Before the binary's own parser: `--generate man|bash|zsh|fish` (for
    // packagers) is no option of the program itself.
    tracer_docgen::run_if_asked(Cli::command);
    let cli = Cli::parse();
    match real_main(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tracer-sink: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn real_main(cli: Cli) -> Result<()> {
    // One thread for the receive task, signals and stats; the writer gets
    // its own thread: two cores, two busy threads.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(serve(cli))
}

/// What to do about a bind error (the OS error itself is printed once,
/// by the error chain).
fn bind_hint(e: &SinkError) -> &'static str {
    match e.io_error().map(|e| e.kind()) {
        Some(std::io::ErrorKind::AddrInUse) => {
            "is another sink running? pick another --listen port"
        }
        Some(std::io::ErrorKind::PermissionDenied) => {
            "ports below 1024 need root or CAP_NET_BIND_SERVICE"
        }
        Some(std::io::ErrorKind::AddrNotAvailable) => "use 0.0.0.0 or an address of this host",
        _ => "check the --listen address",
    }
}

async fn serve(cli: Cli) -> Result<()> {
    let shared_key = match &cli.key_file {
        Some(path) => Some(Arc::new(
            tracer_auth::SharedKey::load(path).context("--key-file")?,
        )),
        None => None,
    };
    let keys = shared_key.as_deref().map(SinkKeys::from_shared);
    let live_stream = match cli.live_listen {
        Some(addr) => {
            let l = std::net::TcpListener::bind(addr).with_context(|| {
                format!(
                    "cannot listen on --live-listen {addr}: is another sink using the port? \
                     pick another one, or an address of this host"
                )
            })?;
            let bound = l.local_addr().unwrap_or(addr);
            tracing::info!(listen = %bound, authenticated = shared_key.is_some(),
                "live stream listening");
            if shared_key.is_none() && !bound.ip().is_loopback() {
                tracing::warn!(listen = %bound,
                    "the live stream takes any client that reaches this address and shows it \
                     every event; pass --key-file to require the deployment key");
            }
            Some(LiveStreamConfig {
                max_clients: cli.live_max_clients,
                ..LiveStreamConfig::new(l, shared_key.clone())
            })
        }
        None => None,
    };
    // Bound before "started" is logged: a taken port is a startup error.
    // The server lives until the sink has stopped (its final counters can
    // be scraped until the process exits).
    let (metrics, _metrics_server) = match cli.metrics {
        Some(addr) => {
            let m = SinkMetrics::new();
            let server = tracer_prom::MetricsServer::start(addr, m.registry())?;
            (Some(m), Some(server))
        }
        None => (None, None),
    };
    let mut config = cli.writer.apply(SinkConfig {
        keys: keys.clone(),
        stats_interval: nonzero(cli.stats_interval),
        agent_idle_timeout: nonzero(cli.agent_idle_timeout),
        stats_max_agents: cli.stats_max_agents,
        live_iface: cli.live_iface.clone(),
        live_stream,
        metrics,
        ..SinkConfig::new(&cli.output)
    });
    prepare_output_dir(&cli.output).context("pass a writable --output directory")?;
    // Before "started" is logged: a SIGTERM sent as soon as the sink says
    // it runs must stop it cleanly, not kill it.
    let shutdown = shutdown_signal()?;
    let rcvbuf = usize::try_from(cli.rcvbuf).unwrap_or(usize::MAX);
    let (socket, actual) = match bind_udp(cli.listen, rcvbuf) {
        Ok(s) => s,
        Err(e) => {
            // One line: what failed, why (the OS error), what to do.
            let why = e.io_error().map(|io| io.to_string()).unwrap_or_default();
            anyhow::bail!("{e}: {why}; {}", bind_hint(&e));
        }
    };
    // With port 0 the kernel chose one: name the address really bound.
    let listen = socket.local_addr().unwrap_or(cli.listen);
    tracing::info!(%listen, output = %cli.output.display(), rcvbuf = actual,
        authenticated = cli.key_file.is_some(), "tracer-sink started");
    // The sink's clock: raw CLOCK_TAI for `--clock system` without a
    // responder; otherwise a global clock disciplined to `--clock`, which
    // the responder serves and which stamps events of unknown kinds.
    let follows_tai = cli.clock == SourceSpec::System(clocksync::ClockId::Tai);
    let clock_service = if cli.no_clock_responder && follows_tai {
        None
    } else {
        let responder = if cli.no_clock_responder {
            None
        } else {
            let listen = match cli.clock_listen {
                Some(a) => a,
                None => SocketAddr::new(
                    listen.ip(),
                    listen.port().checked_add(1).context(
                        "--listen uses port 65535: pass --clock-listen or --no-clock-responder",
                    )?,
                ),
            };
            Some(ResponderConfig {
                listen,
                hw_iface: cli.clock_hw_iface.clone(),
                auth: keys.as_ref().map(|k| k.clock.clone()),
            })
        };
        Some(
            ClockService::start(&cli.clock, cli.clock_interval, responder.as_ref())
                .context("starting the clock responder (--no-clock-responder disables it)")?,
        )
    };
    if let (Some(svc), false) = (&clock_service, follows_tai) {
        config.clock = SinkClock::Global(svc.clock().clone());
    }

    let json = cli.json;
    let print = move |s: &SinkStats| {
        if json {
            match serde_json::to_string(s) {
                Ok(line) => println!("{line}"),
                Err(e) => tracing::error!(error = %e, "cannot serialise stats"),
            }
        } else {
            print!("{}", s.to_table());
        }
    };
    let stats = tracer_sink::run_with_reporter(socket, config, shutdown, print)
        .await
        .context("the sink stopped")?;
    print(&stats);
    tracing::info!(
        events_written = stats.events_written,
        sink_write_lost = stats.sink_write_lost,
        "tracer-sink stopped"
    );
    Ok(())
}

/// `None` for a zero duration (the options where 0 means "off").
fn nonzero(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

/// Resolves on the first SIGINT or SIGTERM.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("cannot install the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot install the SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
    })
}
