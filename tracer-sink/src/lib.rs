//! tracer-sink: receives events from tracer agents over UDP, checks them,
//! orders them in global time and writes pcapng files.
//!
//! Library first, thin binary: [`run`] takes a bound socket, a
//! [`SinkConfig`] and a shutdown future, so tests drive the real server on
//! `127.0.0.1:0`. Data path:
//!
//! ```text
//! UDP socket -> receive task (tokio): recvmmsg, header read once, tag
//!               check (with a key), the rest validated, per-agent
//!               sequence, acks back; under load one wakeup a millisecond
//!            -> batches over a bounded channel (recycled through a pool)
//!            -> writer thread: reorder buffer (time buckets of event
//!               references) -> pcapng (SHB/IDB/ISB by pcap-file, EPBs
//!               encoded in place) -> files (written in 1 MiB chunks,
//!               write-behind)
//! ```
//!
//! Memory is bounded by configuration, not by what senders do:
//! - batches in flight: [`CHANNEL_BATCHES`] (64) of at most 8192 events
//!   (about 1.6 MB each with MTU-sized datagrams), plus spare batches of
//!   at most 2 MB each, 32 MB in all, kept for reuse;
//! - the reorder buffer: at most `reorder_max_events` events (2 M by
//!   default), each holding its record, 32 bytes of metadata, a 16-byte
//!   reorder entry and its share of a batch; a batch handed over is at
//!   most 4 times the size of its content (`Batch::take_fitting`: batches
//!   sized for a burst but holding a few datagrams, kept alive for one
//!   reorder window, were what grew a sink to 125 MB at 105 k events/s;
//!   it now stays near 27 MB);
//! - agents: at most [`agents::MAX_AGENTS`] live, admitted at a limited
//!   rate ([`limits`]), idle ones expired; gap tracking at most
//!   [`seq::MAX_GAP_RANGES`] ranges per agent and
//!   [`agents::MAX_TOTAL_GAP_RANGES`] in all (about 12 MB);
//! - rejects by source: [`stats::MAX_REJECT_SOURCES`] addresses.
//!
//! Loss is never silent: rejected datagrams are counted by reason and by
//! source; sequence gaps and agent-side losses per agent (and in each
//! file's Interface Statistics Blocks); events the sink itself could not
//! write as `sink_write_lost`.

pub mod agents;
mod batch;
pub mod clock;
pub mod config;
pub mod error;
mod fasthash;
pub mod freshness;
pub mod limits;
mod pcapng;
pub mod peers;
mod receiver;
pub mod reorder;
pub mod seq;
pub mod socket;
pub mod stats;
mod summary;
pub mod timesync;
mod writer;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UdpSocket;

pub use crate::clock::SinkClock;
pub use crate::config::{
    parse_rcvbuf, parse_rotate_size, parse_size, prepare_output_dir, Compression, SinkConfig,
};
pub use crate::error::SinkError;
pub use crate::pcapng::{interface_description, is_zstd, EPB_PACKETID, PAD_BLOCK};
pub use crate::peers::SinkKeys;
pub use crate::socket::{bind_udp, DEFAULT_RCVBUF};
pub use crate::stats::{AgentStats, SinkStats};

/// Batches in flight between the receive task and the writer. When the
/// writer falls behind, the receive task waits and the socket buffer fills
/// (the kernel then drops, which shows up as sequence gaps).
pub const CHANNEL_BATCHES: usize = 64;

/// Run the sink on `socket` until `shutdown` resolves; return the final
/// stats.
///
/// On shutdown it reads what is already queued in the socket, writes every
/// accepted event, writes the Interface Statistics Blocks, fsyncs and
/// closes the file. Errors only for what the sink cannot work around (a
/// configuration value out of range, an output directory that cannot be
/// created or written into, the socket fails); write
/// failures are logged, counted and retried instead.
pub async fn run(
    socket: UdpSocket,
    config: SinkConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<SinkStats, SinkError> {
    run_with_reporter(socket, config, shutdown, |_| {}).await
}

/// [`run`], calling `report` with a stats snapshot every
/// `config.stats_interval` (if set).
pub async fn run_with_reporter(
    socket: UdpSocket,
    config: SinkConfig,
    shutdown: impl Future<Output = ()>,
    mut report: impl FnMut(&SinkStats),
) -> Result<SinkStats, SinkError> {
    config.validate()?;
    config::prepare_output_dir(&config.output_dir)?;
    let shared = Arc::new(stats::Shared::new(
        config.keys.clone(),
        config.stats_max_agents,
    ));
    let pool = Arc::new(batch::BatchPool::default());
    let (tx, rx) = tokio::sync::mpsc::channel(CHANNEL_BATCHES);
    // The writer acknowledges what it committed at once, on a duplicate of
    // the socket: an ack that waited for the receive task's next tick could
    // be lost with a killed sink although its events are in the file.
    let ack_socket = socket2::SockRef::from(&socket)
        .try_clone()
        .map(std::net::UdpSocket::from)
        .map_err(|e| tracing::warn!(error = %e, "no socket for immediate acknowledgements"))
        .ok();
    let writer = {
        let cfg = config.clone();
        let shared = Arc::clone(&shared);
        let pool = Arc::clone(&pool);
        tokio::task::spawn_blocking(move || writer::run_writer(cfg, shared, pool, rx, ack_socket))
    };
    let recv = receiver::receive(
        &socket,
        tx,
        Arc::clone(&shared),
        config.clock.clone(),
        config.agent_idle_timeout,
        pool,
        shutdown,
    );
    let result = match config.stats_interval {
        Some(every) if every > Duration::ZERO => {
            let reporter = async {
                let mut iv = tokio::time::interval(every);
                iv.tick().await; // the first tick is immediate
                loop {
                    iv.tick().await;
                    report(&shared.snapshot());
                }
            };
            tokio::select! {
                r = recv => r,
                () = reporter => Ok(()),
            }
        }
        _ => recv.await,
    };
    writer.await.map_err(|e| SinkError::Writer(e.to_string()))?;
    result?;
    Ok(shared.snapshot())
}
