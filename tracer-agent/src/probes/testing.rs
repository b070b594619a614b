//! What a probe's drain delivers, collected for the probes' decoder
//! tests.

use super::core::{deliver, ProbeKind};
use super::interface::Collector;
use super::interface::ProbeEvent;
use super::slots::RecordError;
use tracer_codec::{DropEvent, RxEvent, TcpEvent, TxEvent};

/// Collects what [`deliver`] hands over, on a fake clock: global =
/// mono + [`Seen::GLOBAL_OFFSET_NS`], REALTIME = MONOTONIC +
/// [`Seen::REALTIME_OFFSET_NS`].
#[derive(Debug, Default)]
pub struct Seen {
    /// TX events.
    pub tx: Vec<TxEvent>,
    /// RX events.
    pub rx: Vec<RxEvent>,
    /// Drop events.
    pub drops: Vec<DropEvent>,
    /// TCP events.
    pub tcp: Vec<TcpEvent>,
    /// Refused records, with the probe that refused them.
    pub bad: Vec<(&'static str, RecordError)>,
}

impl Seen {
    /// Global minus mono on the fake clock.
    pub const GLOBAL_OFFSET_NS: u64 = 1_000_000;
    /// REALTIME minus MONOTONIC on the fake clock.
    pub const REALTIME_OFFSET_NS: u64 = 40_000;

    /// Deliver every record of `records` to a new collector.
    pub fn deliver<K: ProbeKind>(kind: &K, records: &[Vec<u8>]) -> Self {
        let mut seen = Seen::default();
        for r in records {
            deliver(kind, r, &mut seen);
        }
        seen
    }

    /// The refused records' errors.
    pub fn errors(&self) -> Vec<RecordError> {
        self.bad.iter().map(|(_, e)| *e).collect()
    }
}

impl Collector for Seen {
    fn global_ns(&self, mono_ns: u64) -> u64 {
        mono_ns + Self::GLOBAL_OFFSET_NS
    }
    fn realtime_to_global_ns(&self, realtime_ns: u64) -> u64 {
        self.global_ns(realtime_ns - Self::REALTIME_OFFSET_NS)
    }
    fn event(&mut self, ev: ProbeEvent<'_>) {
        match ev {
            ProbeEvent::Tx(e) => self.tx.push(*e),
            ProbeEvent::Rx(e) => self.rx.push(*e),
            ProbeEvent::Drop(e) => self.drops.push(*e),
            ProbeEvent::Tcp(e) => self.tcp.push(*e),
        }
    }
    fn bad_record(&mut self, probe: &'static str, err: RecordError) {
        self.bad.push((probe, err));
    }
}
