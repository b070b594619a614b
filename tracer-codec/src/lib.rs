//! Event model and wire codec shared by the agent and the sink.
//!
//! The codec is pure (bytes in, events out): no I/O, no clocks, no allocation
//! on the decode path beyond what the caller asks for. `docs/wire-format.md`
//! is the human-readable contract; the constants and layouts here are its
//! source of truth: [`layout`] describes every layout as data, and the Lua
//! dissector's tables and the docs' field tables are rendered from it.
//!
//! Layers, bottom up (a module names only modules below it; the workspace's
//! `tests/tests/module_graph.rs` fails on a cycle): [`error`], [`body`],
//! [`kind`], [`flow`] and [`layout::field`]; one module per event kind
//! ([`tx`], [`clock`], [`rx`], [`drop`](mod@drop), [`tcp`], [`cpu`]); [`event`],
//! their union; [`wire`], then [`ack`] and [`capture`]; on top
//! [`layout::registry`] and the renderers ([`layout::lua`],
//! [`layout::markdown`]).

#[macro_use]
mod macros;

pub mod ack;
pub mod body;
pub mod capture;
pub mod clock;
pub mod cpu;
pub mod drop;
pub mod error;
pub mod event;
pub mod flow;
pub mod kind;
pub mod layout;
pub mod rx;
pub mod sample;
pub mod tcp;
pub mod tx;
pub mod wire;

pub use ack::{Ack, ACK_LEN, ACK_MAGIC, ACK_VERSION};
pub use body::WireEvent;
pub use capture::{CaptureHeader, CaptureRecord, CAPTURE_VERSION, LIVE_ETHERTYPE};
pub use clock::{ClockEvent, ClockSource, ClockState};
pub use cpu::CpuEvent;
pub use drop::{DropEvent, FLOW_FAMILY};
pub use error::{DecodeError, HostnameError};
pub use event::Event;
pub use flow::Flow;
pub use kind::EventKind;
pub use rx::{RxEvent, RxStage};
pub use tcp::{TcpAnomaly, TcpEvent};
pub use tx::{TxEvent, TxStage, TX_FLAG_RANGE, TX_FLAG_SENT};
pub use wire::{
    datagram_extent, mac_trailer, Datagram, DatagramBuilder, DatagramHeader, DatagramHeaderRef,
    DatagramView, RawRecord, RecordIter, RecordView, FLAG_MAC, HEADER_FIXED_LEN,
    HEADER_FIXED_LEN_V1, HEADER_FIXED_LEN_V2, MAC_LEN, MAGIC, MAX_DATAGRAM_LEN, MAX_HOSTNAME_LEN,
    RECORD_HEADER_LEN, WIRE_VERSION, WIRE_VERSION_1, WIRE_VERSION_2,
};
