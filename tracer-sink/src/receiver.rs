//! The receive task: reads datagrams, validates them whole, tracks agents,
//! and hands accepted events to the writer in batches.
//!
//! It never panics on network input: every datagram goes through
//! `DatagramView::parse` (validated whole, read in place, nothing
//! allocated), and a rejected one only bumps a counter. With a key, the
//! tag is checked right after the header, before any record is read, and
//! replays are refused by a window per agent incarnation ([`crate::peers`]).
//! It also sends the agents their acknowledgements, from the same socket.

use std::future::Future;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clocksync::exchange::sockaddr_to_std;
use tokio::net::UdpSocket;
use tokio::sync::mpsc::Sender;
use tracer_codec::{DatagramHeaderRef, DatagramView};

use crate::agents::{has_control, AgentKey, Observation};
use crate::batch::{AgentInfo, Batch, BatchPool, EventMeta, ToWriter};
use crate::clock::SinkClock;
use crate::error::SinkError;
use crate::freshness::Verdict;
use crate::limits::WarnEvery;
use crate::peers::{check_tag, fingerprint, worth_logging, SourceChange};
use crate::stats::{Shared, SharedState};

/// Events per batch before it is handed over even if the socket has more.
pub const MAX_BATCH_EVENTS: usize = 8192;
/// How often the writer is woken for time-based work when nothing arrives.
pub const TICK: Duration = Duration::from_millis(100);
/// Receive buffer: larger than any UDP payload, so an oversized datagram
/// is seen whole and rejected as `too_large` rather than cut.
const RECV_BUF: usize = 65_536;

/// Datagrams read per `recvmmsg` call.
const RECV_BATCH: usize = 32;

/// Buffers and headers for `recvmmsg`. The kernel writes into `bufs` and
/// `addrs` through the pointers in `hdrs`/`iovs`, which are set up anew
/// before every call (so moving this struct is harmless).
struct MultiRecv {
    bufs: Vec<u8>,
    iovs: Vec<libc::iovec>,
    addrs: Vec<libc::sockaddr_storage>,
    hdrs: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers in `iovs`/`hdrs` only ever point into this
// struct's own vectors and are rebuilt before each use.
unsafe impl Send for MultiRecv {}

impl MultiRecv {
    fn new() -> Self {
        MultiRecv {
            bufs: vec![0u8; RECV_BUF * RECV_BATCH],
            // SAFETY: all-zero is a valid value of these plain C structs.
            iovs: vec![unsafe { std::mem::zeroed() }; RECV_BATCH],
            // SAFETY: as above.
            addrs: vec![unsafe { std::mem::zeroed() }; RECV_BATCH],
            // SAFETY: as above.
            hdrs: vec![unsafe { std::mem::zeroed() }; RECV_BATCH],
        }
    }

    /// One `recvmmsg(MSG_DONTWAIT)`: the number of datagrams read.
    fn recv(&mut self, fd: std::os::fd::RawFd) -> std::io::Result<usize> {
        for i in 0..RECV_BATCH {
            self.iovs[i] = libc::iovec {
                iov_base: self.bufs[i * RECV_BUF..].as_mut_ptr().cast(),
                iov_len: RECV_BUF,
            };
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut self.iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = std::ptr::null_mut();
            h.msg_controllen = 0;
            h.msg_flags = 0;
            self.hdrs[i].msg_len = 0;
        }
        // SAFETY: `hdrs` holds RECV_BATCH initialised headers whose name and
        // iovec pointers point into `addrs` and `bufs` (RECV_BUF bytes
        // each), all live and unaliased for the duration of the call.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                RECV_BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// Datagram `i` of the last call and its source.
    fn get(&self, i: usize) -> (&[u8], SocketAddr) {
        let len = (self.hdrs[i].msg_len as usize).min(RECV_BUF);
        let src = sockaddr_to_std(&self.addrs[i], self.hdrs[i].msg_hdr.msg_namelen)
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
        (&self.bufs[i * RECV_BUF..i * RECV_BUF + len], src)
    }
}

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
                    let mut st = shared.lock();
                    let Receiver {
                        clock,
                        mm,
                        batch,
                        new_agents,
                        warn,
                        ..
                    } = self;
                    let arrived = Instant::now();
                    for i in 0..n {
                        let (bytes, src) = mm.get(i);
                        let now = clock.now_ns();
                        let out = Out {
                            batch,
                            new_agents,
                            warn,
                        };
                        handle_datagram(&mut st, out, bytes, src, now, arrived);
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

/// Where [`handle_datagram`] puts what it produces.
struct Out<'a> {
    batch: &'a mut Batch,
    new_agents: &'a mut Vec<AgentInfo>,
    warn: &'a mut WarnEvery,
}

impl Out<'_> {
    fn reborrow(&mut self) -> Out<'_> {
        Out {
            batch: self.batch,
            new_agents: self.new_agents,
            warn: self.warn,
        }
    }
}

/// Reject reasons that mean a limit of the sink bit (logged at warn level,
/// once per interval).
const LIMIT_REASONS: &[&str] = &["seq_jump", "new_agent_rate", "too_many_agents"];

/// Count one rejected datagram (and say why at debug level).
fn reject_datagram(
    st: &mut SharedState,
    src: SocketAddr,
    reason: &'static str,
    what: &dyn std::fmt::Display,
) {
    tracing::debug!(%src, reason, error = %what, "rejected datagram");
    st.rx.reject(src, reason);
}

/// Validate one datagram and, if accepted, append its events to the batch.
fn handle_datagram(
    st: &mut SharedState,
    out: Out<'_>,
    bytes: &[u8],
    src: SocketAddr,
    now_ns: u64,
    arrived: Instant,
) {
    st.rx.datagrams_received += 1;
    let reject = |st: &mut SharedState, reason, what: &dyn std::fmt::Display| {
        reject_datagram(st, src, reason, what)
    };
    // The header alone first: with a key, nothing else of an
    // unauthenticated datagram is looked at.
    let h = match DatagramHeaderRef::parse(bytes) {
        Ok((h, _)) => h,
        Err(e) => return reject(st, e.reason(), &e),
    };
    match st.peers.keys() {
        Some(k) => {
            if let Some(reason) = check_tag(&k.datagram, bytes, &h) {
                return reject(st, reason, &"no valid tag for the sink's key");
            }
        }
        None if h.has_mac() => {
            if st.rx.tags_unchecked == 0 {
                tracing::warn!(%src, "agents tag their datagrams but this sink has no --key-file: \
                    the tags are not checked (start the sink with the agents' key file to refuse forgeries)");
            }
            st.rx.tags_unchecked += 1;
        }
        None => {}
    }
    let mut out = out;
    if let Some(f) = st.fresh.as_mut() {
        match f.judge(&h, bytes, src, arrived) {
            Verdict::Take { released, stale } => {
                for _ in 0..stale {
                    st.rx.reject(src, "stale");
                }
                if stale > 0 {
                    tracing::warn!(%src, agent_id = %format_args!("{:016x}", h.agent_id), stale,
                        "refused held datagrams sent before this sink started: replayed (the agent has bound to this sink since)");
                }
                for d in released {
                    admit(st, out.reborrow(), &d.bytes, d.src, now_ns, d.arrived);
                }
            }
            Verdict::Refuse(reason) => {
                let why: &dyn std::fmt::Display = match reason {
                    "auth_old_version" => {
                        &"with a key, only wire version 3 tells a replay: upgrade the agent"
                    }
                    "stale" => &"bound to another sink instance and sent before this sink started",
                    _ => &"not fresh",
                };
                return reject(st, reason, why);
            }
            Verdict::Hold { first } => {
                st.bind_now |= first;
                return;
            }
        }
    }
    admit(st, out, bytes, src, now_ns, arrived);
}

/// The part of [`handle_datagram`] after authentication and freshness:
/// validate the whole datagram, the replay window and the agent table,
/// then batch its events.
fn admit(
    st: &mut SharedState,
    out: Out<'_>,
    bytes: &[u8],
    src: SocketAddr,
    now_ns: u64,
    arrived: Instant,
) {
    let reject = |st: &mut SharedState, reason, what: &dyn std::fmt::Display| {
        reject_datagram(st, src, reason, what)
    };
    let d = match DatagramView::parse(bytes) {
        Ok(d) => d,
        Err(e) => return reject(st, e.reason(), &e),
    };
    let h = d.header();
    let Out {
        batch,
        new_agents,
        warn,
    } = out;
    // Order matters: the tag (above) and the replay window (here) come
    // before the agent table, so a forged or replayed datagram neither
    // spends new-agent admission budget nor moves an agent's sequence.
    let known = st.agents.index_of(&AgentKey::of(h));
    let fp = fingerprint(&d);
    let mut conflict = false;
    if let Some(p) = known.and_then(|i| st.peers.get(i)) {
        if !p.is_fresh(h.seq) {
            return reject(
                st,
                "replay",
                &format_args!("datagram {} seen before", h.seq),
            );
        }
        // Without a key a forgery cannot be refused; one that took a
        // sequence number first must not make the real datagram with
        // that number vanish as a "duplicate". Both are kept.
        conflict = st.peers.keys().is_none() && p.conflicts_with(h.seq, fp);
    }
    let index = match (conflict, known) {
        (true, Some(index)) => {
            let p = st.peers.get(index);
            let n = p.map_or(0, |p| p.seq_conflicts) + 1;
            if worth_logging(n) {
                let host = st
                    .agents
                    .agents
                    .get(&index)
                    .map(|a| a.host.as_str())
                    .unwrap_or("");
                tracing::warn!(%src, agent_id = %format_args!("{:016x}", h.agent_id), host,
                    seq = h.seq, conflicts = n, known_source = ?p.map(|p| p.source),
                    "two different datagrams with one sequence number: one is forged (no --key-file to tell which); both are kept");
            }
            index
        }
        _ => match st.agents.observe(h, src, arrived) {
            Observation::Reject(reason) => {
                if LIMIT_REASONS.contains(&reason) {
                    warn.note(reason, arrived);
                }
                return reject(
                    st,
                    reason,
                    &format_args!("seq {} of agent {:016x}", h.seq, h.agent_id),
                );
            }
            Observation::Accept { index, is_new } => {
                if is_new {
                    let host = st
                        .agents
                        .agents
                        .get(&index)
                        .map(|a| a.host.clone())
                        .unwrap_or_default();
                    tracing::info!(%src, %host, agent_id = %format_args!("{:016x}", h.agent_id),
                        incarnation = %format_args!("{:016x}", h.incarnation),
                        preceding_events = h.first_event_seq, "new agent");
                    new_agents.push(AgentInfo {
                        index,
                        agent_id: h.agent_id,
                        host,
                        clock_source: h.clock_source,
                        incarnation: h.incarnation,
                        source: src,
                    });
                }
                index
            }
        },
    };
    if has_control(h.hostname) {
        st.rx.hostnames_sanitized += 1;
        warn.note("hostname_sanitized", arrived);
    }
    if let SourceChange::Changed { from, count } = st.peers.accepted(index, h, fp, src, conflict) {
        if worth_logging(count) {
            let host = st
                .agents
                .agents
                .get(&index)
                .map(|a| a.host.as_str())
                .unwrap_or("");
            tracing::warn!(%src, %from, changes = count, agent_id = %format_args!("{:016x}", h.agent_id),
                host, authenticated = st.peers.keys().is_some(),
                "an agent's datagrams now come from another source address");
        }
    }
    st.rx.datagrams_accepted += 1;
    st.rx.events_accepted += u64::from(h.event_count);
    if batch.events.is_empty() {
        batch.arrived = Instant::now();
    }
    for (k, rec) in d.records().enumerate() {
        // Unknown kinds carry no time the sink can read: stamp them on
        // arrival.
        let ts_ns = rec.global_ns.unwrap_or(now_ns);
        let raw = rec.raw;
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
    let mut r = Receiver {
        clock,
        batch: pool.take(),
        new_agents: Vec::new(),
        mm: MultiRecv::new(),
        pool,
        warn: WarnEvery::default(),
        idle_timeout,
        last_expiry: Instant::now(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_addresses_convert_like_std() {
        for s in [
            "127.0.0.1:7420",
            "10.1.2.3:1",
            "[::1]:65535",
            "[fe80::1%7]:5201",
            "[2001:db8::ff]:0",
        ] {
            let want: SocketAddr = s.parse().unwrap();
            let sa = socket2::SockAddr::from(want);
            // SAFETY: all-zero is a valid sockaddr_storage.
            let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
            // SAFETY: copies `len` (<= size of sockaddr_storage) bytes from
            // a live SockAddr into a live, distinct sockaddr_storage.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    sa.as_ptr().cast::<u8>(),
                    (&mut st as *mut libc::sockaddr_storage).cast::<u8>(),
                    sa.len() as usize,
                );
            }
            assert_eq!(sockaddr_to_std(&st, sa.len()), Some(want), "{s}");
            assert_eq!(sockaddr_to_std(&st, 2), None);
        }
    }
}
