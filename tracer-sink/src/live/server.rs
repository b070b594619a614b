//! The live stream's listener (tokio): accepts TCP connections, runs the
//! handshake of [`tracer_auth::live`] (with the sink's key if it has one),
//! hands each accepted client to the writer's hub, then copies the
//! client's queue to its socket until the client closes, is cut loose by
//! the hub, or the sink stops.

use std::io::Read;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify};
use tracer_auth::live::{ClientHello, ServerHello, Status, Verdict, CLIENT_HELLO_LEN, NONCE_LEN};
use tracer_auth::SharedKey;

use super::hub::Client;
use crate::stats::{add, LiveCounters};

/// Time a connection has to answer the sink's hello.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// The listener and what its clients need.
pub(crate) struct Server {
    pub listener: TcpListener,
    pub key: Option<Arc<SharedKey>>,
    pub max_clients: usize,
    /// Capacity of each client's queue, in hand-overs.
    pub queue_chunks: usize,
    pub joins: std::sync::mpsc::Sender<Client>,
    pub counters: Arc<LiveCounters>,
}

impl Server {
    /// Accept connections until the task is dropped.
    pub async fn run(self) {
        let me = Arc::new(self);
        loop {
            match me.listener.accept().await {
                Ok((sock, peer)) => {
                    tokio::spawn(Arc::clone(&me).client(sock, peer));
                }
                Err(e) => {
                    // Out of descriptors, most likely: wait rather than spin.
                    tracing::warn!(error = %e, "live stream: cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// One connection: the handshake, then its stream.
    async fn client(self: Arc<Self>, mut sock: TcpStream, peer: SocketAddr) {
        let _ = sock.set_nodelay(true);
        // Held for as long as the client is served; given back on drop,
        // whatever ends the task.
        let _place = match tokio::time::timeout(HANDSHAKE_TIMEOUT, self.handshake(&mut sock)).await
        {
            Ok(Ok(Some(place))) => place,
            Ok(Ok(None)) => return,
            Ok(Err(e)) => {
                add(&self.counters.clients_handshake_failed, 1);
                tracing::info!(%peer, error = %e, "live stream: handshake failed");
                return;
            }
            Err(_) => {
                add(&self.counters.clients_handshake_failed, 1);
                tracing::info!(%peer, "live stream: no handshake within {HANDSHAKE_TIMEOUT:?}");
                return;
            }
        };
        add(&self.counters.clients_connected, 1);
        let (tx, mut rx) = mpsc::channel::<Arc<Vec<u8>>>(self.queue_chunks);
        let cut = Arc::new(Notify::new());
        let client = Client {
            tx,
            cut: Arc::clone(&cut),
            peer,
        };
        if self.joins.send(client).is_ok() {
            let (mut rd, mut wr) = sock.into_split();
            let copy = async {
                while let Some(chunk) = rx.recv().await {
                    wr.write_all(&chunk).await?;
                }
                wr.shutdown().await
            };
            // A client sends nothing after its hello: a read returns only
            // when it closes.
            let closed = async {
                let mut b = [0u8; 64];
                while let Ok(n) = rd.read(&mut b).await {
                    if n == 0 {
                        break;
                    }
                }
            };
            let was_cut = tokio::select! {
                () = cut.notified() => true,
                _ = copy => false,
                () = closed => false,
            };
            if was_cut {
                // Reset, not close: what the kernel still holds for a
                // client that does not read is dropped at once instead of
                // trickling out through its small window.
                let _ = socket2::SockRef::from(wr.as_ref()).set_linger(Some(Duration::ZERO));
            }
        }
    }

    /// The sink's side of the handshake; the client's place among the
    /// `max_clients` when it is accepted.
    async fn handshake(&self, sock: &mut TcpStream) -> std::io::Result<Option<Place>> {
        let hello = ServerHello {
            key_required: self.key.is_some(),
            nonce: nonce()?,
        };
        sock.write_all(&hello.encode()).await?;
        let mut b = [0u8; CLIENT_HELLO_LEN];
        sock.read_exact(&mut b).await?;
        let reply = ClientHello::decode(&b);
        let place = Place::take(&self.counters, self.max_clients);
        let offer = if place.is_some() {
            Status::Ok
        } else {
            Status::TooManyClients
        };
        let verdict = Verdict::decide(&hello, &reply, self.key.as_deref(), offer);
        let sent = sock.write_all(&verdict.encode()).await;
        match verdict.status {
            Status::Ok => {}
            Status::BadTag => {
                add(&self.counters.clients_refused_key, 1);
                tracing::warn!(peer = ?sock.peer_addr().ok(),
                    "live stream client refused: wrong or missing key");
            }
            Status::TooManyClients => {
                add(&self.counters.clients_refused_full, 1);
                tracing::warn!(peer = ?sock.peer_addr().ok(), max = self.max_clients,
                    "live stream client refused: as many clients as allowed already");
            }
        }
        sent?;
        Ok(place.filter(|_| verdict.status == Status::Ok))
    }
}

/// One of the `max_clients` places (counted in `clients_live`), given
/// back when dropped.
struct Place(Arc<LiveCounters>);

impl Place {
    /// A place, if fewer than `max` are taken.
    fn take(counters: &Arc<LiveCounters>, max: usize) -> Option<Place> {
        counters
            .clients_live
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max as u64).then_some(n + 1)
            })
            .ok()
            .map(|_| Place(Arc::clone(counters)))
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.0.clients_live.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A fresh nonce from the OS.
fn nonce() -> std::io::Result<[u8; NONCE_LEN]> {
    let mut n = [0u8; NONCE_LEN];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut n)?;
    Ok(n)
}
