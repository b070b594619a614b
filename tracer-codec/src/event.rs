//! A decoded event of any kind: the union of the event types, above them
//! all (each kind lives in its own module and names none of the others).

use crate::clock::ClockEvent;
use crate::cpu::CpuEvent;
use crate::drop::DropEvent;
use crate::kind::EventKind;
use crate::rx::RxEvent;
use crate::tcp::TcpEvent;
use crate::tx::TxEvent;

/// A decoded event.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A TX timestamping callback.
    Tx(TxEvent),
    /// A clock update.
    Clock(ClockEvent),
    /// A receive-path stage.
    Rx(RxEvent),
    /// A dropped skb.
    Drop(DropEvent),
    /// A TCP anomaly.
    Tcp(TcpEvent),
    /// The network stack's CPU time on one CPU over one interval.
    Cpu(CpuEvent),
    /// A kind this build does not know; kept as its raw body length.
    Unknown {
        /// Wire kind number.
        kind: u16,
        /// Body length in bytes.
        len: usize,
    },
}

impl Event {
    /// The event's kind.
    pub fn kind(&self) -> EventKind {
        match self {
            Event::Tx(_) => EventKind::Tx,
            Event::Clock(_) => EventKind::Clock,
            Event::Rx(_) => EventKind::Rx,
            Event::Drop(_) => EventKind::Drop,
            Event::Tcp(_) => EventKind::Tcp,
            Event::Cpu(_) => EventKind::Cpu,
            Event::Unknown { kind, .. } => EventKind::Unknown(*kind),
        }
    }

    /// Global timestamp, if the kind carries one.
    pub fn global_ns(&self) -> Option<u64> {
        match self {
            Event::Tx(e) => Some(e.global_ns),
            Event::Clock(e) => Some(e.global_ns),
            Event::Rx(e) => Some(e.global_ns),
            Event::Drop(e) => Some(e.global_ns),
            Event::Tcp(e) => Some(e.global_ns),
            Event::Cpu(e) => Some(e.global_ns),
            Event::Unknown { .. } => None,
        }
    }

    /// One-line summary.
    pub fn summary(&self) -> String {
        match self {
            Event::Tx(e) => e.summary(),
            Event::Clock(e) => e.summary(),
            Event::Rx(e) => e.summary(),
            Event::Drop(e) => e.summary(),
            Event::Tcp(e) => e.summary(),
            Event::Cpu(e) => e.summary(),
            Event::Unknown { kind, len } => format!("unknown event kind {kind} ({len} bytes)"),
        }
    }
}
