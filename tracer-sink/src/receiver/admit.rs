//! One datagram's way in: the header (read once), the tag with a key,
//! freshness, the whole datagram validated, the replay window and the
//! agent table; then its events appended to the batch, its records copied
//! with one `memcpy`.
//!
//! It never panics on network input and a rejected datagram only bumps a
//! counter (by reason and source).

use std::net::SocketAddr;
use std::time::Instant;

use tracer_codec::{DatagramHeaderRef, DatagramView, MAC_LEN};

use crate::agents::{has_control, AgentKey, Observation};
use crate::batch::{AgentInfo, Batch, EventMeta};
use crate::clock::SinkClock;
use crate::freshness::Verdict;
use crate::limits::WarnEvery;
use crate::peers::{check_tag, fingerprint, worth_logging, SourceChange};
use crate::stats::SharedState;

/// Reject reasons that mean a limit of the sink bit (logged at warn level,
/// once per interval).
const LIMIT_REASONS: &[&str] = &["seq_jump", "new_agent_rate", "too_many_agents"];

/// Where [`handle_datagram`] puts what it produces.
pub(super) struct Out<'a> {
    /// Accepted events.
    pub batch: &'a mut Batch,
    /// Agents seen for the first time.
    pub new_agents: &'a mut Vec<AgentInfo>,
    /// Limits that bit, logged once per interval.
    pub warn: &'a mut WarnEvery,
    /// Stamps the events of kinds without a time of their own.
    pub clock: &'a SinkClock,
}

impl Out<'_> {
    fn reborrow(&mut self) -> Out<'_> {
        Out {
            batch: self.batch,
            new_agents: self.new_agents,
            warn: self.warn,
            clock: self.clock,
        }
    }
}

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
pub(super) fn handle_datagram(
    st: &mut SharedState,
    out: Out<'_>,
    bytes: &[u8],
    src: SocketAddr,
    arrived: Instant,
) {
    st.rx.datagrams_received += 1;
    let reject = |st: &mut SharedState, reason, what: &dyn std::fmt::Display| {
        reject_datagram(st, src, reason, what)
    };
    // The header alone first: with a key, nothing else of an
    // unauthenticated datagram is looked at.
    let (h, off) = match DatagramHeaderRef::parse(bytes) {
        Ok(p) => p,
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
                    // Held datagrams passed the header and tag checks when
                    // they arrived; their header is read again here.
                    match DatagramHeaderRef::parse(&d.bytes) {
                        Ok((h, off)) => {
                            admit(st, out.reborrow(), &d.bytes, h, off, d.src, d.arrived)
                        }
                        Err(e) => reject_datagram(st, d.src, e.reason(), &e),
                    }
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
    admit(st, out, bytes, h, off, src, arrived);
}

/// The part of [`handle_datagram`] after authentication and freshness:
/// validate the rest of the datagram (its header `h`, records from `off`),
/// the replay window and the agent table, then batch its events.
///
/// The events are noted into the batch while the records are validated
/// (one walk over them, not a second one to batch them) and taken back
/// if the datagram is refused.
fn admit(
    st: &mut SharedState,
    out: Out<'_>,
    bytes: &[u8],
    h: DatagramHeaderRef<'_>,
    off: usize,
    src: SocketAddr,
    arrived: Instant,
) {
    let Out {
        batch,
        new_agents,
        warn,
        clock,
    } = out;
    let mark = batch.events.len();
    let noted = note_events(batch, clock, bytes, h, off);
    let (d, max_ts) = match noted {
        Ok(n) => n,
        Err(e) => {
            batch.events.truncate(mark);
            return reject_datagram(st, src, e.reason(), &e);
        }
    };
    match observe(st, new_agents, warn, &d, src, arrived) {
        Some(index) => take_events(batch, mark, max_ts, bytes, off, &d, index),
        None => batch.events.truncate(mark),
    }
}

/// Validate the records of the datagram (header `h`, records from `off`)
/// and note an event for each at the end of `batch.events`, agent index
/// not yet set; with the datagram and its largest timestamp.
fn note_events<'a>(
    batch: &mut Batch,
    clock: &SinkClock,
    bytes: &'a [u8],
    h: DatagramHeaderRef<'a>,
    off: usize,
) -> Result<(DatagramView<'a>, u64), tracer_codec::DecodeError> {
    let mark = batch.events.len();
    // Room for the events the header announces, but no more than the
    // bytes can hold (records are at least 4 bytes): a forged count
    // does not grow the batch.
    batch.reserve(0, usize::from(h.event_count).min(bytes.len() / 4));
    let start = batch.data.len();
    let mut max_ts = 0u64;
    // The sink's time is read only for kinds without a time of their own,
    // once per datagram.
    let mut now_ns = None;
    let d = DatagramView::parse_after_header_with(bytes, h, off, |at, rec| {
        let ts_ns = match rec.global_ns {
            Some(t) => t,
            None => *now_ns.get_or_insert_with(|| clock.now_ns()),
        };
        max_ts = max_ts.max(ts_ns);
        let k = (batch.events.len() - mark) as u64;
        batch.events.push(EventMeta {
            ts_ns,
            event_seq: h.first_event_seq.wrapping_add(k),
            agent: 0,
            start: (start + at) as u32,
            len: rec.raw.bytes.len() as u32,
            clock_source: h.clock_source,
            clock_state: h.clock_state,
        });
    })?;
    Ok((d, max_ts))
}

/// The replay window and the agent table for the validated datagram `d`:
/// its agent's index, or `None` when it is refused (and counted).
fn observe(
    st: &mut SharedState,
    new_agents: &mut Vec<AgentInfo>,
    warn: &mut WarnEvery,
    d: &DatagramView<'_>,
    src: SocketAddr,
    arrived: Instant,
) -> Option<u32> {
    let reject = |st: &mut SharedState, reason, what: &dyn std::fmt::Display| {
        reject_datagram(st, src, reason, what);
        None
    };
    let h = d.header();
    // Order matters: the tag (above) and the replay window (here) come
    // before the agent table, so a forged or replayed datagram neither
    // spends new-agent admission budget nor moves an agent's sequence.
    let known = st.agents.index_of(&AgentKey::of(h));
    let fp = fingerprint(d);
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
        _ => match st.agents.observe_known(known, h, src, arrived) {
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
    Some(index)
}

/// Keep the events noted from `mark` (of the accepted datagram `d`,
/// read from `bytes`, its records from `off`) under agent `index`, and
/// copy its records into the batch.
fn take_events(
    batch: &mut Batch,
    mark: usize,
    max_ts: u64,
    bytes: &[u8],
    off: usize,
    d: &DatagramView<'_>,
    index: u32,
) {
    if mark == 0 {
        batch.arrived = Instant::now();
    }
    // The records lie back to back between the header and the tag (the
    // view checked that they fill it exactly): one copy for all of them.
    let end = bytes.len() - if d.header().has_mac() { MAC_LEN } else { 0 };
    let Some(records) = bytes.get(off..end) else {
        batch.events.truncate(mark);
        return;
    };
    batch.data.extend_from_slice(records);
    for m in &mut batch.events[mark..] {
        m.agent = index;
    }
    batch.max_ts = batch.max_ts.max(max_ts);
}
