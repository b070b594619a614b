//! The agent's CPU per event from its ring to the socket, with no probe
//! and no traced traffic: synthetic ring records through the real drain →
//! decode → stamp → encode → send path (`tracer_agent::synthetic`).
//! bench/agent-pipeline.sh runs it for each --batch-send mode.
//!
//!     cargo run --release -p tracer-agent --example agent_pipeline -- \
//!         --events 4000000 --probe rx --batch-send gso [--null] [--json]

use std::net::SocketAddr;

use clap::Parser;
use tracer_agent::sender::BatchSend;
use tracer_agent::synthetic::{self, Config, Feed};

/// Synthetic probe records through the agent's pipeline.
#[derive(Debug, Parser)]
struct Args {
    /// Records to feed.
    #[arg(long, default_value = "4000000", value_parser = tracer_cli::int(1u64, u64::MAX))]
    events: u64,
    /// Which probe's records: rx (five stages per received skb), tx (four
    /// per sent skb), mixed (half each).
    #[arg(long, value_enum, default_value = "rx")]
    probe: Feed,
    /// How datagrams go to the kernel, as the agent's --batch-send.
    #[arg(long, value_enum, default_value = "gso")]
    batch_send: BatchSend,
    /// Send nothing: batches shaped as --batch-send's go nowhere (the
    /// user-space work alone).
    #[arg(long)]
    null: bool,
    /// Slots per CPU of the ring, refilled each round (the agent's
    /// --ring-slots).
    #[arg(long, default_value = "32768", value_parser = tracer_cli::power_of_two(64, 1 << 20))]
    ring_slots: u32,
    /// CPUs the ring has (default: this machine's).
    #[arg(long, value_parser = tracer_cli::int(1usize, 4096))]
    cpus: Option<usize>,
    /// Datagram payload, bytes (1472: Ethernet, MTU 1500).
    #[arg(long, default_value = "1472", value_parser = tracer_cli::int(256usize, 65_000))]
    max_payload: usize,
    /// Send to a running tracer-sink at this address instead of to the
    /// in-process receiver.
    #[arg(long)]
    sink: Option<SocketAddr>,
    /// Decode every datagram received and check that every event arrived.
    #[arg(long)]
    verify: bool,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let a = Args::parse();
    let defaults = Config::default();
    let cfg = Config {
        events: a.events,
        feed: a.probe,
        batch_send: a.batch_send,
        null_transport: a.null,
        cpus: a.cpus.unwrap_or(defaults.cpus),
        slots_per_cpu: a.ring_slots,
        max_payload: a.max_payload,
        sink: a.sink,
        verify: a.verify,
    };
    let r = synthetic::run(&cfg)?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!(
            "{} events ({:?}) through --batch-send {}: {:.1} ns CPU per event \
             ({:.1} user, {:.1} system), {:.2} M events/s per core",
            r.events,
            r.feed,
            r.batch_send,
            r.ns_per_event,
            r.user_ns_per_event,
            r.sys_ns_per_event,
            r.events_per_s_core / 1e6
        );
        println!(
            "{} datagrams ({:.1} events each), {} send calls, {} rounds, wall {:.3} s",
            r.datagrams,
            r.events as f64 / r.datagrams.max(1) as f64,
            r.send_calls,
            r.rounds,
            r.wall_ns as f64 / 1e9
        );
        if let Some(got) = r.received {
            println!(
                "received {} datagrams in {} messages, {} events",
                got.datagrams, got.messages, got.events
            );
        }
    }
    let lost = r
        .received
        .map_or(0, |got| r.events.saturating_sub(got.events));
    if r.bad_records + r.overruns + r.send_errors > 0 || (a.verify && lost > 0) {
        anyhow::bail!(
            "not every record arrived: {} refused, {} overrun, {} unsent, {lost} not received",
            r.bad_records,
            r.overruns,
            r.send_errors
        );
    }
    Ok(())
}
