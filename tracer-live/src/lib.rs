//! tracer-live: live outputs of capture records, for the sink (and later
//! the agent) to show events as they are written.
//!
//! One output today: a TAP network interface ([`LiveIface`]), where every
//! event is one Ethernet frame of EtherType
//! [`LIVE_ETHERTYPE`](tracer_codec::LIVE_ETHERTYPE) (0x88B5) carrying the
//! same capture record a pcapng frame holds, so that `wireshark -k -i
//! nettrace0`, `dumpcap` and `tcpdump` capture the events live with their
//! ordinary filters.
//!
//! Layers, bottom up: [`error`]; [`frame`] (pure: the Ethernet framing);
//! [`tap`] (the syscalls: the device, its flags, one frame written);
//! [`iface`] (the writer thread behind a bounded queue, and its
//! counters).
//!
//! The tracer must never wait for a viewer: the caller only copies frames
//! into a chunk and hands full chunks to the writer thread without
//! blocking; a chunk the queue cannot take is dropped and counted, as is
//! a frame the kernel refuses. Memory is bounded: at most
//! [`iface::QUEUE_CHUNKS`] chunks of [`iface::CHUNK_BYTES`] bytes each in
//! flight.

pub mod error;
pub mod frame;
pub mod iface;
pub mod tap;

pub use error::LiveError;
pub use iface::{LiveCounts, LiveIface};
pub use tap::Tap;
