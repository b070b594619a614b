//! Who sends each agent's datagrams and what the sink confirms back: per
//! agent incarnation, the source address (changes are counted and logged),
//! the replay window (with a key), sequence conflicts (without one), how
//! many of its events precede this sink's first, what reached the file,
//! and the acknowledgements sent to the agent.
//!
//! Kept beside the agent table ([`crate::agents`]) rather than inside it:
//! the table tracks sequences, this module tracks trust and delivery.

mod window;

use std::net::SocketAddr;

use tracer_auth::{MacKey, SharedKey};
use tracer_codec::{Ack, DatagramHeaderRef};

use crate::fasthash::IndexMap;

pub(crate) use window::fingerprint;
use window::Ring;
pub use window::{ReplayWindow, REPLAY_WINDOW};

/// Reject reasons of authentication, added to the sink's reasons.
pub const AUTH_REASONS: &[&str] = &["auth_missing", "auth_bad", "replay"];

/// Accepted datagrams whose fingerprints are remembered per agent, to tell
/// a conflicting datagram from a duplicate (no key). A forgery that races
/// the real datagram for the next sequence number is caught here: the real
/// one arrives right after. Small: every agent has these (16 bytes each),
/// also the invented ones of a sender that sprays agent ids.
const RECENT: usize = 8;
/// Datagrams that arrived ahead of sequence whose fingerprints are kept
/// longer: a forgery at a future sequence number is one of them.
const AHEAD: usize = 8;
/// An unchanged acknowledgement is repeated this many times (a lost ack
/// must not leave the agent in doubt), then no longer.
const ACK_REPEATS: u32 = 3;

/// The sink's keys, derived from `--key-file`.
#[derive(Debug, Clone)]
pub struct SinkKeys {
    /// Checks agent datagrams.
    pub datagram: MacKey,
    /// Tags acknowledgements.
    pub ack: MacKey,
    /// Authenticates the clock exchange responder.
    pub clock: MacKey,
}

impl SinkKeys {
    /// Every key the sink needs from the deployment key.
    pub fn from_shared(key: &SharedKey) -> Self {
        use tracer_auth::Purpose;
        SinkKeys {
            datagram: key.mac_key(Purpose::Datagram),
            ack: key.mac_key(Purpose::Ack),
            clock: key.mac_key(Purpose::ClockExchange),
        }
    }
}

/// Why a datagram fails authentication (`None`: it passes).
pub(crate) fn check_tag(
    key: &MacKey,
    bytes: &[u8],
    h: &DatagramHeaderRef<'_>,
) -> Option<&'static str> {
    match tracer_codec::mac_trailer(bytes, h) {
        None => Some("auth_missing"),
        Some((signed, tag)) if !key.verify(signed, tag) => Some("auth_bad"),
        Some(_) => None,
    }
}

/// One agent incarnation as its peer.
#[derive(Debug)]
pub struct Peer {
    /// Agent id, boot id and incarnation, echoed in acknowledgements.
    pub agent_id: u64,
    /// The agent host's boot id.
    pub boot_id: [u8; 16],
    /// Random per agent start (0 for a version-1 agent, which is not
    /// acknowledged: it would not read the acks).
    pub incarnation: u64,
    /// Where its latest accepted datagram came from (acks go there).
    pub source: SocketAddr,
    /// The source of its first datagram.
    pub first_source: SocketAddr,
    /// Times an accepted datagram came from another address than the one
    /// before.
    pub source_changes: u64,
    /// Events numbered before the first one this sink received (minus the
    /// late ones among them that arrived after all).
    pub preceding_events: u64,
    /// `first_event_seq` of the first datagram seen.
    first_event_seq: u64,
    /// Datagrams accepted although another datagram had the same sequence
    /// number with other content (no key: one of them is forged).
    pub seq_conflicts: u64,
    /// Events of those datagrams.
    pub conflict_events: u64,
    /// Events accepted (written or on their way to the file).
    pub received_events: u64,
    /// Events committed to a file.
    pub delivered_events: u64,
    /// Events accepted that the sink could not write.
    pub write_lost: u64,
    /// Seen datagrams (only with a key: without one, a sender that invents
    /// agents must not make the sink allocate a window for each).
    replay: Option<ReplayWindow>,
    /// Highest datagram sequence number accepted + 1.
    next_seq: u64,
    /// (seq, fingerprint) of the last accepted datagrams, a ring.
    recent: Ring<RECENT>,
    /// The same of the last ones that arrived ahead of sequence.
    ahead: Ring<AHEAD>,
    /// Counts in the last acknowledgement and how often it was sent.
    last_ack: (u64, u64, u64, u64),
    ack_repeats: u32,
}

impl Peer {
    /// Whether another datagram with `seq` but other content was accepted
    /// lately.
    pub(crate) fn conflicts_with(&self, seq: u64, fp: u64) -> bool {
        self.recent
            .iter()
            .chain(self.ahead.iter())
            .any(|&(s, f)| s == seq && f != fp)
    }

    /// Whether `seq` passes the replay window (always, without a key).
    pub(crate) fn is_fresh(&self, seq: u64) -> bool {
        self.replay.as_ref().is_none_or(|w| w.is_fresh(seq))
    }

    /// Highest datagram sequence number accepted + 1.
    pub(crate) fn seq_top(&self) -> u64 {
        self.next_seq
    }

    /// The key of its agent incarnation.
    pub(crate) fn key(&self) -> crate::agents::AgentKey {
        crate::agents::AgentKey {
            agent_id: self.agent_id,
            boot_id: self.boot_id,
            incarnation: self.incarnation,
        }
    }

    /// Its part of the comment of its Interface Statistics Block.
    ///
    /// preceding_events: this agent's events numbered before the first one
    /// this sink received (sent before it started or while no sink
    /// listened): in none of this sink's files and not in isb_ifdrop, so
    /// that preceding_events + events + isb_ifdrop accounts for every event
    /// the agent numbered.
    pub fn isb_comment(&self) -> String {
        format!(
            " preceding_events={} incarnation={:016x} source={} first_source={} source_changes={} seq_conflicts={} conflict_events={}",
            self.preceding_events,
            self.incarnation,
            self.source,
            self.first_source,
            self.source_changes,
            self.seq_conflicts,
            self.conflict_events
        )
    }
}

/// What [`PeerTable::accepted`] noticed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SourceChange {
    /// Same source as before (or the first datagram).
    Same,
    /// From another address than the previous datagram.
    Changed {
        /// The address before.
        from: SocketAddr,
        /// How many changes so far.
        count: u64,
    },
}

/// Peers by agent index (the agent table's), and the acknowledgement state.
/// A peer leaves with its agent when that expires ([`PeerTable::remove`]),
/// so the table is bounded like the agent table.
#[derive(Debug)]
pub struct PeerTable {
    peers: IndexMap<Peer>,
    /// Random per sink process (the agent adds up counts per instance).
    pub instance: u64,
    ack_seq: u64,
    /// Keys, when the sink has `--key-file`.
    keys: Option<SinkKeys>,
}

impl PeerTable {
    /// An empty table; `keys` turns on the replay window and tagged acks.
    pub fn new(keys: Option<SinkKeys>) -> Self {
        PeerTable {
            peers: IndexMap::default(),
            instance: rand_u64(),
            ack_seq: 0,
            keys,
        }
    }

    /// Whether the sink checks tags.
    pub fn keys(&self) -> Option<&SinkKeys> {
        self.keys.as_ref()
    }

    /// The peer of agent `index`, if it was accepted once.
    pub fn get(&self, index: u32) -> Option<&Peer> {
        self.peers.get(&index)
    }

    fn get_mut(&mut self, index: u32) -> Option<&mut Peer> {
        self.peers.get_mut(&index)
    }

    /// Forget the peer of agent `index` (its agent expired).
    pub(crate) fn remove(&mut self, index: u32) -> Option<Peer> {
        self.peers.remove(&index)
    }

    /// Account an accepted datagram of agent `index` from `src`.
    pub(crate) fn accepted(
        &mut self,
        index: u32,
        h: &DatagramHeaderRef<'_>,
        fp: u64,
        src: SocketAddr,
        conflict: bool,
    ) -> SourceChange {
        let events = u64::from(h.event_count);
        let keyed = self.keys.is_some();
        let p = self.peers.entry(index).or_insert_with(|| Peer {
            agent_id: h.agent_id,
            boot_id: h.boot_id,
            incarnation: h.incarnation,
            source: src,
            first_source: src,
            source_changes: 0,
            preceding_events: h.first_event_seq,
            first_event_seq: h.first_event_seq,
            seq_conflicts: 0,
            conflict_events: 0,
            received_events: 0,
            delivered_events: 0,
            write_lost: 0,
            replay: keyed.then(ReplayWindow::default),
            next_seq: h.seq,
            recent: Ring::default(),
            ahead: Ring::default(),
            last_ack: (u64::MAX, 0, 0, 0),
            ack_repeats: 0,
        });
        p.received_events += events;
        if conflict {
            p.seq_conflicts += 1;
            p.conflict_events += events;
        } else if h.first_event_seq < p.first_event_seq {
            // A late datagram from before the first one seen: its events
            // are in this file after all.
            p.preceding_events = p.preceding_events.saturating_sub(events);
        }
        if let Some(w) = p.replay.as_mut() {
            w.mark(h.seq);
        }
        let entry = (h.seq, fp);
        if h.seq > p.next_seq {
            p.ahead.push(entry);
        }
        p.recent.push(entry);
        p.next_seq = p.next_seq.max(h.seq.saturating_add(1));
        if p.source != src {
            let from = p.source;
            p.source = src;
            p.source_changes += 1;
            return SourceChange::Changed {
                from,
                count: p.source_changes,
            };
        }
        SourceChange::Same
    }

    /// Events of agent `index` committed to a file (`delivered`) or given
    /// up (`lost`) by the writer.
    pub(crate) fn add_delivery(&mut self, index: u32, delivered: u64, lost: u64) {
        if let Some(p) = self.get_mut(index) {
            p.delivered_events += delivered;
            p.write_lost += lost;
        }
    }

    /// The acknowledgements due now: for every peer whose counts changed
    /// (each unchanged one is repeated [`ACK_REPEATS`] times, then not
    /// again until something changes), where to send it and its bytes.
    /// `gaps(index)` is the agent table's net event gaps of that agent.
    pub(crate) fn due_acks(&mut self, gaps: impl Fn(u32) -> u64) -> Vec<(SocketAddr, Vec<u8>)> {
        let mut indices: Vec<u32> = self.peers.keys().copied().collect();
        indices.sort_unstable();
        self.due_acks_for(indices, gaps)
    }

    /// [`due_acks`](Self::due_acks) of the agents in `indices` only.
    pub(crate) fn due_acks_for(
        &mut self,
        indices: impl IntoIterator<Item = u32>,
        gaps: impl Fn(u32) -> u64,
    ) -> Vec<(SocketAddr, Vec<u8>)> {
        let mut out = Vec::new();
        for i in indices {
            let Some(p) = self.peers.get_mut(&i) else {
                continue;
            };
            if p.incarnation == 0 {
                continue; // a version-1 agent does not read acknowledgements
            }
            let lost = gaps(i) + p.write_lost;
            let now = (
                p.preceding_events,
                p.delivered_events,
                lost,
                p.received_events,
            );
            if now == p.last_ack {
                if p.ack_repeats >= ACK_REPEATS {
                    continue;
                }
                p.ack_repeats += 1;
            } else {
                p.last_ack = now;
                p.ack_repeats = 1;
            }
            self.ack_seq += 1;
            let ack = Ack {
                sink_instance: self.instance,
                ack_seq: self.ack_seq,
                agent_id: p.agent_id,
                boot_id: p.boot_id,
                incarnation: p.incarnation,
                preceding_events: now.0,
                delivered_events: now.1,
                lost_events: now.2,
                received_events: now.3,
            };
            let bytes = match &self.keys {
                Some(k) => ack.encode_with_mac(|d| k.ack.tag(d)),
                None => ack.encode().to_vec(),
            };
            out.push((p.source, bytes));
        }
        out
    }
}

impl PeerTable {
    /// An acknowledgement with nothing to account for yet, sent to an
    /// incarnation whose datagrams are held (see [`crate::freshness`]):
    /// its `sink_instance` is what the agent binds its datagrams to.
    pub(crate) fn binding_ack(&mut self, key: &crate::agents::AgentKey) -> Option<Vec<u8>> {
        let keys = self.keys.as_ref()?;
        self.ack_seq += 1;
        let ack = Ack {
            sink_instance: self.instance,
            ack_seq: self.ack_seq,
            agent_id: key.agent_id,
            boot_id: key.boot_id,
            incarnation: key.incarnation,
            ..Ack::default()
        };
        Some(ack.encode_with_mac(|d| keys.ack.tag(d)))
    }
}

/// Logs a warning the first time and then at powers of two, so a flood of
/// one kind of event cannot flood the log.
pub(crate) fn worth_logging(count: u64) -> bool {
    count <= 1 || count.is_power_of_two()
}

/// A random u64 from the kernel (the time and pid if that fails).
fn rand_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most `b.len()` bytes into the buffer we own.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n == b.len() as isize {
        return u64::from_ne_bytes(b);
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (u64::from(std::process::id()) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worth_logging_thins_out() {
        let logged: Vec<u64> = (1..=20).filter(|&n| worth_logging(n)).collect();
        assert_eq!(logged, [1, 2, 4, 8, 16]);
    }
}
