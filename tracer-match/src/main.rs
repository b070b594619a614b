//! `nettrace-match` binary: parses the command line, runs the matcher
//! over the given traces and prints the summary (or JSON), optionally
//! writing the HTML report.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{CommandFactory, Parser};
use tracer_match::input::merge::expand_inputs;
use tracer_match::{MatchConfig, MergeConfig};

const AFTER_HELP: &str = "\
What it does:
  Each sender skb the tx probe stamped (one SND_SW = one transmission,
  retransmissions included) is linked to the receiver's RX skb holding its
  last byte (tskey) on the same 4-tuple, within ±--window on the global time
  axis. A GRO skb matches every TX skb it carries. For each match the packet's
  life is built: SENDMSG → SCHED → SND_SW on the sender, STACK_ENTRY →
  TCP_INPUT → DATA_READY → COPY → READ_DONE on the receiver. The one-way
  latency is SND_SW → STACK_ENTRY. A negative one is a causality violation:
  the two clocks disagree by more than the packet took. From the smallest
  one-way latency each way the offset θ = clock(b) − clock(a) of each host
  pair is bounded: θ ∈ [−min d(b→a), +min d(a→b)], shown beside what the
  agents' clock events claim. Unmatched skbs are counted by reason. When
  the agents sent CPU events, a table says what the network stack cost
  each host's CPUs (softirq and socket-call time, and its share).

Inputs: any number of .pcapng or .pcapng.zst files written by tracer-sink
(rotated files, files of several sinks; zstd is told by its magic bytes) or
directories holding them, in any order: events are merged by global time. Memory is bounded by the windows, not the trace size.
Run the agents with --probes tx,rx on every host (and the same --sample-every).
NAT: packets whose addresses or ports are rewritten on the way cannot be
matched (they count as unmatched: no RX seen, or peer not traced).

Examples:
  nettrace-match traces/
  nettrace-match --html report.html traces/trace-*.pcapng*
  nettrace-match --json --sample-every 10 a/ b/ > match.json";

/// Match sent packets to their receptions across hosts: one-way latency per
/// stage, causality violations, and the clock offset the trace proves.
#[derive(Debug, Parser)]
#[command(name = "nettrace-match", version, after_help = AFTER_HELP)]
struct Cli {
    /// pcapng files written by tracer-sink, or directories of them.
    #[arg(required = true, value_name = "FILE|DIR")]
    inputs: Vec<PathBuf>,

    /// Matching window: an RX skb matches a send only within ± this on the
    /// global axis. Must exceed the longest one-way delay plus the clocks'
    /// largest disagreement. Memory grows with it. (e.g. 250ms, 2s, 500us;
    /// units ns, us, ms, s; a bare number is ms) [range: 1us..=86400s]
    #[arg(long, value_name = "DURATION", default_value = "250ms",
        value_parser = tracer_cli::duration_ns(1_000, 86_400 * NS_PER_S))]
    window: u64,

    /// Reorder window of the input: events are delivered in global-time
    /// order once every file has been read this far past them.
    /// [range: 1us..=3600s]
    #[arg(long, value_name = "DURATION", default_value = "100ms",
        value_parser = tracer_cli::duration_ns(1_000, 3_600 * NS_PER_S))]
    reorder_window: u64,

    /// Most events held for reordering; past it the oldest is used at
    /// once (counted as overflow). About 200 bytes per event.
    /// [range: 1..=100000000]
    #[arg(long, value_name = "N", default_value = "2000000", value_parser = tracer_cli::int(1usize, 100_000_000))]
    reorder_max_events: usize,

    /// The agents' --sample-every N: an unmatched skb whose bytes the
    /// receiver never recorded at that rate is counted as sampled out, not
    /// as lost. [range: 1..=1000000]
    #[arg(long, value_name = "N", default_value = "1", value_parser = tracer_cli::int(1u32, 1_000_000))]
    sample_every: u32,

    /// Print the report as JSON (one object) instead of the summary.
    #[arg(long)]
    json: bool,

    /// Write a self-contained HTML report (inline SVG charts) to FILE.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,

    /// Packets shown in the report's lifetime timeline (the slowest); 0
    /// shows none. [range: 0..=10000]
    #[arg(long, value_name = "N", default_value = "20", value_parser = tracer_cli::int(0usize, 10_000))]
    slowest: usize,

    /// Write every matched pair to FILE, one JSON object per line (hosts,
    /// flow, the TX skb's range at the send, the RX skb's range, each
    /// stage's global time, one-way latency), to check or plot pairs one
    /// by one. Kept in memory until the end: for traces, not for streams.
    #[arg(long, value_name = "FILE")]
    pairs: Option<PathBuf>,
}

/// Nanoseconds per second.
const NS_PER_S: u64 = 1_000_000_000;

fn main() -> std::process::ExitCode {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    // Before the binary's own parser: `--generate man|bash|zsh|fish` (for
    // packagers) is no option of the program itself.
    tracer_docgen::run_if_asked(Cli::command);
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nettrace-match: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let files = expand_inputs(&cli.inputs).context("cannot list the inputs")?;
    if files.is_empty() {
        bail!(
            "no .pcapng or .pcapng.zst files in the inputs given; pass the sink's --output directory or its files"
        );
    }
    let merge = MergeConfig {
        reorder_window_ns: cli.reorder_window,
        max_held: cli.reorder_max_events,
    };
    let cfg = MatchConfig {
        window_ns: cli.window,
        sample_every: cli.sample_every,
        slowest: cli.slowest,
    };
    let mut pairs_file = match &cli.pairs {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create the pairs file {}", path.display()))?,
        )),
        None => None,
    };
    let (report, charts) = tracer_match::run_with_pairs(
        &files,
        merge,
        cfg,
        pairs_file.as_mut().map(|f| f as &mut dyn std::io::Write),
    )
    .context("cannot read the traces")?;
    if report.input.events == 0 {
        let damaged: Vec<String> = report
            .input
            .damaged_files
            .iter()
            .map(|(f, what)| format!("{f}: {what}"))
            .collect();
        bail!(
            "no nettrace event in the {} input file(s){}: are these the sink's pcapng files?",
            files.len(),
            if damaged.is_empty() {
                String::new()
            } else {
                format!(" ({})", damaged.join("; "))
            }
        );
    }
    if let Some(path) = &cli.html {
        std::fs::write(path, tracer_match::html::render(&report, &charts))
            .with_context(|| format!("cannot write the HTML report to {}", path.display()))?;
    }
    if cli.json {
        println!(
            "{}",
            serde_json::to_string(&report).context("encoding the report")?
        );
    } else {
        print!("{}", tracer_match::text::render(&report));
        if let Some(path) = &cli.html {
            println!("\nHTML report: {}", path.display());
        }
    }
    Ok(())
}
