//! What a probe's drain delivers, collected for the probes' decoder
//! tests.

use super::core::{deliver, ProbeKind};
use super::interface::{Collector, ProbeEvent};
use super::slots::RecordError;
use tracer_codec::{DropEvent, RxEvent, TcpEvent, TxEvent};

/// Collects what [`deliver`] hands over.
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
