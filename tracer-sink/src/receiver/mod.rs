//! The receive task: reads datagrams, validates them whole, tracks agents,
//! and hands accepted events to the writer in batches.
//!
//! It never panics on network input: every datagram goes through
//! [`admit::handle_datagram`] (the header read once, the datagram
//! validated whole, read in place), and a rejected one only bumps a
//! counter. With a key, the tag is checked right after the header, before
//! any record is read, and replays are refused by a window per agent
//! incarnation ([`crate::peers`]). It also sends the agents their
//! acknowledgements, from the same socket.
//!
//! Under load it wakes up less often than datagrams arrive: after a
//! wakeup that found datagrams it waits [`LINGER`] before it looks again
//! (when the socket buffer has room for that), so each wakeup reads a
//! larger burst and hands the writer one larger batch. Every wakeup costs
//! both threads a context switch; at 1 M events/s in MTU-sized datagrams
//! they took 19 % of the sink's CPU time.

mod admit;
mod mmsg;

use std::future::Future;
use std::io::ErrorKind;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::UdpSocket;
use tokio::sync::mpsc::Sender;

use crate::batch::{AgentInfo, Batch, BatchPool, ToWriter};
use crate::clock::SinkClock;
use crate::error::SinkError;
use crate::limits::WarnEvery;
use crate::stats::{Shared, SharedState};

use admit::{handle_datagram, Out};
use mmsg::MultiRecv;

/// Events per batch before it is handed over even if the socket has more.
pub const MAX_BATCH_EVENTS: usize = 8192;
/// How often the writer is woken for time-based work when nothing arrives.
pub const TICK: Duration = Duration::from_millis(100);
/// How long the receive task waits after a wakeup that read datagrams
/// before it looks at the socket again, letting a burst gather. The
/// reorder window (250 ms by default) dwarfs the delay it adds.
pub const LINGER: Duration = Duration::from_millis(1);
/// The receive task lingers only with a socket buffer at least this large
/// (`--rcvbuf` 8 MiB; the kernel reports twice the size asked for): a
/// millisecond of datagrams at the most the sink can read (about 1 M datagrams/s
/// here) then fill less than a third of it. With a smaller buffer it reads
/// as soon as anything arrives, as before.
const LINGER_MIN_RCVBUF: usize = 16 << 20;
/// ... and only after a wakeup that read less than this share of the
/// buffer (in payload bytes; the kernel charges more per datagram).
const LINGER_MAX_SHARE: usize = 16;

/// How often idle agents are looked for.
const EXPIRY_CHECK: Duration = Duration::from_secs(1);

struct Receiver {
    clock: SinkClock,
    batch: Batch,
    new_agents: Vec<AgentInfo>,
    mm: MultiRecv,
    pool: Arc<BatchPool>,
    warn: WarnEvery,
    idle_timeout: Option<Duration>,
    last_expiry: Instant,
    /// Payload bytes read since the socket last woke the task.
    woke_bytes: usize,
    /// Linger after a wakeup that read less than this (0: never).
    linger_below: usize,
}

impl Receiver {
    /// Read datagrams (up to RECV_BATCH per system call) until the socket
    /// is empty or the batch is full. Returns true when the socket had
    /// nothing more (`WouldBlock`).
    ///
    /// `direct` bypasses tokio's cached readiness (used to drain at
    /// shutdown, when datagrams may be queued that the reactor has not
    /// reported yet). The stats lock is held only while datagrams are
    /// handled, not across the system calls.
    fn read_burst(&mut self, socket: &UdpSocket, shared: &Shared, direct: bool) -> bool {
        use std::os::fd::AsRawFd;
        let fd = socket.as_raw_fd();
        while self.batch.events.len() < MAX_BATCH_EVENTS {
            let got = if direct {
                self.mm.recv(fd)
            } else {
                let mm = &mut self.mm;
                socket.try_io(tokio::io::Interest::READABLE, || match mm.recv(fd) {
                    // Nothing read: WouldBlock clears tokio's readiness.
                    Ok(0) => Err(ErrorKind::WouldBlock.into()),
                    r => r,
                })
            };
            match got {
                Ok(0) => return true,
                Ok(n) => {
                    let Receiver {
                        clock,
                        mm,
                        batch,
                        new_agents,
                        warn,
                        woke_bytes,
                        ..
                    } = self;
                    // Room for every record of the burst at once, rather
                    // than growing (and copying) the batch as it fills.
                    let bytes: usize = (0..n).map(|i| mm.get(i).0.len()).sum();
                    *woke_bytes += bytes;
                    batch.reserve(bytes, 0);
                    let arrived = Instant::now();
                    let mut st = shared.lock();
                    st.rx.bytes_received += bytes as u64;
                    for i in 0..n {
                        let (bytes, src, segment) = mm.get(i);
                        for datagram in mmsg::segments(bytes, segment) {
                            let out = Out {
                                batch,
                                new_agents,
                                warn,
                                clock,
                            };
                            handle_datagram(&mut st, out, datagram, src, arrived);
                        }
                    }
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

    /// Periodic work: expire idle agents (after handing over what is
    /// batched, so their events reach the writer first), log limits.
    async fn housekeeping(
        &mut self,
        tx: &Sender<ToWriter>,
        shared: &Shared,
    ) -> Result<(), SinkError> {
        let now = Instant::now();
        self.warn.flush(now);
        refuse_unconfirmed(shared, now);
        let Some(idle) = self.idle_timeout else {
            return Ok(());
        };
        if now.saturating_duration_since(self.last_expiry) < EXPIRY_CHECK {
            return Ok(());
        }
        self.last_expiry = now;
        self.hand_over(tx).await?;
        let (gone, live) = {
            let mut st = shared.lock();
            let mut gone = st.agents.expire(now, idle);
            // The peer (replay window, sources, delivery) goes with its
            // agent; its part of the last ISB comment is kept.
            for a in &mut gone {
                if let Some(p) = st.peers.remove(a.index) {
                    a.comment.push_str(&p.isb_comment());
                    // Its datagrams so far stay refused after it is gone.
                    if let Some(f) = st.fresh.as_mut() {
                        f.retire(p.key(), p.seq_top());
                    }
                }
            }
            (gone, st.agents.agents.len())
        };
        if !gone.is_empty() {
            tracing::info!(
                expired = gone.len(),
                live,
                idle_s = idle.as_secs(),
                "agents expired after sending nothing for the idle timeout (their interfaces stay in the file)"
            );
        }
        for a in gone {
            tx.send(ToWriter::Expire(a)).await.map_err(writer_gone)?;
        }
        Ok(())
    }

    /// Hand new agents and the batch (if any) to the writer.
    async fn hand_over(&mut self, tx: &Sender<ToWriter>) -> Result<(), SinkError> {
        for a in self.new_agents.drain(..) {
            tx.send(ToWriter::Agent(a)).await.map_err(writer_gone)?;
        }
        if !self.batch.events.is_empty() {
            let b = self.batch.take_fitting(&self.pool);
            tx.send(ToWriter::Batch(b)).await.map_err(writer_gone)?;
        }
        Ok(())
    }
}

fn writer_gone<T>(_: T) -> SinkError {
    SinkError::Writer("the writer thread stopped early".to_owned())
}

/// Refuse (as `unconfirmed`) the held datagrams that waited past the
/// hold timeout at `now`: their agent never bound to this sink.
fn refuse_unconfirmed(shared: &Shared, now: Instant) {
    let mut st = shared.lock();
    let Some(f) = st.fresh.as_mut() else {
        return;
    };
    for (key, src, n) in f.expire_held(now) {
        tracing::warn!(%src, agent_id = %format_args!("{:016x}", key.agent_id),
            incarnation = %format_args!("{:016x}", key.incarnation), datagrams = n,
            "refused datagrams whose agent never confirmed this sink's instance: a replay of a \
             finished agent, or the sink's acknowledgements do not reach the agent (a firewall?)");
        for _ in 0..n {
            st.rx.reject(src, "unconfirmed");
        }
    }
}

/// Send every acknowledgement that is due, without waiting: one that does
/// not fit the socket's send buffer now is sent with the next round.
fn send_acks(socket: &UdpSocket, shared: &Shared) {
    let acks = {
        let mut st = shared.lock();
        st.bind_now = false;
        let SharedState {
            agents,
            peers,
            fresh,
            ..
        } = &mut *st;
        let mut acks = peers.due_acks(|i| agents.agents.get(&i).map_or(0, |a| a.seq.event_gaps));
        // Held datagrams wait for their agent to bind to this sink: tell
        // it this sink's instance, again every tick until it does.
        for (key, to) in fresh.as_ref().map(|f| f.awaiting()).unwrap_or_default() {
            acks.extend(peers.binding_ack(&key).map(|b| (to, b)));
        }
        acks
    };
    let mut sent = 0;
    for (to, bytes) in acks {
        match socket.try_send_to(&bytes, to) {
            Ok(_) => sent += 1,
            Err(e) => tracing::debug!(%to, error = %e, "acknowledgement not sent"),
        }
    }
    shared.lock().rx.acks_sent += sent;
}

/// Receive until `shutdown` resolves, then drain what is already queued in
/// the socket and return (dropping `tx` tells the writer to finish).
pub(crate) async fn receive(
    socket: &UdpSocket,
    tx: Sender<ToWriter>,
    shared: Arc<Shared>,
    clock: SinkClock,
    idle_timeout: Option<Duration>,
    pool: Arc<BatchPool>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), SinkError> {
    // The buffer the kernel really gave; unknown: no lingering.
    let rcvbuf = socket2::SockRef::from(socket)
        .recv_buffer_size()
        .unwrap_or(0);
    let linger_below = if rcvbuf >= LINGER_MIN_RCVBUF {
        rcvbuf / LINGER_MAX_SHARE
    } else {
        0
    };
    let mut r = Receiver {
        clock,
        batch: pool.take(),
        new_agents: Vec::new(),
        mm: MultiRecv::new(),
        pool,
        warn: WarnEvery::default(),
        idle_timeout,
        last_expiry: Instant::now(),
        woke_bytes: 0,
        linger_below,
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
                r.housekeeping(&tx, &shared).await?;
                tx.send(ToWriter::Tick).await.map_err(writer_gone)?;
                send_acks(socket, &shared);
            }
            ready = socket.readable() => {
                ready.map_err(|e| SinkError::Io { what: "socket readiness".to_owned(), source: e })?;
                r.woke_bytes = 0;
                loop {
                    let empty = r.read_burst(socket, &shared, false);
                    r.hand_over(&tx).await?;
                    if empty {
                        break;
                    }
                }
                if shared.lock().bind_now {
                    send_acks(socket, &shared);
                }
                if r.woke_bytes > 0 && r.woke_bytes < r.linger_below {
                    // A plain sleep, not tokio's: the runtime parks in
                    // epoll_wait, which every datagram arriving on the
                    // socket ends, so a timer would not spare a single
                    // wakeup. This thread runs nothing else that cannot
                    // wait a millisecond (ticks, stats, the shutdown
                    // signal); back to the select afterwards, so none of
                    // them is starved.
                    std::thread::sleep(LINGER);
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
    refuse_unconfirmed(&shared, Instant::now() + crate::freshness::HOLD_TIMEOUT);
    r.warn.finish();
    tracing::debug!("receiver drained the socket");
    Ok(())
}
