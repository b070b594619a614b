//! Event model and wire codec shared by the agent and the sink.
//!
//! The codec is pure (bytes in, events out): no I/O, no clocks, no allocation
//! on the decode path beyond what the caller asks for. `docs/wire-format.md`
//! is the human-readable contract; the constants and layouts here are its
//! source of truth, and the Lua dissector mirrors them.

pub mod capture;
pub mod error;
pub mod event;
pub mod wire;

pub use capture::{CaptureRecord, CAPTURE_VERSION};
pub use error::DecodeError;
pub use event::{ClockEvent, ClockSource, ClockState, Event, EventKind, Flow, TxEvent, TxStage};
pub use wire::{
    Datagram, DatagramBuilder, DatagramHeader, RawRecord, HEADER_FIXED_LEN, MAGIC,
    MAX_DATAGRAM_LEN, MAX_HOSTNAME_LEN, RECORD_HEADER_LEN, WIRE_VERSION,
};

/// The bincode configuration of every body on the wire: fixed-width
/// little-endian integers, so a Lua dissector can read fields at fixed offsets.
pub(crate) fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard()
        .with_little_endian()
        .with_fixed_int_encoding()
}
