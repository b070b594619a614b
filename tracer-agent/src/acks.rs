//! What the sinks confirmed: the acknowledgements a sink sends back to the
//! agent's socket, summed over sink instances (a restarted sink starts its
//! counts again under a new instance id), so the agent can tell events
//! delivered into a file from events no sink has confirmed.

use std::time::Instant;

use serde::Serialize;
use tracer_auth::MacKey;
use tracer_codec::Ack;

/// Sink instances remembered one by one; older ones are folded into a sum
/// (their counts no longer change once a newer instance answers).
const MAX_SINKS: usize = 8;

/// What one sink instance said last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SinkAck {
    /// The sink process's random instance id.
    #[serde(serialize_with = "hex_u64")]
    pub instance: u64,
    /// Events numbered before the first one this sink received.
    pub preceding: u64,
    /// Events this sink wrote to its files.
    pub delivered: u64,
    /// Events this sink counted lost (sequence gaps, write failures).
    pub lost: u64,
    /// Events this sink accepted (delivered or on their way to the file).
    pub received: u64,
    #[serde(skip)]
    ack_seq: u64,
}

fn hex_u64<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{v:016x}"))
}

/// Why an acknowledgement was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckReject {
    /// Not an acknowledgement (or malformed).
    Malformed,
    /// A key is set and the ack has no tag or a wrong one.
    Unauthenticated,
    /// For another agent or another incarnation.
    NotOurs,
    /// It accounts for more events than this agent ever numbered: no sink
    /// sends that (a replayed datagram accepted by a sink would cause it).
    Implausible,
}

/// The agent's view of its deliveries.
#[derive(Debug)]
pub struct AckTracker {
    key: Option<MacKey>,
    agent_id: u64,
    boot_id: [u8; 16],
    incarnation: u64,
    sinks: Vec<SinkAck>,
    /// Delivered and lost of instances folded out of `sinks`.
    retired: (u64, u64),
    /// When the last accepted ack arrived.
    pub last_ack: Option<Instant>,
    /// The sink instance of the newest ack taken (0: none yet): the
    /// datagrams carry it, binding them to that sink process.
    bound: u64,
}

impl AckTracker {
    /// Acks for this agent incarnation; with `key`, only tagged ones.
    pub fn new(agent_id: u64, boot_id: [u8; 16], incarnation: u64, key: Option<MacKey>) -> Self {
        AckTracker {
            key,
            agent_id,
            boot_id,
            incarnation,
            sinks: Vec::new(),
            retired: (0, 0),
            last_ack: None,
            bound: 0,
        }
    }

    /// The sink instance the agent's datagrams are bound to (0: none yet).
    pub fn bound(&self) -> u64 {
        self.bound
    }

    /// Take one received datagram as an acknowledgement; `sequenced` is
    /// how many events the agent has numbered so far.
    pub fn on_datagram(
        &mut self,
        bytes: &[u8],
        sequenced: u64,
        now: Instant,
    ) -> Result<(), AckReject> {
        let (ack, tagged) = Ack::parse(bytes).map_err(|_| AckReject::Malformed)?;
        if let Some(key) = &self.key {
            match tagged {
                Some((signed, tag)) if key.verify(signed, tag) => {}
                _ => return Err(AckReject::Unauthenticated),
            }
        }
        if (ack.agent_id, ack.boot_id, ack.incarnation)
            != (self.agent_id, self.boot_id, self.incarnation)
        {
            return Err(AckReject::NotOurs);
        }
        let claimed = [ack.preceding_events, ack.delivered_events, ack.lost_events]
            .iter()
            .try_fold(0u64, |a, &b| a.checked_add(b));
        if claimed.is_none_or(|c| c > sequenced) || ack.received_events > sequenced {
            return Err(AckReject::Implausible);
        }
        self.last_ack = Some(now);
        let view = SinkAck {
            instance: ack.sink_instance,
            preceding: ack.preceding_events,
            delivered: ack.delivered_events,
            lost: ack.lost_events,
            received: ack.received_events,
            ack_seq: ack.ack_seq,
        };
        match self
            .sinks
            .iter_mut()
            .find(|s| s.instance == ack.sink_instance)
        {
            // Cumulative counts: the newest ack wins, an older one that
            // arrives late is ignored.
            Some(s) if s.ack_seq < ack.ack_seq => *s = view,
            // Not newer: neither its counts nor its instance are taken.
            Some(_) => return Ok(()),
            None => {
                if self.sinks.len() >= MAX_SINKS {
                    let old = self.sinks.remove(0);
                    self.retired.0 += old.delivered;
                    self.retired.1 += old.lost;
                }
                self.sinks.push(view);
            }
        }
        self.bound = ack.sink_instance;
        Ok(())
    }

    /// Events written to a file by some sink.
    pub fn delivered(&self) -> u64 {
        self.retired.0 + self.sinks.iter().map(|s| s.delivered).sum::<u64>()
    }

    /// Events some sink counted lost.
    pub fn lost(&self) -> u64 {
        self.retired.1 + self.sinks.iter().map(|s| s.lost).sum::<u64>()
    }

    /// What each sink instance said last, oldest first.
    pub fn sinks(&self) -> &[SinkAck] {
        &self.sinks
    }

    /// Whether the sink that answered last accounts for every event below
    /// `total` (so nothing sent to it is still on its way to the file).
    pub fn settled(&self, total: u64) -> bool {
        self.sinks
            .last()
            .is_some_and(|s| s.preceding + s.delivered + s.lost >= total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Events the agent of these tests has numbered.
    const SEQUENCED: u64 = 10_000;

    fn ack(instance: u64, seq: u64, delivered: u64, lost: u64) -> Ack {
        Ack {
            sink_instance: instance,
            ack_seq: seq,
            agent_id: 1,
            boot_id: [2; 16],
            incarnation: 3,
            preceding_events: 0,
            delivered_events: delivered,
            lost_events: lost,
            received_events: delivered.saturating_add(lost),
        }
    }

    #[test]
    fn counts_add_up_over_sink_instances_and_late_acks_are_ignored() {
        let now = Instant::now();
        let mut t = AckTracker::new(1, [2; 16], 3, None);
        t.on_datagram(&ack(10, 1, 100, 0).encode(), SEQUENCED, now)
            .unwrap();
        t.on_datagram(&ack(10, 3, 300, 2).encode(), SEQUENCED, now)
            .unwrap();
        t.on_datagram(&ack(10, 2, 200, 1).encode(), SEQUENCED, now)
            .unwrap();
        assert_eq!((t.delivered(), t.lost()), (300, 2));
        let mut b = ack(11, 1, 50, 0);
        b.preceding_events = 400;
        t.on_datagram(&b.encode(), SEQUENCED, now).unwrap();
        assert_eq!((t.delivered(), t.lost()), (350, 2));
        assert!(t.settled(450));
        assert!(!t.settled(451));
        for i in 0..20 {
            t.on_datagram(&ack(100 + i, 1, 1, 1).encode(), SEQUENCED, now)
                .unwrap();
        }
        assert_eq!(
            (t.delivered(), t.lost()),
            (370, 22),
            "retired sinks still count"
        );
        assert_eq!(t.sinks().len(), MAX_SINKS);
    }

    #[test]
    fn foreign_malformed_and_unauthenticated_acks_are_refused() {
        let now = Instant::now();
        let shared = tracer_auth::SharedKey::from_bytes(&[5; 32]).unwrap();
        let key = shared.mac_key(tracer_auth::Purpose::Ack);
        let mut t = AckTracker::new(1, [2; 16], 3, Some(key.clone()));
        let a = ack(10, 1, 100, 0);
        assert_eq!(
            t.on_datagram(&a.encode(), SEQUENCED, now),
            Err(AckReject::Unauthenticated)
        );
        let wrong = shared.mac_key(tracer_auth::Purpose::Datagram);
        assert_eq!(
            t.on_datagram(&a.encode_with_mac(|d| wrong.tag(d)), SEQUENCED, now),
            Err(AckReject::Unauthenticated)
        );
        assert_eq!(
            t.on_datagram(b"NTRC...", SEQUENCED, now),
            Err(AckReject::Malformed)
        );
        let mut other = a;
        other.incarnation = 4;
        assert_eq!(
            t.on_datagram(&other.encode_with_mac(|d| key.tag(d)), SEQUENCED, now),
            Err(AckReject::NotOurs)
        );
        assert_eq!(t.delivered(), 0);
        t.on_datagram(&a.encode_with_mac(|d| key.tag(d)), SEQUENCED, now)
            .unwrap();
        assert_eq!(t.delivered(), 100);
        // Without a key, tagged acks are taken too (the tag is not checked).
        let mut t = AckTracker::new(1, [2; 16], 3, None);
        t.on_datagram(&a.encode_with_mac(|d| key.tag(d)), SEQUENCED, now)
            .unwrap();
        assert_eq!(t.delivered(), 100);
    }

    #[test]
    fn acks_bind_the_agent_to_their_sink_and_implausible_ones_are_refused() {
        let now = Instant::now();
        let mut t = AckTracker::new(1, [2; 16], 3, None);
        assert_eq!(t.bound(), 0, "no sink heard yet");
        t.on_datagram(&ack(10, 5, 100, 0).encode(), 150, now)
            .unwrap();
        assert_eq!(t.bound(), 10);
        t.on_datagram(&ack(11, 1, 20, 0).encode(), 150, now)
            .unwrap();
        assert_eq!(t.bound(), 11, "a restarted sink's ack rebinds");
        // An older ack of the first instance (replayed, or late) does not.
        t.on_datagram(&ack(10, 4, 90, 0).encode(), 150, now)
            .unwrap();
        assert_eq!(t.bound(), 11);
        // More than the agent ever numbered: a sink fooled by a replay.
        assert_eq!(
            t.on_datagram(&ack(11, 2, 140, 20).encode(), 150, now),
            Err(AckReject::Implausible)
        );
        let mut over = ack(11, 3, 0, 0);
        over.received_events = 151;
        assert_eq!(
            t.on_datagram(&over.encode(), 150, now),
            Err(AckReject::Implausible)
        );
        let mut wrap = ack(11, 4, u64::MAX, 1);
        wrap.received_events = 0;
        assert_eq!(
            t.on_datagram(&wrap.encode(), 150, now),
            Err(AckReject::Implausible)
        );
        assert_eq!((t.delivered(), t.bound()), (120, 11));
    }
}
