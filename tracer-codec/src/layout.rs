//! Machine-readable description of every wire layout: event kinds, their
//! fields (offset, size, type, doc) and enum name tables, plus the datagram
//! and capture headers.
//!
//! This is the one source of the layouts for everything after the agent:
//! the event structs and their decoders are declared together with their
//! field tables by the `wire_event!` macro (so they cannot drift), and
//! the dissector's tables (`wireshark/nettrace.lua`, between the
//! `GENERATED` markers) and the field tables of `docs/wire-format.md` are
//! rendered from here ([`render_lua`], [`render_markdown`]). A test fails
//! when a checked-in rendering is stale; `UPDATE_GENERATED=1 cargo test -p
//! tracer-codec` rewrites them.

use std::fmt::Write as _;

use crate::capture::{CAPTURE_FIXED_LEN, CAPTURE_VERSION};
use crate::event::{ClockEvent, ClockSource, ClockState, TxEvent, TxStage};
use crate::wire::{
    FLAG_MAC, HEADER_FIXED_LEN, HEADER_FIXED_LEN_V1, HEADER_FIXED_LEN_V2, MAC_LEN, MAGIC,
    MAX_HOSTNAME_LEN, RECORD_HEADER_LEN, WIRE_VERSION, WIRE_VERSION_1, WIRE_VERSION_2,
};

/// How a field's bytes are to be read (all integers little-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    /// Unsigned 8-bit integer.
    U8,
    /// Unsigned 16-bit integer.
    U16,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
    /// Signed 64-bit integer.
    I64,
    /// IEEE 754 double.
    F64,
    /// Opaque bytes.
    Bytes,
    /// 16 bytes of address: IPv4 in the first 4 bytes, or IPv6.
    Addr,
    /// A NUL-padded task name.
    Comm,
    /// ASCII text of fixed size (e.g. the magic).
    Text,
    /// A 16-byte identifier (e.g. a boot id).
    Guid,
}

impl FieldType {
    /// Lower-case name used in the generated tables.
    pub fn name(self) -> &'static str {
        match self {
            FieldType::U8 => "u8",
            FieldType::U16 => "u16",
            FieldType::U32 => "u32",
            FieldType::U64 => "u64",
            FieldType::I64 => "i64",
            FieldType::F64 => "f64",
            FieldType::Bytes => "bytes",
            FieldType::Addr => "addr",
            FieldType::Comm => "comm",
            FieldType::Text => "text",
            FieldType::Guid => "guid",
        }
    }
}

/// A Rust type that sits in a wire body at a fixed offset: its size and
/// its little-endian byte form (what bincode's fixed-int encoding writes).
pub trait WireValue: Sized + Copy {
    /// Encoded size in bytes.
    const SIZE: usize;
    /// Read from the first [`Self::SIZE`] bytes of `b` (the caller checked
    /// the length).
    fn read(b: &[u8]) -> Self;
    /// Write into the first [`Self::SIZE`] bytes of `out`.
    fn write(&self, out: &mut [u8]);
}

macro_rules! wire_number {
    ($($t:ty),*) => {$(
        impl WireValue for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline]
            fn read(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(&b[..Self::SIZE]);
                <$t>::from_le_bytes(a)
            }
            fn write(&self, out: &mut [u8]) {
                out[..Self::SIZE].copy_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
wire_number!(u8, u16, u32, u64, i64, f64);

impl<const N: usize> WireValue for [u8; N] {
    const SIZE: usize = N;
    #[inline]
    fn read(b: &[u8]) -> Self {
        let mut a = [0u8; N];
        a.copy_from_slice(&b[..N]);
        a
    }
    fn write(&self, out: &mut [u8]) {
        out[..N].copy_from_slice(self);
    }
}

/// The names of an enum's wire values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NameTable {
    /// Table name (the Rust type, or a short name for plain domains).
    pub name: &'static str,
    /// `(wire value, name)` in ascending value order.
    pub entries: &'static [(u64, &'static str)],
}

impl NameTable {
    /// Name of `value`, `None` outside the domain.
    pub fn name_of(&self, value: u64) -> Option<&'static str> {
        self.entries
            .iter()
            .find(|(v, _)| *v == value)
            .map(|(_, n)| *n)
    }

    /// True when `value` is in the domain.
    #[inline]
    pub fn contains(&self, value: u64) -> bool {
        self.entries.iter().any(|(v, _)| *v == value)
    }

    /// "0 SENDMSG, 1 SCHED, ..." for documentation.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self
            .entries
            .iter()
            .map(|(v, n)| format!("{v} {n}"))
            .collect();
        parts.join(", ")
    }
}

/// Address family of a TX event: its domain (not a Rust enum).
pub const FAMILY: NameTable = NameTable {
    name: "Family",
    entries: &[(4, "IPv4"), (6, "IPv6")],
};

/// One field at a fixed offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// Name (the Rust field name; the dissector's field names follow it).
    pub name: &'static str,
    /// Byte offset from the start of the body or header.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
    /// How to read it.
    pub ty: FieldType,
    /// Names of its values when it is an enum; a value outside the table
    /// makes the body malformed.
    pub names: Option<&'static NameTable>,
    /// What it means (the Rust doc comment).
    pub doc: &'static str,
}

impl Field {
    /// A field whose offset [`place`] fills in.
    pub const fn new(
        name: &'static str,
        ty: FieldType,
        size: usize,
        names: Option<&'static NameTable>,
        doc: &'static str,
    ) -> Self {
        Field {
            name,
            offset: 0,
            size,
            ty,
            names,
            doc,
        }
    }

    /// The field's range within a body or header.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.size
    }
}

/// Lay fields out one after the other, as bincode's fixed-int encoding
/// does (no padding): each offset is the sum of the sizes before it.
pub const fn place<const N: usize>(mut fields: [Field; N]) -> [Field; N] {
    let mut off = 0;
    let mut i = 0;
    while i < N {
        fields[i].offset = off;
        off += fields[i].size;
        i += 1;
    }
    fields
}

/// Bytes covered by a run of fields laid out by [`place`].
pub const fn fields_len(fields: &[Field]) -> usize {
    let mut len = 0;
    let mut i = 0;
    while i < fields.len() {
        len += fields[i].size;
        i += 1;
    }
    len
}

/// Offset of the field called `name` in `fields`, at compile time (a
/// missing name fails the build where a constant uses it).
pub const fn field_offset(fields: &[Field], name: &str) -> usize {
    let mut i = 0;
    while i < fields.len() {
        let (a, b) = (fields[i].name.as_bytes(), name.as_bytes());
        if a.len() == b.len() {
            let mut j = 0;
            while j < a.len() && a[j] == b[j] {
                j += 1;
            }
            if j == a.len() {
                return fields[i].offset;
            }
        }
        i += 1;
    }
    panic!("no such field")
}

/// The layout of one event kind's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventLayout {
    /// Wire kind number.
    pub kind: u16,
    /// Upper-case short name (Info column, summaries).
    pub name: &'static str,
    /// Title of the kind in the docs.
    pub title: &'static str,
    /// Body length this build writes, in bytes.
    pub body_len: usize,
    /// Version-1 body length: the shortest body a reader takes. Fields
    /// past it were appended later; a shorter body lacks them (read as 0).
    pub v1_body_len: usize,
    /// Fields in wire order.
    pub fields: &'static [Field],
}

impl EventLayout {
    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&'static Field> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// The layout of a header: fixed fields, then an optional variable-length
/// tail (the host name) whose length is one of the fixed fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderLayout {
    /// Short name (`dgram`, `capture`).
    pub name: &'static str,
    /// Bytes before the tail.
    pub fixed_len: usize,
    /// Fixed fields in order.
    pub fields: &'static [Field],
    /// `(name, doc)` of the variable-length UTF-8 tail.
    pub tail: (&'static str, &'static str),
}

impl HeaderLayout {
    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&'static Field> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// Datagram header, wire version 3 (see [`crate::wire`]); version 2 is
/// its first 70 bytes (through `incarnation`) followed by the hostname,
/// version 1 its first 61 (through `hostname_len`).
pub const DATAGRAM_HEADER: HeaderLayout = HeaderLayout {
    name: "dgram",
    fixed_len: HEADER_FIXED_LEN,
    fields: &place([
        Field::new("magic", FieldType::Text, 4, None, "`NTRC`"),
        Field::new(
            "version",
            FieldType::U16,
            2,
            None,
            "3 (from agents of older builds: 2, without `sink_instance` and `sent_mono_ns`, hostname at offset 70; 1, also without `flags` and `incarnation`, hostname at offset 61, never a tag). A sink rejects any other version (counted as `bad_version`); a sink with a key takes only version 3 (`auth_old_version`).",
        ),
        Field::new(
            "header_len",
            FieldType::U16,
            2,
            None,
            "bytes from offset 0 to the first record (86 + hostname_len in v3, 70 + in v2, 61 + in v1; a later version may append header fields, which a reader skips)",
        ),
        Field::new(
            "agent_id",
            FieldType::U64,
            8,
            None,
            "random per agent process unless `--agent-id` sets it",
        ),
        Field::new(
            "boot_id",
            FieldType::Guid,
            16,
            None,
            "the agent host's `/proc/sys/kernel/random/boot_id`",
        ),
        Field::new(
            "seq",
            FieldType::U64,
            8,
            None,
            "per-agent datagram sequence number: 0, 1, 2, ... A gap is a lost datagram.",
        ),
        Field::new(
            "lost_events",
            FieldType::U64,
            8,
            None,
            "cumulative events the agent lost before sending (probe records overwritten before the agent read them, records it could not place or decode)",
        ),
        Field::new(
            "first_event_seq",
            FieldType::U64,
            8,
            None,
            "per-agent sequence number of the first event in this datagram; events are numbered consecutively, so a gap tells how many events a lost datagram held",
        ),
        Field::new(
            "clock_source",
            FieldType::U8,
            1,
            Some(&ClockSource::NAMES),
            "the agent's clock source",
        ),
        Field::new(
            "clock_state",
            FieldType::U8,
            1,
            Some(&ClockState::NAMES),
            "the agent's servo state",
        ),
        Field::new(
            "event_count",
            FieldType::U16,
            2,
            None,
            "records that follow",
        ),
        Field::new(
            "hostname_len",
            FieldType::U8,
            1,
            None,
            "at most 64",
        ),
        Field::new(
            "flags",
            FieldType::U8,
            1,
            None,
            "bit 0: the datagram ends with a 16-byte tag (HMAC-SHA256-128 of every byte before it, with the deployment key); other bits are reserved, and a reader rejects a datagram with one set (`bad_flags`)",
        ),
        Field::new(
            "incarnation",
            FieldType::U64,
            8,
            None,
            "random per agent process start, never 0: a restarted agent (same `agent_id` and boot) is a new incarnation whose `seq` and event numbers start at 0 again",
        ),
        Field::new(
            "sink_instance",
            FieldType::U64,
            8,
            None,
            "the `sink_instance` of the newest acknowledgement the agent took, 0 before the first: a sink with a key holds a datagram bound to another instance until the agent has bound itself to this one, and takes it only if it was sent after this sink started (docs/security.md)",
        ),
        Field::new(
            "sent_mono_ns",
            FieldType::U64,
            8,
            None,
            "the agent's CLOCK_MONOTONIC when it built the datagram, ns: against the agent's datagrams bound to this sink, tells when one bound elsewhere was sent",
        ),
    ]),
    tail: ("hostname", "UTF-8"),
};

/// Capture header of one pcapng frame (see [`crate::capture`]).
pub const CAPTURE_HEADER: HeaderLayout = HeaderLayout {
    name: "capture",
    fixed_len: CAPTURE_FIXED_LEN,
    fields: &place([
        Field::new("version", FieldType::U16, 2, None, "capture version (1)"),
        Field::new(
            "header_len",
            FieldType::U16,
            2,
            None,
            "23 + host_len; the record starts here",
        ),
        Field::new(
            "agent_id",
            FieldType::U64,
            8,
            None,
            "agent that sent the event",
        ),
        Field::new(
            "event_seq",
            FieldType::U64,
            8,
            None,
            "per-agent event sequence number (also the EPB packet id)",
        ),
        Field::new(
            "clock_source",
            FieldType::U8,
            1,
            Some(&ClockSource::NAMES),
            "the agent's clock source when it sent the event",
        ),
        Field::new(
            "clock_state",
            FieldType::U8,
            1,
            Some(&ClockState::NAMES),
            "the agent's servo state when it sent the event",
        ),
        Field::new("host_len", FieldType::U8, 1, None, "at most 64"),
    ]),
    tail: ("host", "UTF-8"),
};

/// The sink's acknowledgement, version 1 (see [`crate::ack`]); the tail is
/// the tag, present when `flags` bit 0 is set.
pub const ACK_LAYOUT: HeaderLayout = HeaderLayout {
    name: "ack",
    fixed_len: crate::ack::ACK_LEN,
    fields: &place([
        Field::new("magic", FieldType::Text, 4, None, "`NTRA`"),
        Field::new("version", FieldType::U16, 2, None, "1"),
        Field::new(
            "ack_len",
            FieldType::U16,
            2,
            None,
            "bytes before the tag (96 in version 1; a later version may append fields, which a reader skips)",
        ),
        Field::new(
            "flags",
            FieldType::U8,
            1,
            None,
            "bit 0: a 16-byte tag follows (HMAC-SHA256-128 of the `ack_len` bytes before it, with the ack key)",
        ),
        Field::new("reserved", FieldType::Bytes, 7, None, "0"),
        Field::new(
            "sink_instance",
            FieldType::U64,
            8,
            None,
            "random per sink process: a restarted sink starts its counts under a new id",
        ),
        Field::new(
            "ack_seq",
            FieldType::U64,
            8,
            None,
            "increases with every ack of this sink process; the agent keeps the newest per instance",
        ),
        Field::new("agent_id", FieldType::U64, 8, None, "the agent's"),
        Field::new("boot_id", FieldType::Guid, 16, None, "the agent's"),
        Field::new("incarnation", FieldType::U64, 8, None, "the agent's"),
        Field::new(
            "preceding_events",
            FieldType::U64,
            8,
            None,
            "events numbered before the first one this sink received (sent before it started, or while no sink listened)",
        ),
        Field::new(
            "delivered_events",
            FieldType::U64,
            8,
            None,
            "events written to this sink's files (the write returned)",
        ),
        Field::new(
            "lost_events",
            FieldType::U64,
            8,
            None,
            "events this sink counted lost: sequence gaps (net of late arrivals) and events it could not write",
        ),
        Field::new(
            "received_events",
            FieldType::U64,
            8,
            None,
            "events this sink accepted (delivered or on their way to the file)",
        ),
    ]),
    tail: ("mac", "the 16-byte tag, when `flags` bit 0 is set"),
};

/// Record framing: kind and body length before every body.
pub const RECORD_HEADER: [Field; 2] = place([
    Field::new("kind", FieldType::U16, 2, None, "event kind"),
    Field::new("len", FieldType::U16, 2, None, "body bytes"),
]);

/// Every event kind this build knows, in kind order.
pub const EVENTS: &[EventLayout] = &[
    TxEvent::LAYOUT,
    ClockEvent::LAYOUT,
    crate::RxEvent::LAYOUT,
    crate::drop::DropEvent::LAYOUT,
    crate::tcp::TcpEvent::LAYOUT,
];

/// Every enum name table the layouts use.
pub const NAME_TABLES: &[&NameTable] = &[
    &TxStage::NAMES,
    &ClockSource::NAMES,
    &ClockState::NAMES,
    &crate::RxStage::NAMES,
    &FAMILY,
    &crate::drop::FLOW_FAMILY,
    &crate::tcp::TcpAnomaly::NAMES,
];

const _: () = assert!(fields_len(DATAGRAM_HEADER.fields) == HEADER_FIXED_LEN);
// Version 1 is the prefix before `flags`, version 2 the one before
// `sink_instance`.
const _: () = assert!(field_offset(DATAGRAM_HEADER.fields, "flags") == HEADER_FIXED_LEN_V1);
const _: () = assert!(field_offset(DATAGRAM_HEADER.fields, "sink_instance") == HEADER_FIXED_LEN_V2);
const _: () = assert!(fields_len(CAPTURE_HEADER.fields) == CAPTURE_FIXED_LEN);
const _: () = assert!(fields_len(ACK_LAYOUT.fields) == crate::ack::ACK_LEN);
const _: () = assert!(fields_len(&RECORD_HEADER) == RECORD_HEADER_LEN);

/// Marker lines around the generated part of `wireshark/nettrace.lua`.
pub const LUA_BEGIN: &str = "-- BEGIN GENERATED LAYOUT";
/// End marker of the generated Lua part.
pub const LUA_END: &str = "-- END GENERATED LAYOUT";
/// Start of a generated table in `docs/wire-format.md`; `{}` is the
/// table's id (`dgram`, `record`, `kind-1`, ..., `capture`).
pub const MD_BEGIN: &str = "<!-- BEGIN GENERATED TABLE {} (tracer-codec layout.rs; regenerate: UPDATE_GENERATED=1 cargo test -p tracer-codec) -->";
/// End of a generated Markdown table.
pub const MD_END: &str = "<!-- END GENERATED TABLE {} -->";

/// A Lua string literal.
fn lua_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn lua_fields(o: &mut String, indent: &str, fields: &[Field]) {
    let _ = writeln!(o, "{indent}fields = {{");
    for f in fields {
        let names = f
            .names
            .map(|t| format!(", names = {}", lua_str(t.name)))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "{indent}    {} = {{ offset = {}, size = {}, type = {}{names} }},",
            f.name,
            f.offset,
            f.size,
            lua_str(f.ty.name())
        );
    }
    let _ = writeln!(o, "{indent}}},");
    let order: Vec<String> = fields.iter().map(|f| lua_str(f.name)).collect();
    let _ = writeln!(o, "{indent}order = {{ {} }},", order.join(", "));
}

/// The dissector's layout tables: the Lua text between (and including)
/// [`LUA_BEGIN`] and [`LUA_END`]. It defines one local, `LAYOUT`.
pub fn render_lua() -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{LUA_BEGIN}");
    let _ = writeln!(
        o,
        "-- Do not edit by hand: rendered by tracer_codec::layout::render_lua();"
    );
    let _ = writeln!(
        o,
        "-- regenerate with `UPDATE_GENERATED=1 cargo test -p tracer-codec`."
    );
    let _ = writeln!(o, "local LAYOUT = {{");
    let _ = writeln!(o, "    wire_version = {WIRE_VERSION},");
    let _ = writeln!(o, "    wire_version_1 = {WIRE_VERSION_1},");
    let _ = writeln!(o, "    wire_version_2 = {WIRE_VERSION_2},");
    let _ = writeln!(o, "    dgram_v1_fixed_len = {HEADER_FIXED_LEN_V1},");
    let _ = writeln!(o, "    dgram_v2_fixed_len = {HEADER_FIXED_LEN_V2},");
    let _ = writeln!(o, "    flag_mac = {FLAG_MAC},");
    let _ = writeln!(o, "    tx_flag_range = {},", crate::TX_FLAG_RANGE);
    let _ = writeln!(o, "    tx_flag_sent = {},", crate::TX_FLAG_SENT);
    let _ = writeln!(o, "    mac_len = {MAC_LEN},");
    let _ = writeln!(o, "    capture_version = {CAPTURE_VERSION},");
    let _ = writeln!(
        o,
        "    magic = {},",
        lua_str(std::str::from_utf8(&MAGIC).unwrap_or("NTRC"))
    );
    let _ = writeln!(o, "    max_hostname_len = {MAX_HOSTNAME_LEN},");
    let _ = writeln!(o, "    record_header_len = {RECORD_HEADER_LEN},");
    let _ = writeln!(
        o,
        "    ack_magic = {},",
        lua_str(std::str::from_utf8(&crate::ack::ACK_MAGIC).unwrap_or("NTRA"))
    );
    for h in [&DATAGRAM_HEADER, &CAPTURE_HEADER, &ACK_LAYOUT] {
        let _ = writeln!(o, "    {} = {{", h.name);
        let _ = writeln!(o, "        fixed_len = {},", h.fixed_len);
        lua_fields(&mut o, "        ", h.fields);
        let _ = writeln!(o, "    }},");
    }
    let _ = writeln!(o, "    record = {{");
    lua_fields(&mut o, "        ", &RECORD_HEADER);
    let _ = writeln!(o, "    }},");
    let kinds: Vec<String> = EVENTS
        .iter()
        .map(|e| format!("{} = {}", e.name, e.kind))
        .collect();
    let _ = writeln!(o, "    kind = {{ {} }},", kinds.join(", "));
    let _ = writeln!(o, "    kinds = {{");
    for e in EVENTS {
        let _ = writeln!(o, "        [{}] = {{", e.kind);
        let _ = writeln!(o, "            name = {},", lua_str(e.name));
        let _ = writeln!(o, "            body_len = {},", e.body_len);
        let _ = writeln!(o, "            v1_body_len = {},", e.v1_body_len);
        lua_fields(&mut o, "            ", e.fields);
        let _ = writeln!(o, "        }},");
    }
    let _ = writeln!(o, "    }},");
    let _ = writeln!(o, "    names = {{");
    for t in NAME_TABLES {
        let entries: Vec<String> = t
            .entries
            .iter()
            .map(|(v, n)| format!("[{v}] = {}", lua_str(n)))
            .collect();
        let _ = writeln!(o, "        {} = {{ {} }},", t.name, entries.join(", "));
    }
    let _ = writeln!(o, "    }},");
    let _ = writeln!(o, "}}");
    let _ = write!(o, "{LUA_END}");
    o
}

/// A doc string as one Markdown table cell: intra-doc links become code,
/// no line breaks or pipes.
fn md_cell(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("[`", "`")
        .replace("`]", "`")
        .replace('|', "\\|")
}

/// A table of `fields`, then the variable-length `tail` (offset, type,
/// (name, doc)) if any.
fn md_fields(o: &mut String, fields: &[Field], tail: Option<(usize, FieldType, (&str, &str))>) {
    let _ = writeln!(o, "| offset | size | field | type | meaning |");
    let _ = writeln!(o, "|---|---|---|---|---|");
    for f in fields {
        let mut meaning = md_cell(f.doc);
        if let Some(t) = f.names {
            let _ = write!(meaning, " ({})", t.describe());
        }
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} |",
            f.offset,
            f.size,
            f.name,
            f.ty.name(),
            meaning
        );
    }
    if let Some((off, ty, (name, doc))) = tail {
        let _ = writeln!(
            o,
            "| {off} | n | {name} | {} | {} |",
            ty.name(),
            md_cell(doc)
        );
    }
}

/// One generated table of `docs/wire-format.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkdownTable {
    /// Its start marker line.
    pub begin: String,
    /// Its end marker line.
    pub end: String,
    /// Markers and table, as the document holds them.
    pub text: String,
}

fn md_table(
    id: &str,
    fields: &[Field],
    tail: Option<(usize, FieldType, (&str, &str))>,
    extra: &str,
) -> MarkdownTable {
    let begin = MD_BEGIN.replace("{}", id);
    let end = MD_END.replace("{}", id);
    let mut o = String::new();
    let _ = writeln!(o, "{begin}");
    md_fields(&mut o, fields, tail);
    o.push_str(extra);
    let _ = write!(o, "{end}");
    MarkdownTable {
        begin,
        end,
        text: o,
    }
}

/// The field tables of `docs/wire-format.md`, each between its own
/// markers so the prose around them stays hand-written.
pub fn render_markdown() -> Vec<MarkdownTable> {
    let mut out = Vec::new();
    let h = &DATAGRAM_HEADER;
    out.push(md_table(
        "dgram",
        h.fields,
        Some((h.fixed_len, FieldType::Text, h.tail)),
        "",
    ));
    out.push(md_table(
        "record",
        &RECORD_HEADER,
        Some((RECORD_HEADER_LEN, FieldType::Bytes, ("body", "`len` bytes"))),
        "",
    ));
    for e in EVENTS {
        let extra = if e.v1_body_len == e.body_len {
            format!(
                "\nKind {} ({}), version-1 body: {} bytes.\n",
                e.kind, e.name, e.body_len
            )
        } else {
            format!(
                "\nKind {} ({}), body: {} bytes; version-1 body: the first {} (fields from offset {} on were appended later; a reader takes a version-1 body and reads them as 0).\n",
                e.kind, e.name, e.body_len, e.v1_body_len, e.v1_body_len
            )
        };
        out.push(md_table(
            &format!("kind-{}", e.kind),
            e.fields,
            None,
            &extra,
        ));
    }
    let h = &ACK_LAYOUT;
    out.push(md_table(
        "ack",
        h.fields,
        Some((h.fixed_len, FieldType::Bytes, h.tail)),
        "",
    ));
    let h = &CAPTURE_HEADER;
    out.push(md_table(
        "capture",
        h.fields,
        Some((h.fixed_len, FieldType::Text, h.tail)),
        "| header_len | ... | record | bytes | the event record exactly as on the wire (kind, len, body) |\n",
    ));
    out
}

/// `doc` with every generated table replaced by its current rendering;
/// `Err(marker)` names the first marker missing.
pub fn splice_markdown(doc: &str) -> Result<String, String> {
    let mut text = doc.to_owned();
    for t in render_markdown() {
        text = splice(&text, &t.begin, &t.end, &t.text).ok_or(t.begin)?;
    }
    Ok(text)
}

/// Replace the text from `begin` to `end` (both included) in `text` with
/// `generated`; `None` when the markers are missing.
pub fn splice(text: &str, begin: &str, end: &str, generated: &str) -> Option<String> {
    let b = text.find(begin)?;
    let e = b + text[b..].find(end)? + end.len();
    Some(format!("{}{}{}", &text[..b], generated, &text[e..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{DatagramBuilder, DatagramHeader};
    use crate::CaptureRecord;

    /// A body whose every byte differs from every other (all bodies are
    /// shorter than 255 bytes), so a field read at a wrong offset shows.
    fn distinct_body(len: usize) -> Vec<u8> {
        assert!(len < 255);
        (0..len).map(|i| i as u8 + 1).collect()
    }

    fn check_against_bincode<T>(
        layout: &EventLayout,
        field_bytes: impl Fn(&T) -> Vec<(&'static str, Vec<u8>)>,
    ) where
        T: bincode::Decode<()> + bincode::Encode,
    {
        let body = distinct_body(layout.body_len);
        let (v, used): (T, usize) =
            bincode::decode_from_slice(&body, crate::bincode_config()).expect("bincode decodes");
        assert_eq!(
            used, layout.body_len,
            "{}: bincode reads BODY_LEN bytes",
            layout.name
        );
        let again = bincode::encode_to_vec(&v, crate::bincode_config()).expect("encodes");
        assert_eq!(again, body, "{}: bincode round trip", layout.name);
        let fields = field_bytes(&v);
        assert_eq!(
            fields.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            layout.fields.iter().map(|f| f.name).collect::<Vec<_>>(),
            "{}: table order is the struct order",
            layout.name
        );
        for (name, bytes) in fields {
            let f = layout.field(name).expect("described");
            assert_eq!(f.size, bytes.len(), "{}.{name}: size", layout.name);
            assert_eq!(
                &body[f.range()],
                &bytes[..],
                "{}.{name}: offset {}",
                layout.name,
                f.offset
            );
        }
    }

    #[test]
    fn event_tables_match_what_bincode_encodes() {
        check_against_bincode::<TxEvent>(&TxEvent::LAYOUT, TxEvent::field_bytes);
        check_against_bincode::<ClockEvent>(&ClockEvent::LAYOUT, ClockEvent::field_bytes);
        check_against_bincode::<crate::RxEvent>(
            &crate::RxEvent::LAYOUT,
            crate::RxEvent::field_bytes,
        );
        check_against_bincode::<crate::DropEvent>(
            &crate::DropEvent::LAYOUT,
            crate::DropEvent::field_bytes,
        );
        check_against_bincode::<crate::TcpEvent>(
            &crate::TcpEvent::LAYOUT,
            crate::TcpEvent::field_bytes,
        );
        let mut b = Vec::new();
        TxEvent::default().encode_body(&mut b);
        assert_eq!(b.len(), TxEvent::BODY_LEN);
        assert_eq!(EVENTS.len(), 5);
        for (i, e) in EVENTS.iter().enumerate() {
            assert_eq!(fields_len(e.fields), e.body_len);
            assert!(i == 0 || EVENTS[i - 1].kind < e.kind, "kind order");
        }
    }

    /// The generated fixed-offset decoder gives what bincode gives, and
    /// rejects exactly the bodies whose enum fields are outside their tables.
    fn check_decoder<T>(
        layout: &EventLayout,
        decode: impl Fn(&[u8]) -> Result<T, crate::DecodeError>,
    ) where
        T: bincode::Decode<()> + PartialEq + std::fmt::Debug,
    {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..3000usize {
            let mut body = vec![0u8; layout.body_len + i % 3];
            for b in body.iter_mut() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *b = seed as u8;
            }
            // Mostly valid enum values, sometimes not.
            let enums: Vec<&Field> = layout.fields.iter().filter(|f| f.names.is_some()).collect();
            if i % 4 != 0 {
                for f in &enums {
                    let t = f.names.expect("enum");
                    body[f.offset] = t.entries[i % t.entries.len()].0 as u8;
                }
            }
            let valid = enums.iter().all(|f| {
                let t = f.names.expect("enum");
                t.contains(u64::from(body[f.offset]))
            });
            let (want, _): (T, usize) =
                bincode::decode_from_slice(&body[..layout.body_len], crate::bincode_config())
                    .expect("bincode decodes");
            match decode(&body) {
                Ok(got) => {
                    assert!(valid, "{}: accepted a bad enum value", layout.name);
                    assert_eq!(got, want);
                }
                Err(e) => {
                    assert!(!valid, "{}: rejected a good body: {e}", layout.name);
                    assert_eq!(e.reason(), "bad_field");
                }
            }
            // A version-1 body (an older agent's) reads its appended
            // fields as 0; one byte less is malformed.
            if valid && layout.v1_body_len < layout.body_len {
                let mut zeroed = body[..layout.body_len].to_vec();
                zeroed[layout.v1_body_len..].fill(0);
                let (want, _): (T, usize) =
                    bincode::decode_from_slice(&zeroed, crate::bincode_config())
                        .expect("bincode decodes");
                let got = decode(&body[..layout.v1_body_len]).expect("a version-1 body");
                assert_eq!(got, want, "{}: version-1 body", layout.name);
            }
            let short = decode(&body[..layout.v1_body_len - 1]).expect_err("short body");
            assert_eq!(short.reason(), "body_too_short");
        }
    }

    #[test]
    fn fixed_offset_decoder_matches_bincode() {
        check_decoder(&TxEvent::LAYOUT, TxEvent::decode_body);
        check_decoder(&ClockEvent::LAYOUT, ClockEvent::decode_body);
        check_decoder(&crate::DropEvent::LAYOUT, crate::DropEvent::decode_body);
        check_decoder(&crate::TcpEvent::LAYOUT, crate::TcpEvent::decode_body);
    }

    #[test]
    fn name_tables_match_the_enums() {
        for v in 0..=255u8 {
            assert_eq!(
                TxStage::NAMES.name_of(v.into()),
                TxStage::from_u8(v).map(TxStage::name)
            );
            assert_eq!(
                ClockSource::NAMES.name_of(v.into()),
                ClockSource::from_u8(v).map(ClockSource::name)
            );
            assert_eq!(
                ClockState::NAMES.name_of(v.into()),
                ClockState::from_u8(v).map(ClockState::name)
            );
        }
        for (i, s) in TxStage::ALL.iter().enumerate() {
            assert_eq!(*s as usize, i);
        }
    }

    /// Checks the bytes at each described offset of `bytes` against the
    /// value the test put in that field.
    fn check_header(layout: &HeaderLayout, bytes: &[u8], want: &[(&str, Vec<u8>)]) {
        assert_eq!(
            layout.fields.iter().map(|f| f.name).collect::<Vec<_>>(),
            want.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            "{}: every field checked",
            layout.name
        );
        for (name, v) in want {
            let f = layout.field(name).expect("described");
            assert_eq!(
                &bytes[f.range()],
                &v[..],
                "{}.{name} at {}",
                layout.name,
                f.offset
            );
        }
    }

    #[test]
    fn header_tables_match_the_header_codecs() {
        let h = DatagramHeader {
            version: crate::WIRE_VERSION,
            agent_id: 0x0102_0304_0506_0708,
            boot_id: *b"ABCDEFGHIJKLMNOP",
            seq: 0x1112_1314_1516_1718,
            lost_events: 0x2122_2324_2526_2728,
            first_event_seq: 0x3132_3334_3536_3738,
            clock_source: 2,
            clock_state: 3,
            event_count: 0,
            flags: 0,
            incarnation: 0x4142_4344_4546_4748,
            sink_instance: 0x5152_5354_5556_5758,
            sent_mono_ns: 0x6162_6364_6566_6768,
            hostname: "host-x".to_owned(),
        };
        let mut b = DatagramBuilder::new(&h.hostname, 1500);
        assert!(b.push_raw(77, &[9, 9, 9]));
        let d = b.finish(&h);
        let le = |v: &[u8]| v.to_vec();
        check_header(
            &DATAGRAM_HEADER,
            &d,
            &[
                ("magic", le(&MAGIC)),
                ("version", le(&crate::WIRE_VERSION.to_le_bytes())),
                ("header_len", le(&(86u16 + 6).to_le_bytes())),
                ("agent_id", le(&h.agent_id.to_le_bytes())),
                ("boot_id", le(&h.boot_id)),
                ("seq", le(&h.seq.to_le_bytes())),
                ("lost_events", le(&h.lost_events.to_le_bytes())),
                ("first_event_seq", le(&h.first_event_seq.to_le_bytes())),
                ("clock_source", vec![2]),
                ("clock_state", vec![3]),
                ("event_count", le(&1u16.to_le_bytes())),
                ("hostname_len", vec![6]),
                ("flags", vec![0]),
                ("incarnation", le(&h.incarnation.to_le_bytes())),
                ("sink_instance", le(&h.sink_instance.to_le_bytes())),
                ("sent_mono_ns", le(&h.sent_mono_ns.to_le_bytes())),
            ],
        );
        assert_eq!(
            &d[DATAGRAM_HEADER.fixed_len..DATAGRAM_HEADER.fixed_len + 6],
            b"host-x"
        );
        let rec = &d[DATAGRAM_HEADER.fixed_len + 6..];
        assert_eq!(&rec[RECORD_HEADER[0].range()], &77u16.to_le_bytes());
        assert_eq!(&rec[RECORD_HEADER[1].range()], &3u16.to_le_bytes());

        let mut c = Vec::new();
        CaptureRecord::encode(
            &mut c,
            0x4142_4344_4546_4748,
            0x5152_5354_5556_5758,
            1,
            2,
            "hh",
            rec,
        );
        check_header(
            &CAPTURE_HEADER,
            &c,
            &[
                ("version", le(&CAPTURE_VERSION.to_le_bytes())),
                ("header_len", le(&(23u16 + 2).to_le_bytes())),
                ("agent_id", le(&0x4142_4344_4546_4748u64.to_le_bytes())),
                ("event_seq", le(&0x5152_5354_5556_5758u64.to_le_bytes())),
                ("clock_source", vec![1]),
                ("clock_state", vec![2]),
                ("host_len", vec![2]),
            ],
        );
        assert_eq!(
            &c[CAPTURE_HEADER.fixed_len..CAPTURE_HEADER.fixed_len + 2],
            b"hh"
        );
    }

    #[test]
    fn ack_table_matches_the_ack_codec() {
        let a = crate::Ack {
            sink_instance: 0x0102_0304_0506_0708,
            ack_seq: 0x1112_1314_1516_1718,
            agent_id: 0x2122_2324_2526_2728,
            boot_id: *b"ABCDEFGHIJKLMNOP",
            incarnation: 0x3132_3334_3536_3738,
            preceding_events: 0x4142_4344_4546_4748,
            delivered_events: 0x5152_5354_5556_5758,
            lost_events: 0x6162_6364_6566_6768,
            received_events: 0x7172_7374_7576_7778,
        };
        let b = a.encode_with_mac(|_| [0xEE; MAC_LEN]);
        let le = |v: &[u8]| v.to_vec();
        check_header(
            &ACK_LAYOUT,
            &b,
            &[
                ("magic", le(b"NTRA")),
                ("version", le(&1u16.to_le_bytes())),
                ("ack_len", le(&96u16.to_le_bytes())),
                ("flags", vec![FLAG_MAC]),
                ("reserved", vec![0; 7]),
                ("sink_instance", le(&a.sink_instance.to_le_bytes())),
                ("ack_seq", le(&a.ack_seq.to_le_bytes())),
                ("agent_id", le(&a.agent_id.to_le_bytes())),
                ("boot_id", le(&a.boot_id)),
                ("incarnation", le(&a.incarnation.to_le_bytes())),
                ("preceding_events", le(&a.preceding_events.to_le_bytes())),
                ("delivered_events", le(&a.delivered_events.to_le_bytes())),
                ("lost_events", le(&a.lost_events.to_le_bytes())),
                ("received_events", le(&a.received_events.to_le_bytes())),
            ],
        );
        assert_eq!(&b[ACK_LAYOUT.fixed_len..], &[0xEE; MAC_LEN]);
    }

    /// Compares the generated part of a checked-in file with its rendering;
    /// with `UPDATE_GENERATED=1` rewrites it instead.
    fn check_generated(rel: &str, render: impl Fn(&str) -> Result<String, String>) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(rel);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let spliced =
            render(&text).unwrap_or_else(|m| panic!("{rel}: the marker line {m:?} is missing"));
        if spliced == text {
            return;
        }
        if std::env::var_os("UPDATE_GENERATED").is_some_and(|v| v == "1") {
            std::fs::write(&path, spliced)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
            eprintln!("rewrote the generated part of {rel}");
            return;
        }
        panic!(
            "{rel} is stale: its generated part differs from tracer-codec's layout tables. \
             Regenerate it with `UPDATE_GENERATED=1 cargo test -p tracer-codec`, then \
             review and commit the change (and update the hand-written display code if a \
             field was added)."
        );
    }

    #[test]
    fn dissector_tables_are_current() {
        check_generated("wireshark/nettrace.lua", |t| {
            splice(t, LUA_BEGIN, LUA_END, &render_lua()).ok_or_else(|| LUA_BEGIN.to_owned())
        });
    }

    #[test]
    fn wire_format_doc_tables_are_current() {
        check_generated("docs/wire-format.md", splice_markdown);
    }

    #[test]
    fn splice_replaces_between_markers_only() {
        let t = "a\n<B>\nold\n<E>\nz\n";
        assert_eq!(
            splice(t, "<B>", "<E>", "<B>\nnew\n<E>").as_deref(),
            Some("a\n<B>\nnew\n<E>\nz\n")
        );
        assert_eq!(splice(t, "<X>", "<E>", ""), None);
    }

    #[test]
    fn renderings_hold_every_field() {
        let lua = render_lua();
        let md: String = render_markdown().into_iter().map(|t| t.text).collect();
        for e in EVENTS {
            for f in e.fields {
                let row = format!("{} = {{ offset = {}, size = {},", f.name, f.offset, f.size);
                assert!(lua.contains(&row), "lua lacks {row}");
                let row = format!("| {} | {} | {} |", f.offset, f.size, f.name);
                assert!(md.contains(&row), "markdown lacks {row}");
            }
            assert!(lua.contains(&format!("body_len = {},", e.body_len)));
        }
    }
}
