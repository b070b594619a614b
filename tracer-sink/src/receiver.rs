//! The receive task: reads datagrams, validates them whole, tracks agents,
//! and hands accepted events to the writer in batches.
//!
//! It never panics on network input: every datagram goes through
//! `Datagram::decode`, and a rejected one only bumps a counter.

use std::future::Future;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::UdpSocket;
use tokio::sync::mpsc::Sender;
use tracer_codec::Datagram;

use crate::agents::Observation;
use crate::batch::{AgentInfo, Batch, EventMeta, ToWriter};
use crate::clock::SinkClock;
use crate::error::SinkError;
use crate::stats::{Shared, SharedState};

/// Events per batch before it is handed over even if the socket has more.
pub const MAX_BATCH_EVENTS: usize = 8192;
/// How often the writer is woken for time-based work when nothing arrives.
pub const TICK: Duration = Duration::from_millis(100);
/// Receive buffer: larger than any UDP payload, so an oversized datagram
/// is seen whole and rejected as `too_large` rather than cut.
const RECV_BUF: usize = 65_536;

struct Receiver {
    clock: SinkClock,
    batch: Batch,
    new_agents: Vec<AgentInfo>,
    buf: Vec<u8>,
}

impl Receiver {
    /// Read datagrams until the socket is empty or the batch is full.
    /// Returns true when the socket had nothing more (`WouldBlock`).
    ///
    /// `direct` bypasses tokio's cached readiness (used to drain at
    /// shutdown, when datagrams may be queued that the reactor has not
    /// reported yet).
    fn read_burst(&mut self, socket: &UdpSocket, shared: &Shared, direct: bool) -> bool {
        let mut st = shared.lock();
        while self.batch.events.len() < MAX_BATCH_EVENTS {
            let got = if direct {
                recv_direct(socket, &mut self.buf)
            } else {
                socket.try_recv_from(&mut self.buf)
            };
            match got {
                Ok((n, src)) => {
                    let now = self.clock.now_ns();
                    let Receiver {
                        buf,
                        batch,
                        new_agents,
                        ..
                    } = self;
                    handle_datagram(&mut st, batch, new_agents, &buf[..n], src, now);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    // An ICMP error queued on the socket and the like: not
                    // fatal for a receive-only socket.
                    tracing::warn!(error = %e, "receive error");
                    return true;
                }
            }
        }
        false
    }

    /// Hand new agents and the batch (if any) to the writer.
    async fn hand_over(&mut self, tx: &Sender<ToWriter>) -> Result<(), SinkError> {
        for a in self.new_agents.drain(..) {
            tx.send(ToWriter::Agent(a)).await.map_err(writer_gone)?;
        }
        if !self.batch.events.is_empty() {
            let b = std::mem::replace(&mut self.batch, Batch::new());
            tx.send(ToWriter::Batch(b)).await.map_err(writer_gone)?;
        }
        Ok(())
    }
}

/// `recvfrom` on the socket's fd without consulting tokio's readiness.
fn recv_direct(socket: &UdpSocket, buf: &mut [u8]) -> std::io::Result<(usize, SocketAddr)> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: the fd is open and owned by `socket`, which outlives this
    // call; ManuallyDrop stops the temporary std socket from closing it.
    let s = std::mem::ManuallyDrop::new(unsafe {
        std::net::UdpSocket::from_raw_fd(socket.as_raw_fd())
    });
    s.recv_from(buf)
}

fn writer_gone<T>(_: T) -> SinkError {
    SinkError::Writer("the writer thread stopped early".to_owned())
}

/// Validate one datagram and, if accepted, append its events to `batch`.
fn handle_datagram(
    st: &mut SharedState,
    batch: &mut Batch,
    new_agents: &mut Vec<AgentInfo>,
    bytes: &[u8],
    src: SocketAddr,
    now_ns: u64,
) {
    st.rx.datagrams_received += 1;
    let d = match Datagram::decode(bytes) {
        Ok(d) => d,
        Err(e) => {
            tracing::debug!(%src, reason = e.reason(), error = %e, "rejected datagram");
            st.rx.reject(src, e.reason());
            return;
        }
    };
    let h = &d.header;
    let index = match st.agents.observe(h) {
        Observation::Reject(reason) => {
            tracing::debug!(%src, reason, seq = h.seq, agent_id = h.agent_id, "rejected datagram");
            st.rx.reject(src, reason);
            return;
        }
        Observation::Accept { index, is_new } => {
            if is_new {
                tracing::info!(%src, host = %h.hostname, agent_id = %format_args!("{:016x}", h.agent_id), "new agent");
                new_agents.push(AgentInfo {
                    index,
                    agent_id: h.agent_id,
                    host: h.hostname.clone(),
                    clock_source: h.clock_source,
                });
            }
            index
        }
    };
    st.rx.datagrams_accepted += 1;
    st.rx.events_accepted += d.records.len() as u64;
    if batch.events.is_empty() {
        batch.arrived = Instant::now();
    }
    for (k, (raw, ev)) in d.records.iter().enumerate() {
        let ts_ns = ev.global_ns().unwrap_or(now_ns);
        let start = batch.data.len() as u32;
        batch.data.extend_from_slice(raw.bytes);
        batch.max_ts = batch.max_ts.max(ts_ns);
        batch.events.push(EventMeta {
            ts_ns,
            event_seq: h.first_event_seq.wrapping_add(k as u64),
            agent: index,
            start,
            len: raw.bytes.len() as u32,
            clock_source: h.clock_source,
            clock_state: h.clock_state,
        });
    }
}

/// Receive until `shutdown` resolves, then drain what is already queued in
/// the socket and return (dropping `tx` tells the writer to finish).
pub(crate) async fn receive(
    socket: &UdpSocket,
    tx: Sender<ToWriter>,
    shared: Arc<Shared>,
    clock: SinkClock,
    shutdown: impl Future<Output = ()>,
) -> Result<(), SinkError> {
    let mut r = Receiver {
        clock,
        batch: Batch::new(),
        new_agents: Vec::new(),
        buf: vec![0u8; RECV_BUF],
    };
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            _ = &mut shutdown => break,
            _ = tick.tick() => {
                r.hand_over(&tx).await?;
                tx.send(ToWriter::Tick).await.map_err(writer_gone)?;
            }
            ready = socket.readable() => {
                ready.map_err(|e| SinkError::Io { what: "socket readiness".to_owned(), source: e })?;
                loop {
                    let empty = r.read_burst(socket, &shared, false);
                    r.hand_over(&tx).await?;
                    if empty {
                        break;
                    }
                }
            }
        }
    }
    // Shutdown: everything the kernel already queued is still accepted.
    loop {
        let empty = r.read_burst(socket, &shared, true);
        r.hand_over(&tx).await?;
        if empty {
            break;
        }
    }
    tracing::debug!("receiver drained the socket");
    Ok(())
}
