//! Batching: events in, datagrams out. Keeps the per-agent sequence
//! numbers the sink uses to detect loss, tags datagrams when a key is set,
//! and takes the sink's acknowledgements to tell delivered events from
//! unconfirmed ones.

use std::time::{Duration, Instant};

use tracer_auth::MacKey;
use tracer_codec::{
    ClockEvent, ClockSource, ClockState, CpuEvent, DatagramBuilder, DatagramHeader, TxEvent,
    WireEvent, ACK_LEN, MAC_LEN, WIRE_VERSION,
};

use crate::acks::{AckReject, AckTracker};
use crate::sender::{BatchSent, Transport};
use crate::stats::AgentStats;

/// Without an acknowledgement for this long (after having had some), the
/// agent warns that the sink stopped confirming.
const ACK_SILENCE_WARNING: Duration = Duration::from_secs(5);
/// Longest time between two reads of the socket for acknowledgements
/// while every event sent is confirmed and nothing was sent since: a
/// restarted sink holds an agent's datagrams for 5 s until it binds.
const ACK_READ_IDLE: Duration = Duration::from_secs(1);

/// Identity stamped on every datagram.
#[derive(Debug, Clone)]
pub struct AgentIdentity {
    /// Random per process unless configured.
    pub agent_id: u64,
    /// /proc/sys/kernel/random/boot_id.
    pub boot_id: [u8; 16],
    /// Name of this host in the trace.
    pub hostname: String,
    /// Random per process start, never 0: tells this run from an earlier
    /// one with the same `agent_id`.
    pub incarnation: u64,
}

impl AgentIdentity {
    /// A fresh random incarnation id (never 0, which means "version 1").
    pub fn new_incarnation() -> u64 {
        rand::random::<u64>() | 1
    }
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
    /// Tags datagrams when set.
    key: Option<MacKey>,
    hostname: String,
    max_payload: usize,
    acks: AckTracker,
    /// Whether the warning about acks that stopped was given for the
    /// current silence.
    silence_warned: bool,
    /// A datagram went out since the socket was last read for acks.
    sent_unread: bool,
    /// When the socket was last read for acks.
    acks_read_at: Option<Instant>,
    /// Finished datagrams not handed to the kernel yet, end to end, and
    /// their lengths and event counts: sent in one batch (UDP GSO or
    /// sendmmsg) when full, when a partial datagram ends it, or at the
    /// next tick.
    batch: Vec<u8>,
    batch_lens: Vec<usize>,
    batch_events: Vec<u64>,
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
                flags: 0,
                incarnation: id.incarnation,
                sink_instance: 0,
                sent_mono_ns: 0,
                hostname: id.hostname.clone(),
            },
            next_seq: 0,
            next_event_seq: 0,
            pending_since: None,
            flush_after,
            sent_lost: 0,
            key: None,
            hostname: id.hostname.clone(),
            max_payload,
            acks: AckTracker::new(id.agent_id, id.boot_id, id.incarnation, None),
            silence_warned: false,
            sent_unread: false,
            acks_read_at: None,
            batch: Vec::new(),
            batch_lens: Vec::new(),
            batch_events: Vec::new(),
            stats: AgentStats::default(),
        }
    }

    /// Tag every datagram with `datagram` and take only acknowledgements
    /// tagged with `ack`. Call before the first event.
    pub fn with_keys(mut self, datagram: MacKey, ack: MacKey) -> Self {
        self.builder = DatagramBuilder::new(&self.hostname, self.max_payload).with_mac_room();
        self.key = Some(datagram);
        self.acks = AckTracker::new(
            self.header.agent_id,
            self.header.boot_id,
            self.header.incarnation,
            Some(ack),
        );
        self
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

    /// Queue one CPU cost sample (its `global_ns` already converted by the
    /// caller, as for every other kind), sending a datagram when full.
    pub fn push_cpu(&mut self, ev: &CpuEvent) {
        self.stats.cpu_events += 1;
        self.push_event(ev);
    }

    /// Queue one event of any kind, sending a datagram when it is full.
    /// The kind's own counters are the caller's.
    pub fn push_event<E: WireEvent>(&mut self, ev: &E) {
        if !self.builder.push(ev) {
            self.finish_datagram(true);
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
            self.finish_datagram(false);
        }
        self.send_batch();
        if self.acks_may_wait(now) {
            return;
        }
        self.poll_acks(now);
    }

    /// Whether reading the socket for acknowledgements can wait: every
    /// event sent is confirmed, nothing was sent since the last read, and
    /// that read is recent. An idle agent then makes no receive call per
    /// drain (it was 14 % of an idle agent's CPU); a send makes the next
    /// tick read, which also sees a refusal (ICMP port unreachable).
    fn acks_may_wait(&self, now: Instant) -> bool {
        !self.sent_unread
            && self.acks.settled(self.next_event_seq)
            && self
                .acks_read_at
                .is_some_and(|t| now.saturating_duration_since(t) < ACK_READ_IDLE)
    }

    /// Read every acknowledgement queued on the socket and refresh the
    /// delivery counters.
    pub fn poll_acks(&mut self, now: Instant) {
        self.sent_unread = false;
        self.acks_read_at = Some(now);
        let mut buf = [0u8; ACK_LEN + MAC_LEN + 64];
        loop {
            match self.transport.recv(&mut buf) {
                Ok(Some(n)) => match self.acks.on_datagram(&buf[..n], self.next_event_seq, now) {
                    Ok(()) => {
                        self.stats.acks += 1;
                        self.silence_warned = false;
                    }
                    Err(why) => {
                        if self.stats.acks_rejected == 0 {
                            let hint = match why {
                                AckReject::Unauthenticated => "it is not tagged with this agent's --key-file: does the sink use the same key?",
                                AckReject::NotOurs => "it is for another agent or an earlier run",
                                AckReject::Malformed => "it is not an acknowledgement",
                                AckReject::Implausible => "it accounts for more events than this agent sent (a sink that took replayed datagrams?)",
                            };
                            tracing::warn!(reason = ?why, "ignored a datagram from the sink's address: {hint}");
                        }
                        self.stats.acks_rejected += 1;
                    }
                },
                Ok(None) => break,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    // ICMP port unreachable: nothing listens at the sink's
                    // address, so what was just sent is in no file.
                    if self.stats.sink_unreachable == 0
                        || self.stats.sink_unreachable.is_power_of_two()
                    {
                        tracing::warn!(times = self.stats.sink_unreachable + 1,
                            "the sink's port is closed (ICMP port unreachable): is tracer-sink running? \
                             Events sent meanwhile stay unconfirmed");
                    }
                    self.stats.sink_unreachable += 1;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "reading acknowledgements");
                    break;
                }
            }
        }
        if let Some(last) = self.acks.last_ack {
            if !self.silence_warned && now.saturating_duration_since(last) >= ACK_SILENCE_WARNING {
                self.silence_warned = true;
                tracing::warn!(silent_s = now.saturating_duration_since(last).as_secs(),
                    "no acknowledgement from the sink for a while: events sent since are counted as unconfirmed");
            }
        }
        self.refresh_delivery();
    }

    /// After the last flush: wait up to `timeout` for the sink to confirm
    /// everything sent (only when it has acknowledged before: an older
    /// sink never does). Returns whether everything was accounted for.
    pub fn wait_for_acks(&mut self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        loop {
            let now = Instant::now();
            self.poll_acks(now);
            if self.acks.settled(self.next_event_seq) {
                return true;
            }
            if self.acks.last_ack.is_none() || now >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn refresh_delivery(&mut self) {
        let s = &mut self.stats;
        s.events_sequenced = self.next_event_seq;
        s.events_delivered = self.acks.delivered();
        s.events_sink_lost = self.acks.lost();
        s.events_unconfirmed = self
            .next_event_seq
            .saturating_sub(s.events_delivered + s.events_sink_lost);
        s.sinks.clear();
        s.sinks.extend_from_slice(self.acks.sinks());
    }

    /// Send whatever is pending, and the latest loss count even if no
    /// event is pending (so losses at the very end still reach the sink).
    pub fn flush(&mut self) {
        if !self.builder.is_empty() || self.header.lost_events != self.sent_lost {
            self.finish_datagram(false);
        }
        self.send_batch();
    }

    /// Frame the pending events into the batch. A `full` datagram (the
    /// next event did not fit) is padded to the transport's segment size
    /// when it batches with UDP GSO; any other ends the batch, which goes
    /// out now, as does a batch that reached its size.
    fn finish_datagram(&mut self, full: bool) {
        let shape = self.transport.batch_shape();
        let count = self.builder.count() as u64;
        self.header.seq = self.next_seq;
        self.header.first_event_seq = self.next_event_seq;
        // Bound to the sink that acknowledged last, and stamped with when
        // it left: what lets a sink with a key tell a replay (wire v3).
        self.header.sink_instance = self.acks.bound();
        self.header.sent_mono_ns = clocksync::now_ns(clocksync::ClockId::Monotonic).unwrap_or(0);
        let pad_to = if full { shape.segment } else { None };
        let key = &self.key;
        let len = self.builder.finish_into(
            &self.header,
            pad_to,
            key.as_ref().map(|k| move |d: &[u8]| k.tag(d)),
            &mut self.batch,
        );
        self.batch_lens.push(len);
        self.batch_events.push(count);
        // Sequence numbers advance even if the send fails: the sink then
        // sees the gap and counts the loss.
        self.next_seq += 1;
        self.next_event_seq += count;
        self.pending_since = None;
        self.sent_lost = self.header.lost_events;
        self.stats.events_sequenced = self.next_event_seq;
        if !full || self.batch_lens.len() >= shape.max_datagrams {
            self.send_batch();
        }
    }

    /// Hand the batch to the kernel and count what went and what did not.
    fn send_batch(&mut self) {
        if self.batch_lens.is_empty() {
            return;
        }
        let BatchSent {
            datagrams,
            calls,
            error,
        } = self.transport.send_batch(&self.batch, &self.batch_lens);
        self.sent_unread = true;
        self.stats.send_calls += calls as u64;
        self.stats.datagrams += datagrams as u64;
        self.stats.bytes += self.batch_lens[..datagrams].iter().sum::<usize>() as u64;
        if let Some(e) = error {
            let failed = self.batch_lens.len() - datagrams;
            if e.kind() == std::io::ErrorKind::ConnectionRefused {
                // ICMP port unreachable, reported on this send.
                self.stats.sink_unreachable += 1;
            }
            if self.stats.send_errors == 0 || self.stats.send_errors.is_power_of_two() {
                tracing::warn!(error = %e, failures = self.stats.send_errors + 1, datagrams = failed,
                    "sending to the sink failed; is tracer-sink running and reachable?");
            }
            self.stats.send_errors += failed as u64;
            self.stats.events_unsent += self.batch_events[datagrams..].iter().sum::<u64>();
        }
        self.batch.clear();
        self.batch_lens.clear();
        self.batch_events.clear();
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
        /// Datagrams "from the sink", read by `recv`.
        inbox: std::collections::VecDeque<Vec<u8>>,
        /// Batches as a GSO transport takes them (default: one by one).
        shape: Option<crate::sender::BatchShape>,
        /// Datagram counts of the batches given.
        batches: Vec<usize>,
        /// Calls of `recv`.
        reads: usize,
    }

    impl Transport for Capture {
        fn batch_shape(&self) -> crate::sender::BatchShape {
            self.shape.unwrap_or_default()
        }

        fn send_batch(&mut self, buf: &[u8], lens: &[usize]) -> BatchSent {
            self.batches.push(lens.len());
            let mut sent = BatchSent {
                calls: 1,
                ..BatchSent::default()
            };
            if std::mem::take(&mut self.fail_next) {
                sent.error = Some(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
                return sent;
            }
            let mut off = 0;
            for &l in lens {
                self.sent.push(buf[off..off + l].to_vec());
                off += l;
            }
            sent.datagrams = lens.len();
            sent
        }

        fn send(&mut self, d: &[u8]) -> std::io::Result<()> {
            if std::mem::take(&mut self.fail_next) {
                return Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
            }
            self.sent.push(d.to_vec());
            Ok(())
        }

        fn recv(&mut self, buf: &mut [u8]) -> std::io::Result<Option<usize>> {
            self.reads += 1;
            Ok(self.inbox.pop_front().map(|d| {
                buf[..d.len()].copy_from_slice(&d);
                d.len()
            }))
        }
    }

    fn ack(
        instance: u64,
        seq: u64,
        preceding: u64,
        delivered: u64,
        lost: u64,
    ) -> tracer_codec::Ack {
        tracer_codec::Ack {
            sink_instance: instance,
            ack_seq: seq,
            agent_id: 42,
            boot_id: [1; 16],
            incarnation: 7,
            preceding_events: preceding,
            delivered_events: delivered,
            lost_events: lost,
            received_events: delivered + lost,
        }
    }

    #[test]
    fn keyed_datagrams_check_and_acks_split_delivered_lost_unconfirmed() {
        let shared = tracer_auth::SharedKey::from_bytes(&[4; 32]).unwrap();
        let dk = shared.mac_key(tracer_auth::Purpose::Datagram);
        let ak = shared.mac_key(tracer_auth::Purpose::Ack);
        let mut p = Pipeline::new(&id(), Capture::default(), 1472, Duration::from_secs(60))
            .with_keys(dk.clone(), ak.clone());
        for _ in 0..30 {
            p.push(&TxEvent::default());
        }
        p.flush();
        for d in &p.transport().sent {
            assert!(d.len() <= 1472);
            let v = tracer_codec::DatagramView::parse(d).unwrap();
            assert_eq!(v.header().incarnation, 7);
            let (signed, tag) = tracer_codec::mac_trailer(d, v.header()).expect("tagged");
            assert!(dk.verify(signed, tag));
        }
        // First sink: 20 written, 2 lost; it is killed; the second sink
        // starts at event 25 and writes 5. An untagged ack is refused.
        p.transport
            .inbox
            .push_back(ack(1, 1, 0, 20, 2).encode_with_mac(|d| ak.tag(d)).to_vec());
        p.transport
            .inbox
            .push_back(ack(2, 1, 25, 5, 0).encode().to_vec());
        p.poll_acks(Instant::now());
        assert_eq!(p.stats.acks_rejected, 1);
        assert_eq!(
            (
                p.stats.events_sequenced,
                p.stats.events_delivered,
                p.stats.events_sink_lost,
                p.stats.events_unconfirmed
            ),
            (30, 20, 2, 8)
        );
        assert!(
            !p.wait_for_acks(Duration::ZERO),
            "the second sink has not confirmed yet"
        );
        p.transport
            .inbox
            .push_back(ack(2, 2, 25, 5, 0).encode_with_mac(|d| ak.tag(d)).to_vec());
        assert!(p.wait_for_acks(Duration::from_millis(10)));
        assert_eq!(
            (p.stats.events_delivered, p.stats.events_unconfirmed),
            (25, 3)
        );
        assert_eq!(p.stats.sinks.len(), 2);
        let table = p.stats.table();
        assert!(table.contains("unconfirmed"), "{table}");
    }

    #[test]
    fn a_confirmed_idle_pipeline_reads_acks_only_after_a_send_or_a_second() {
        let mut p = Pipeline::new(&id(), Capture::default(), 1472, Duration::ZERO);
        let t0 = Instant::now();
        let reads = |p: &Pipeline<Capture>| p.transport.reads;
        p.push(&TxEvent::default());
        p.tick(t0);
        assert_eq!(p.transport.sent.len(), 1);
        // Sent and not confirmed: every tick reads, until the ack comes.
        assert_eq!(reads(&p), 1);
        p.tick(t0);
        assert_eq!(reads(&p), 2);
        p.transport
            .inbox
            .push_back(ack(1, 1, 0, 1, 0).encode().to_vec());
        p.tick(t0);
        assert_eq!((reads(&p), p.stats.events_unconfirmed), (4, 0));
        // Confirmed, nothing sent: the socket is left alone...
        for ms in [1, 10, 999] {
            p.tick(t0 + Duration::from_millis(ms));
        }
        assert_eq!(reads(&p), 4);
        // ...for at most a second,
        p.tick(t0 + Duration::from_secs(1));
        assert_eq!(reads(&p), 5);
        // and a send makes the next tick read (a refusal or a new sink's
        // request to bind comes that way).
        p.push(&TxEvent::default());
        p.tick(t0 + Duration::from_secs(1));
        assert_eq!(reads(&p), 6);
    }

    #[test]
    fn a_refused_send_counts_as_unreachable_and_stays_unconfirmed() {
        let mut p = Pipeline::new(&id(), Capture::default(), 1472, Duration::from_secs(60));
        p.transport.fail_next = true;
        p.push(&TxEvent::default());
        p.flush();
        p.poll_acks(Instant::now());
        assert_eq!(p.stats.sink_unreachable, 1);
        assert_eq!(
            (p.stats.events_sequenced, p.stats.events_unconfirmed),
            (1, 1)
        );
        assert!(p.stats.table().contains("no acknowledgement received"));
        // Without any ack there is nothing to wait for at exit.
        let t = Instant::now();
        assert!(!p.wait_for_acks(Duration::from_secs(5)));
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    fn id() -> AgentIdentity {
        AgentIdentity {
            agent_id: 42,
            boot_id: [1; 16],
            hostname: "h1".into(),
            incarnation: 7,
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
        // 1472 bytes hold 11 events of 4 + 115 bytes behind a 72-byte
        // header (70 + the 2-byte host name).
        let per = (1472 - 72) / (tracer_codec::RECORD_HEADER_LEN + TxEvent::BODY_LEN);
        assert_eq!(per, 11);
        assert_eq!(sent.len(), 100usize.div_ceil(per));
    }

    #[test]
    fn gso_batches_pad_full_datagrams_to_the_segment_and_count_per_datagram() {
        let key = tracer_auth::SharedKey::from_bytes(&[4; 32]).unwrap();
        let dk = key.mac_key(tracer_auth::Purpose::Datagram);
        let ak = key.mac_key(tracer_auth::Purpose::Ack);
        let capture = Capture {
            shape: Some(crate::sender::BatchShape {
                max_datagrams: 4,
                segment: Some(1472),
            }),
            ..Capture::default()
        };
        let mut p =
            Pipeline::new(&id(), capture, 1472, Duration::from_secs(60)).with_keys(dk.clone(), ak);
        for i in 0..100u64 {
            p.push(&TxEvent {
                cookie: i,
                ..TxEvent::default()
            });
        }
        // Four full datagrams make a batch; the rest waits for the tick.
        assert_eq!(p.transport().batches, [4, 4]);
        p.tick(Instant::now());
        assert_eq!(
            p.transport().batches,
            [4, 4, 1],
            "the tick sends a started batch"
        );
        p.flush();
        let sent = &p.transport().sent;
        let (last, full) = sent.split_last().unwrap();
        assert!(full.iter().all(|d| d.len() == 1472), "full ones padded");
        assert!(last.len() < 1472, "the partial one is not");
        let mut cookies = Vec::new();
        for (i, d) in sent.iter().enumerate() {
            let v = tracer_codec::DatagramView::parse(d).unwrap();
            assert_eq!(v.header().seq, i as u64);
            let (signed, tag) = tracer_codec::mac_trailer(d, v.header()).expect("tagged");
            assert!(dk.verify(signed, tag));
            for (_, e) in Datagram::decode(d).unwrap().records {
                if let tracer_codec::Event::Tx(t) = e {
                    cookies.push(t.cookie);
                }
            }
        }
        assert_eq!(cookies, (0..100).collect::<Vec<_>>());
        assert_eq!(p.stats.send_calls, p.transport().batches.len() as u64);
        assert_eq!(p.stats.datagrams, sent.len() as u64);
        assert_eq!(
            p.stats.bytes,
            sent.iter().map(Vec::len).sum::<usize>() as u64
        );
    }

    #[test]
    fn a_failed_batch_counts_each_of_its_datagrams_and_events() {
        let capture = Capture {
            shape: Some(crate::sender::BatchShape {
                max_datagrams: 3,
                segment: Some(1472),
            }),
            fail_next: true,
            ..Capture::default()
        };
        let mut p = Pipeline::new(&id(), capture, 1472, Duration::from_secs(60));
        // 11 TX events fill a datagram: 3 full datagrams, then one more event.
        for _ in 0..34 {
            p.push(&TxEvent::default());
        }
        p.flush();
        assert_eq!((p.stats.send_errors, p.stats.events_unsent), (3, 33));
        assert_eq!(p.stats.sink_unreachable, 1);
        let d = Datagram::decode(&p.transport().sent[0]).unwrap();
        assert_eq!(
            (d.header.seq, d.header.first_event_seq),
            (3, 33),
            "the sink sees the gap"
        );
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
    fn cpu_events_reach_a_datagram_that_decodes_back() {
        let mut p = Pipeline::new(&id(), Capture::default(), 1472, Duration::from_secs(60));
        let evs: Vec<CpuEvent> = (0..30u32)
            .map(|cpu| CpuEvent {
                mono_ns: 5_000_000_000 + u64::from(cpu),
                global_ns: 1_763_000_000_000_000_000 + u64::from(cpu),
                interval_ns: 1_000_000_000,
                net_rx_ns: 234_000_000 + u64::from(cpu),
                net_tx_ns: 1_000_000,
                sock_send_ns: 50_000_000,
                sock_recv_ns: 22_000_000,
                cpu,
            })
            .collect();
        p.push(&TxEvent::default());
        for e in &evs {
            p.push_cpu(e);
        }
        p.flush();
        assert_eq!(p.stats.cpu_events, 30);
        let mut got = Vec::new();
        let mut next_event = 0;
        for d in &p.transport().sent {
            assert!(d.len() <= 1472);
            let d = Datagram::decode(d).unwrap();
            assert_eq!(d.header.first_event_seq, next_event);
            next_event += d.records.len() as u64;
            for (raw, e) in d.records {
                if let tracer_codec::Event::Cpu(c) = e {
                    assert_eq!(raw.kind, tracer_codec::EventKind::CPU);
                    assert_eq!(raw.global_ns(), Some(c.global_ns));
                    got.push(c);
                }
            }
        }
        assert_eq!(got, evs, "every CPU event, in order, as pushed");
        assert_eq!(next_event, 31);
        assert!(
            p.transport().sent.len() > 1,
            "30 of them fill more than one"
        );
        assert!(p
            .stats
            .table()
            .contains(&format!("  cpu         {:>12}", 30)));
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
