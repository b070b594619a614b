//! Batching: events in, datagrams out. Keeps the per-agent sequence
//! numbers the sink uses to detect loss.

use std::time::{Duration, Instant};

use tracer_codec::{
    ClockEvent, ClockSource, ClockState, DatagramBuilder, DatagramHeader, TxEvent, WireEvent,
    WIRE_VERSION,
};

use crate::sender::Transport;
use crate::stats::AgentStats;

/// Identity stamped on every datagram.
#[derive(Debug, Clone)]
pub struct AgentIdentity {
    /// Random per process unless configured.
    pub agent_id: u64,
    /// /proc/sys/kernel/random/boot_id.
    pub boot_id: [u8; 16],
    /// Name of this host in the trace.
    pub hostname: String,
}

/// Builds datagrams from events and hands them to a transport.
pub struct Pipeline<T: Transport> {
    transport: T,
    builder: DatagramBuilder,
    header: DatagramHeader,
    next_seq: u64,
    next_event_seq: u64,
    pending_since: Option<Instant>,
    flush_after: Duration,
    /// `lost_events` as last sent: a change is sent even with no events.
    sent_lost: u64,
    /// Counters, shared with the stats printer.
    pub stats: AgentStats,
}

impl<T: Transport> Pipeline<T> {
    /// A pipeline sending datagrams of at most `max_payload` bytes, and
    /// partial ones once their first event is `flush_after` old.
    pub fn new(
        id: &AgentIdentity,
        transport: T,
        max_payload: usize,
        flush_after: Duration,
    ) -> Self {
        Pipeline {
            transport,
            builder: DatagramBuilder::new(&id.hostname, max_payload),
            header: DatagramHeader {
                version: WIRE_VERSION,
                agent_id: id.agent_id,
                boot_id: id.boot_id,
                seq: 0,
                lost_events: 0,
                first_event_seq: 0,
                clock_source: ClockSource::System as u8,
                clock_state: ClockState::Unlocked as u8,
                event_count: 0,
                hostname: id.hostname.clone(),
            },
            next_seq: 0,
            next_event_seq: 0,
            pending_since: None,
            flush_after,
            sent_lost: 0,
            stats: AgentStats::default(),
        }
    }

    /// Set the clock fields of the next datagrams.
    pub fn set_clock(&mut self, source: ClockSource, state: ClockState) {
        self.header.clock_source = source as u8;
        self.header.clock_state = state as u8;
    }

    /// Set the cumulative count of events lost before reaching the pipeline.
    pub fn set_lost_events(&mut self, lost: u64) {
        self.header.lost_events = lost;
    }

    /// Queue one TX event (counted by stage), sending a datagram when full.
    pub fn push(&mut self, ev: &TxEvent) {
        if let Some(c) = self.stats.events_by_stage.get_mut(ev.stage as usize) {
            *c += 1;
        }
        self.push_event(ev);
    }

    /// Queue one RX stage event.
    pub fn push_rx(&mut self, ev: &tracer_codec::RxEvent) {
        if let Some(c) = self.stats.rx_events_by_stage.get_mut(ev.stage as usize) {
            *c += 1;
        }
        self.push_event(ev);
    }

    /// Queue one clock update.
    pub fn push_clock(&mut self, ev: &ClockEvent) {
        self.stats.clock_events += 1;
        self.push_event(ev);
    }

    /// Queue one event of any kind, sending a datagram when it is full.
    /// The kind's own counters are the caller's.
    pub fn push_event<E: WireEvent>(&mut self, ev: &E) {
        if !self.builder.push(ev) {
            self.flush();
            // An empty builder always has room for one event.
            let pushed = self.builder.push(ev);
            debug_assert!(pushed);
        }
        if self.pending_since.is_none() {
            self.pending_since = Some(Instant::now());
        }
    }

    /// Send the pending datagram if its oldest event waited long enough,
    /// or an empty one if new losses have not been reported yet.
    pub fn tick(&mut self, now: Instant) {
        let due = self
            .pending_since
            .is_some_and(|t| now.duration_since(t) >= self.flush_after);
        if due || (self.builder.is_empty() && self.header.lost_events != self.sent_lost) {
            self.send_datagram();
        }
    }

    /// Send whatever is pending, and the latest loss count even if no
    /// event is pending (so losses at the very end still reach the sink).
    pub fn flush(&mut self) {
        if !self.builder.is_empty() || self.header.lost_events != self.sent_lost {
            self.send_datagram();
        }
    }

    fn send_datagram(&mut self) {
        let count = self.builder.count() as u64;
        self.header.seq = self.next_seq;
        self.header.first_event_seq = self.next_event_seq;
        let bytes = self.builder.finish(&self.header);
        // Sequence numbers advance even if the send fails: the sink then
        // sees the gap and counts the loss.
        self.next_seq += 1;
        self.next_event_seq += count;
        self.pending_since = None;
        self.sent_lost = self.header.lost_events;
        match self.transport.send(&bytes) {
            Ok(()) => {
                self.stats.datagrams += 1;
                self.stats.bytes += bytes.len() as u64;
            }
            Err(e) => {
                if self.stats.send_errors == 0 || self.stats.send_errors.is_power_of_two() {
                    tracing::warn!(error = %e, failures = self.stats.send_errors + 1, "sending to the sink failed; is tracer-sink running and reachable?");
                }
                self.stats.send_errors += 1;
                self.stats.events_unsent += count;
            }
        }
    }

    /// The transport (tests).
    pub fn transport(&self) -> &T {
        &self.transport
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracer_codec::Datagram;

    #[derive(Default)]
    struct Capture {
        sent: Vec<Vec<u8>>,
        fail_next: bool,
    }

    impl Transport for Capture {
        fn send(&mut self, d: &[u8]) -> std::io::Result<()> {
            if std::mem::take(&mut self.fail_next) {
                return Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
            }
            self.sent.push(d.to_vec());
            Ok(())
        }
    }

    fn id() -> AgentIdentity {
        AgentIdentity {
            agent_id: 42,
            boot_id: [1; 16],
            hostname: "h1".into(),
        }
    }

    #[test]
    fn fills_datagrams_to_the_limit_and_numbers_them() {
        let mut p = Pipeline::new(&id(), Capture::default(), 1472, Duration::from_secs(60));
        for i in 0..100u64 {
            p.push(&TxEvent {
                cookie: i,
                ..TxEvent::default()
            });
        }
        p.flush();
        let sent = &p.transport().sent;
        assert!(sent.iter().all(|d| d.len() <= 1472));
        let mut next_event = 0;
        let mut cookies = Vec::new();
        for (i, d) in sent.iter().enumerate() {
            let d = Datagram::decode(d).unwrap();
            assert_eq!(d.header.seq, i as u64);
            assert_eq!(d.header.first_event_seq, next_event);
            next_event += d.records.len() as u64;
            for (_, e) in d.records {
                if let tracer_codec::Event::Tx(t) = e {
                    cookies.push(t.cookie);
                }
            }
        }
        assert_eq!(cookies, (0..100).collect::<Vec<_>>());
        // 1472 bytes hold 12 events of 114 bytes behind a 63-byte header.
        assert_eq!(sent.len(), 100usize.div_ceil(12));
    }

    #[test]
    fn failed_send_leaves_a_gap_the_sink_can_count() {
        let mut p = Pipeline::new(&id(), Capture::default(), 1472, Duration::from_secs(60));
        p.push(&TxEvent::default());
        p.flush();
        p.transport.fail_next = true;
        p.push(&TxEvent::default());
        p.push(&TxEvent::default());
        p.flush();
        p.push(&TxEvent::default());
        p.flush();
        let seqs: Vec<(u64, u64)> = p
            .transport()
            .sent
            .iter()
            .map(|d| {
                let d = Datagram::decode(d).unwrap();
                (d.header.seq, d.header.first_event_seq)
            })
            .collect();
        assert_eq!(seqs, vec![(0, 0), (2, 3)]);
        assert_eq!((p.stats.send_errors, p.stats.events_unsent), (1, 2));
    }

    #[test]
    fn losses_are_reported_even_without_events() {
        let mut p = Pipeline::new(&id(), Capture::default(), 1472, Duration::from_millis(50));
        p.flush();
        assert!(p.transport().sent.is_empty(), "nothing to say");
        p.set_lost_events(7);
        p.tick(Instant::now());
        let d = Datagram::decode(&p.transport().sent[0]).unwrap();
        assert_eq!((d.header.lost_events, d.header.event_count), (7, 0));
        p.tick(Instant::now());
        assert_eq!(p.transport().sent.len(), 1, "reported once");
    }

    #[test]
    fn partial_datagram_waits_for_flush_interval() {
        let mut p = Pipeline::new(&id(), Capture::default(), 1472, Duration::from_millis(50));
        p.push(&TxEvent::default());
        p.tick(Instant::now());
        assert!(p.transport().sent.is_empty());
        p.tick(Instant::now() + Duration::from_millis(60));
        assert_eq!(p.transport().sent.len(), 1);
    }
}
