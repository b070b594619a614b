//! The sink's service: [`run`] wires the receive task, the writer thread,
//! the live outputs and the stats reporter together for one run (the
//! crate root re-exports it; the embedded sink runs it too).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UdpSocket;

use crate::config::SinkConfig;
use crate::error::SinkError;
use crate::stats::SinkStats;
use crate::{batch, config, live, receiver, stats, writer};

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
    if config.files {
        config::prepare_output_dir(&config.output_dir)?;
    }
    let shared = Arc::new(stats::Shared::new(
        config.keys.clone(),
        config.stats_max_agents,
    ));
    if let Some(m) = &config.metrics {
        m.attach(&shared, config.reorder_max_events);
    }
    let live = live::start(config.live_iface.as_deref(), config.live_stream.as_ref())?;
    let live_counters = live.counters.clone();
    if let Some(c) = &live_counters {
        shared.set_live(Arc::clone(c));
    }
    let server = live.server.map(|s| tokio::spawn(s.run()));
    let live_outputs = live.outputs;
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
        tokio::task::spawn_blocking(move || {
            writer::run_writer(cfg, shared, pool, rx, ack_socket, live_outputs)
        })
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
    if let Some(s) = server {
        s.abort();
    }
    live::drain_clients(live_counters.as_deref()).await;
    result?;
    Ok(shared.snapshot())
}
