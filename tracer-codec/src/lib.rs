//! Event model and wire codec shared by the agent and the sink.
//!
//! The codec is pure (bytes in, events out): no I/O, no clocks, no allocation
//! on the decode path beyond what the caller asks for. `docs/wire-format.md`
//! is the human-readable contract; the constants and layouts here are its
//! source of truth: [`layout`] describes every layout as data, and the Lua
//! dissector's tables and the docs' field tables are rendered from it.

#[macro_use]
mod macros;

pub mod ack;
pub mod capture;
pub mod drop;
pub mod error;
pub mod event;
pub mod layout;
pub mod rx;
pub mod sample;
pub mod tcp;
pub mod wire;

pub use ack::{Ack, ACK_LEN, ACK_MAGIC, ACK_VERSION};
pub use capture::{CaptureRecord, CAPTURE_VERSION};
pub use drop::{DropEvent, FLOW_FAMILY};
pub use error::{DecodeError, HostnameError};
pub use event::{
    ClockEvent, ClockSource, ClockState, Event, EventKind, Flow, TxEvent, TxStage, TX_FLAG_RANGE,
    TX_FLAG_SENT,
};
pub use rx::{RxEvent, RxStage};
pub use tcp::{TcpAnomaly, TcpEvent};
pub use wire::{
    datagram_extent, mac_trailer, Datagram, DatagramBuilder, DatagramHeader, DatagramHeaderRef,
    DatagramView, RawRecord, RecordIter, RecordView, FLAG_MAC, HEADER_FIXED_LEN,
    HEADER_FIXED_LEN_V1, HEADER_FIXED_LEN_V2, MAC_LEN, MAGIC, MAX_DATAGRAM_LEN, MAX_HOSTNAME_LEN,
    RECORD_HEADER_LEN, WIRE_VERSION, WIRE_VERSION_1, WIRE_VERSION_2,
};

/// An event kind with a fixed-size body: what a sender needs to frame one
/// (`wire_event!` implements it for every kind it declares).
pub trait WireEvent {
    /// Its kind number on the wire.
    const KIND: u16;
    /// Encoded size of its body.
    const BODY_LEN: usize;
    /// Append the encoded body to `out`.
    fn encode_body(&self, out: &mut Vec<u8>);
}

/// The bincode configuration of every body on the wire: fixed-width
/// little-endian integers, so a Lua dissector can read fields at fixed offsets.
pub(crate) fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard()
        .with_little_endian()
        .with_fixed_int_encoding()
}
