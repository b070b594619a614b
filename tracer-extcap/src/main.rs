//! nettrace-extcap: Wireshark's way into a running sink's live stream.
//!
//! Installed in Wireshark's extcap folder (see docs/live.md), it adds an
//! interface "nettrace" to Wireshark's and tshark's capture lists; starting
//! a capture on it connects to the sink's `--live-listen` port, passes the
//! key handshake and hands Wireshark the sink's time-ordered events as
//! pcapng, with each event's global time as the frame time. Wireshark calls
//! it with the extcap(4) options; it also runs by hand:
//! `nettrace-extcap --capture --sink HOST:PORT --fifo - | wireshark -k -i -`.

mod sentences;
mod stream;

use std::fs::OpenOptions;
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{CommandFactory, Parser};

/// Open a nettrace sink's live stream in Wireshark (extcap).
///
/// Wireshark runs this program itself once it is in its extcap folder
/// (`tshark -G folders` shows it): the interface "nettrace" then appears in
/// the capture list, with a dialog asking for the sink's live address and
/// key file. The sink must run with `--live-listen ADDR:PORT`.
///
/// By hand, the stream goes to a file or a pipe:
///   nettrace-extcap --capture --sink 10.0.0.2:7421 --key-file nettrace.key --fifo - | wireshark -k -i -
#[derive(Parser, Debug)]
#[command(name = "nettrace-extcap", version, verbatim_doc_comment)]
struct Cli {
    /// List this program's interfaces (extcap).
    #[arg(long)]
    extcap_interfaces: bool,
    /// The Wireshark version asking (extcap; informational).
    #[arg(long, value_name = "VERSION", num_args = 0..=1, hide = true)]
    extcap_version: Option<Option<String>>,
    /// The interface a request is about (extcap): "nettrace".
    #[arg(long, value_name = "IFACE")]
    extcap_interface: Option<String>,
    /// List the interface's link types (extcap).
    #[arg(long)]
    extcap_dlts: bool,
    /// List the interface's capture options (extcap).
    #[arg(long)]
    extcap_config: bool,
    /// Check a capture filter, or the one given to a capture (extcap):
    /// the live stream takes none.
    #[arg(long, value_name = "FILTER")]
    extcap_capture_filter: Option<String>,
    /// Ignored (extcap: no option of ours reloads).
    #[arg(long, value_name = "OPTION", hide = true)]
    extcap_reload_option: Option<String>,
    /// Ignored (extcap toolbar controls; this program has none).
    #[arg(long, value_name = "PIPE", hide = true)]
    extcap_control_in: Option<PathBuf>,
    /// Ignored (extcap toolbar controls; this program has none).
    #[arg(long, value_name = "PIPE", hide = true)]
    extcap_control_out: Option<PathBuf>,
    /// Capture: stream the sink's events into --fifo until stopped.
    #[arg(long)]
    capture: bool,
    /// Where a capture writes pcapng: Wireshark's fifo, a file, or - for
    /// standard output.
    #[arg(long, value_name = "PATH")]
    fifo: Option<PathBuf>,
    /// The sink's live address, HOST:PORT as given to its --live-listen.
    #[arg(long, value_name = "HOST:PORT", value_parser = tracer_cli::host_port)]
    sink: Option<SocketAddr>,
    /// The deployment key file, when the sink has one (--key-file there).
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// Seconds to wait for the sink to accept and answer the handshake.
    /// [range: 1..=60]
    #[arg(long, value_name = "S", default_value = "5", value_parser = clap::value_parser!(u64).range(1..=60))]
    connect_timeout: u64,
    /// Log level on standard error (Wireshark shows it when a capture
    /// fails): error, warn, info, debug.
    #[arg(long, value_name = "LEVEL", default_value = "warn")]
    log_level: String,
}

fn main() -> ExitCode {
    // Before the binary's own parser: `--generate man|bash|zsh|fish` (for
    // packagers) is no option of the program itself.
    tracer_docgen::run_if_asked(Cli::command);
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&cli.log_level)
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    // A capture's output outlives its error message: Wireshark reports the
    // extcap's standard error as soon as the fifo closes, so the message
    // goes first, in one write, and the fifo closes after it.
    let mut output = None;
    match run(cli, &mut output) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let message = format!("nettrace-extcap: {e:#}\n");
            let _ = std::io::stderr().write_all(message.as_bytes());
            drop(output);
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli, output: &mut Option<Box<dyn Write>>) -> anyhow::Result<()> {
    if cli.extcap_interfaces {
        print!("{}", sentences::interfaces(env!("CARGO_PKG_VERSION")));
        return Ok(());
    }
    let iface = cli.extcap_interface.as_deref();
    if cli.extcap_dlts || cli.extcap_config {
        let Some(iface) = iface else {
            bail!("--extcap-dlts and --extcap-config need --extcap-interface nettrace");
        };
        let answer = if cli.extcap_dlts {
            sentences::dlts(iface)
        } else {
            sentences::config(iface)
        };
        match answer {
            Some(text) => print!("{text}"),
            None => bail!(
                "no interface {iface:?} here: this program has one, {:?}",
                sentences::INTERFACE
            ),
        }
        return Ok(());
    }
    if !cli.capture {
        if let Some(f) = &cli.extcap_capture_filter {
            // Wireshark's filter check: an empty answer accepts it.
            print!("{}", sentences::filter_problem(f));
            return Ok(());
        }
        bail!("nothing to do: give --capture with --sink and --fifo, or an --extcap-* request (see --help)");
    }
    capture(&cli, output)
}

fn capture(cli: &Cli, output: &mut Option<Box<dyn Write>>) -> anyhow::Result<()> {
    let Some(fifo) = &cli.fifo else {
        bail!("a capture needs --fifo PATH (Wireshark gives it; by hand, a file or - for standard output)");
    };
    // Wireshark's fifo is opened before anything that can fail: its
    // capture child (dumpcap) waits for the fifo's writer, and learns that
    // the capture ended only when a writer closes it; exiting without ever
    // opening it leaves tshark waiting forever. A file given by hand is
    // created only once the sink has accepted, so a failure leaves none.
    let is_fifo = std::fs::metadata(fifo).is_ok_and(|m| m.file_type().is_fifo());
    if is_fifo || fifo.as_os_str() == "-" {
        *output = Some(open_output(fifo)?);
    }
    if let Some(f) = &cli.extcap_capture_filter {
        let problem = sentences::filter_problem(f);
        if !problem.is_empty() {
            bail!("{}", problem.trim_end());
        }
    }
    let Some(sink) = cli.sink else {
        bail!(
            "a capture needs --sink HOST:PORT: the address the sink listens on with --live-listen"
        );
    };
    let key = match &cli.key_file {
        Some(p) => Some(tracer_auth::SharedKey::load(p)?),
        None => None,
    };
    let live =
        stream::LiveStream::open(sink, key.as_ref(), Duration::from_secs(cli.connect_timeout))?;
    tracing::info!(%sink, "live stream accepted");
    let out = match output {
        Some(out) => out,
        None => output.insert(open_output(fifo)?),
    };
    let copied = live.pump(out)?;
    tracing::info!(copied, "capture stopped by its reader");
    Ok(())
}

/// Standard output for `-`, else the fifo or file at `path`.
fn open_output(path: &Path) -> anyhow::Result<Box<dyn Write>> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(std::io::stdout().lock()));
    }
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .with_context(|| format!("cannot open {} for the capture", path.display()))?;
    Ok(Box::new(f))
}
