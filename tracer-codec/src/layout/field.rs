//! The bottom of the layout description: what a field is (offset, size,
//! type, doc), how an enum's values are named, and the layout of an event
//! body or a header as a run of fields. Every event type and the codec's
//! readers build on these; the registry of all layouts and the renderers
//! sit above (`layout/registry.rs`, `lua.rs`, `markdown.rs`).

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
            #[inline]
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
    #[inline]
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
