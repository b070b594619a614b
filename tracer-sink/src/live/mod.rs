//! The live outputs of the time-ordered stream: the TAP interface
//! (`--live-iface`, one Ethernet frame per event, from tracer-live) and
//! the pcapng stream over TCP (`--live-listen`, [`hub`] on the writer
//! thread, [`server`] on the runtime). The writer hands every event to
//! [`LiveOutputs`] as it writes it, in the order of the files; neither
//! output ever makes it wait (see each for its bound and its drop count).

mod hub;
mod server;

use std::net::SocketAddr;
use std::sync::Arc;

use tracer_auth::SharedKey;
use tracer_codec::CaptureHeader;
use tracer_live::LiveIface;

use crate::batch::{AgentInfo, EventMeta};
use crate::error::SinkError;

pub(crate) use server::Server;

use crate::stats::LiveCounters;

/// Most stream clients served at once by default.
pub const DEFAULT_MAX_CLIENTS: usize = 8;

/// The live stream's listener (`--live-listen`) and who may connect.
#[derive(Debug, Clone)]
pub struct LiveStreamConfig {
    /// A bound listening socket (tests bind `127.0.0.1:0`).
    pub listener: Arc<std::net::TcpListener>,
    /// The deployment key: clients must prove they hold it (the sink's
    /// `--key-file`). `None`: every client is accepted.
    pub key: Option<Arc<SharedKey>>,
    /// Most clients at once; more are refused (counted).
    pub max_clients: usize,
    /// Hand-overs (of up to 256 KiB each) a client's queue holds before
    /// the client is cut loose: the bound of what the sink keeps for one
    /// slow reader (default 32, 8 MiB).
    pub client_queue_chunks: usize,
}

impl LiveStreamConfig {
    /// A listener with the default client limit.
    pub fn new(listener: std::net::TcpListener, key: Option<Arc<SharedKey>>) -> Self {
        LiveStreamConfig {
            listener: Arc::new(listener),
            key,
            max_clients: DEFAULT_MAX_CLIENTS,
            client_queue_chunks: hub::CLIENT_QUEUE_CHUNKS,
        }
    }
}

/// The live outputs as the writer thread holds them.
pub(crate) struct LiveOutputs {
    iface: Option<LiveIface>,
    hub: Option<hub::Hub>,
}

/// What [`start`] sets up: the writer's part, the stream's listener task,
/// the counters for the stats.
pub(crate) struct Started {
    pub outputs: Option<LiveOutputs>,
    pub server: Option<Server>,
    pub counters: Option<Arc<LiveCounters>>,
}

/// Create the live interface and the stream's listener (as configured).
/// Must run inside the tokio runtime (the listener registers with it).
pub(crate) fn start(
    iface: Option<&str>,
    stream: Option<&LiveStreamConfig>,
) -> Result<Started, SinkError> {
    if iface.is_none() && stream.is_none() {
        return Ok(Started {
            outputs: None,
            server: None,
            counters: None,
        });
    }
    let live_iface = match iface {
        Some(name) => {
            let l = LiveIface::create(name).map_err(|source| SinkError::LiveIface { source })?;
            tracing::info!(
                iface = name,
                "live interface up: capture it with `wireshark -k -i \
                {name}` or `dumpcap -i {name}`"
            );
            Some(l)
        }
        None => None,
    };
    let mut counters = LiveCounters {
        iface: iface.map(str::to_owned),
        tap: live_iface.as_ref().map(LiveIface::counters),
        ..LiveCounters::default()
    };
    let listener = match stream {
        Some(s) => {
            let std = s.listener.try_clone().and_then(|l| {
                l.set_nonblocking(true)?;
                Ok(l)
            });
            let l = std
                .and_then(tokio::net::TcpListener::from_std)
                .map_err(|source| SinkError::Io {
                    what: "cannot use the live stream's listening socket".to_owned(),
                    source,
                })?;
            let addr: Option<SocketAddr> = l.local_addr().ok();
            counters.stream_listen = addr.map(|a| a.to_string());
            Some((l, s))
        }
        None => None,
    };
    let counters = Arc::new(counters);
    let (hub, server) = match listener {
        Some((listener, s)) => {
            let (joins_tx, joins_rx) = std::sync::mpsc::channel();
            let hub = hub::Hub::new(joins_rx, Arc::clone(&counters))?;
            let server = Server {
                listener,
                key: s.key.clone(),
                max_clients: s.max_clients,
                queue_chunks: s.client_queue_chunks.max(1),
                joins: joins_tx,
                counters: Arc::clone(&counters),
            };
            (Some(hub), Some(server))
        }
        None => (None, None),
    };
    Ok(Started {
        outputs: Some(LiveOutputs {
            iface: live_iface,
            hub,
        }),
        server,
        counters: Some(counters),
    })
}

impl LiveOutputs {
    /// A new agent: the stream describes it at once (as the files do).
    pub fn add_agent(&mut self, a: &AgentInfo) {
        if let Some(h) = self.hub.as_mut() {
            h.interface(a);
        }
    }

    /// One event, in the order of the files.
    pub fn event(
        &mut self,
        ts: u64,
        a: &AgentInfo,
        capture: &CaptureHeader,
        m: &EventMeta,
        rec: &[u8],
    ) {
        if let Some(l) = self.iface.as_mut() {
            l.push(capture.bytes(), rec, |h| {
                CaptureHeader::set_event(h, m.event_seq, m.clock_source, m.clock_state)
            });
        }
        if let Some(h) = self.hub.as_mut() {
            h.event(ts, a, capture, m, rec);
        }
    }

    /// Hand what was gathered to the outputs (after each release of the
    /// reorder buffer and each tick).
    pub fn flush(&mut self) {
        if let Some(l) = self.iface.as_mut() {
            l.flush();
        }
        if let Some(h) = self.hub.as_mut() {
            h.flush();
        }
    }

    /// End of the run: everything handed over, the interface removed, the
    /// stream clients closed once they have what is queued.
    pub fn close(&mut self) {
        if let Some(mut l) = self.iface.take() {
            l.close();
        }
        if let Some(mut h) = self.hub.take() {
            h.close();
        }
    }
}

/// Most time the sink waits at exit for its stream clients to receive
/// what was queued for them.
pub const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Wait (at most [`DRAIN_TIMEOUT`]) until every stream client's task has
/// written its queue and closed.
pub(crate) async fn drain_clients(counters: Option<&LiveCounters>) {
    let Some(c) = counters else { return };
    let until = tokio::time::Instant::now() + DRAIN_TIMEOUT;
    while c.clients_live.load(std::sync::atomic::Ordering::Relaxed) > 0
        && tokio::time::Instant::now() < until
    {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
