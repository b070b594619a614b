//! Datagram framing, wire format version 3 (see docs/wire-format.md).
//!
//! ```text
//! datagram = header record* [mac]
//! header   = magic "NTRC" | version u16 | header_len u16 | agent_id u64
//!          | boot_id [16] | seq u64 | lost_events u64 | first_event_seq u64
//!          | clock_source u8 | clock_state u8 | event_count u16
//!          | hostname_len u8 | flags u8 | incarnation u64
//!          | sink_instance u64 | sent_mono_ns u64 | hostname [hostname_len]
//! record   = kind u16 | len u16 | body [len]        (body: bincode fixint LE)
//! mac      = [16]      (present iff flags bit 0: a tag over everything before it)
//! ```
//! All integers little-endian. `header_len` lets a later version append
//! header fields; `len` lets a decoder skip kinds it does not know. The
//! offsets are described as data in [`crate::layout`].
//!
//! Older agents send shorter headers, which readers of this build accept:
//! version 2 has no `sink_instance` and `sent_mono_ns` (hostname at offset
//! 70; they read as 0), version 1 not `flags` and `incarnation` either
//! (hostname at 61, never a tag; they read as 0 too).
//!
//! The codec frames the tag but does not compute it (it stays free of
//! keys and I/O): [`DatagramBuilder::finish_with_mac`] takes the tagging
//! function, and [`DatagramHeaderRef::parse`] with [`mac_trailer`] hands a
//! receiver the signed bytes and the tag to check.
//!
//! Two readers with one set of rules: [`DatagramView::parse`] validates a
//! datagram in place without allocating (the sink's receive path), and
//! [`Datagram::decode`] builds owned events on top of it.
//!
//! One module per concern, bottom up: [`format`](mod@format) (constants), [`header`],
//! [`record`] (framing), [`view`] (reading a whole datagram) and
//! [`builder`] (writing one). This module only gathers them.

pub mod builder;
pub mod format;
pub mod header;
pub mod record;
pub mod view;

pub use builder::DatagramBuilder;
pub use format::{
    fixed_len, FLAG_MAC, HEADER_FIXED_LEN, HEADER_FIXED_LEN_V1, HEADER_FIXED_LEN_V2, KNOWN_FLAGS,
    MAC_LEN, MAGIC, MAX_DATAGRAM_LEN, MAX_HOSTNAME_LEN, RECORD_HEADER_LEN, WIRE_VERSION,
    WIRE_VERSION_1, WIRE_VERSION_2,
};
pub use header::{mac_trailer, truncate_hostname, DatagramHeader, DatagramHeaderRef};
pub use record::{datagram_extent, split_records, RawRecord, RecordIter, RecordView};
pub use view::{Datagram, DatagramView};
