//! Declarative macros that declare a wire type and its layout table in one
//! place, so the Rust type, its decoder and the description the dissector
//! and the docs are generated from cannot drift apart.

/// Declares a `#[repr(u8)]` wire enum together with its [`NameTable`]
/// (`NAMES`), `ALL`, `from_u8` and `name`.
///
/// [`NameTable`]: crate::layout::NameTable
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident (table $table:literal) {
            $(
                $(#[doc = $doc:literal])*
                $var:ident = $val:literal => $text:literal
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[repr(u8)]
        pub enum $name {
            $(
                $(#[doc = $doc])*
                $var = $val,
            )*
        }

        impl $name {
            /// Every value, in wire order.
            pub const ALL: [$name; [$($val),*].len()] = [$($name::$var),*];

            /// Wire values and their names (the dissector's and docs' table).
            pub const NAMES: $crate::layout::field::NameTable = $crate::layout::field::NameTable {
                name: $table,
                entries: &[$(($val, $text)),*],
            };

            /// The value from its wire number; `None` outside the domain.
            #[inline]
            pub fn from_u8(v: u8) -> Option<Self> {
                match v {
                    $($val => Some($name::$var),)*
                    _ => None,
                }
            }

            /// Its name in summaries, the dissector and the docs.
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$var => $text,)*
                }
            }
        }
    };
}

/// Declares an event body struct together with its [`EventLayout`]
/// (`LAYOUT`), `BODY_LEN` (the sum of its field sizes) and a decoder
/// (`decode_body`) that reads every field at its table offset and checks
/// every enum field against its name table. Fields are laid out in order
/// without padding, as bincode's fixed-int encoding writes them (a test
/// compares the table with bincode's real output).
///
/// Each field is `pub name: RustType => FieldType [in NAME_TABLE]`.
///
/// [`EventLayout`]: crate::layout::EventLayout
macro_rules! wire_event {
    (@names) => { None };
    (@names $t:expr) => { Some(&$t) };
    (@v1 $fields:expr) => { $crate::layout::field::fields_len($fields) };
    (@v1 $fields:expr, $n:literal) => { $crate::layout::field::fields_len($fields.split_at($n).0) };
    (
        $(#[$meta:meta])*
        pub struct $name:ident (kind $kind:expr, name $kname:literal, title $title:literal $(, v1_fields $v1:literal)?) {
            $(
                $(#[doc = $doc:literal])*
                pub $field:ident : $ty:ty => $fty:ident $(in $names:expr)?
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(::bincode::Encode, ::bincode::Decode)]
        pub struct $name {
            $(
                $(#[doc = $doc])*
                pub $field: $ty,
            )*
        }

        impl $name {
            const FIELDS: &'static [$crate::layout::field::Field] = &$crate::layout::field::place([
                $(
                    $crate::layout::field::Field::new(
                        stringify!($field),
                        $crate::layout::field::FieldType::$fty,
                        <$ty as $crate::layout::field::WireValue>::SIZE,
                        wire_event!(@names $($names)?),
                        concat!($($doc),*),
                    )
                ),*
            ]);

            /// Encoded size of the body this build writes (the sum of its
            /// fields).
            pub const BODY_LEN: usize = $crate::layout::field::fields_len(Self::FIELDS);

            /// Size of the version-1 body: the fields before those a later
            /// version appended (`v1_fields`). A reader takes a body from
            /// this length on and reads the appended fields it lacks as 0.
            pub const V1_BODY_LEN: usize = wire_event!(@v1 Self::FIELDS $(, $v1)?);

            /// Machine-readable layout of the body.
            pub const LAYOUT: $crate::layout::field::EventLayout = $crate::layout::field::EventLayout {
                kind: $kind,
                name: $kname,
                title: $title,
                body_len: Self::BODY_LEN,
                v1_body_len: Self::V1_BODY_LEN,
                fields: Self::FIELDS,
            };

            /// Decode a body at the table's offsets; trailing bytes (fields
            /// of a newer version) are ignored, and fields appended after
            /// version 1 that a shorter (older) body lacks read as 0. An
            /// enum field outside its name table is a
            /// [`BadField`](crate::DecodeError::BadField).
            #[inline]
            pub fn decode_body(body: &[u8]) -> Result<Self, $crate::error::DecodeError> {
                let padded: [u8; Self::BODY_LEN];
                let b = match body.first_chunk::<{ Self::BODY_LEN }>() {
                    Some(b) => b,
                    None if body.len() >= Self::V1_BODY_LEN => {
                        let mut p = [0u8; Self::BODY_LEN];
                        p[..body.len()].copy_from_slice(body);
                        padded = p;
                        &padded
                    }
                    None => {
                        return Err($crate::error::DecodeError::BodyTooShort {
                            kind: $kind,
                            len: body.len(),
                            need: Self::V1_BODY_LEN,
                        })
                    }
                };
                let mut off = 0usize;
                let ev = $name {
                    $(
                        $field: {
                            let size = <$ty as $crate::layout::field::WireValue>::SIZE;
                            let v = <$ty as $crate::layout::field::WireValue>::read(&b[off..off + size]);
                            off += size;
                            v
                        },
                    )*
                };
                debug_assert_eq!(off, Self::BODY_LEN);
                $($(
                    if !$names.contains(u64::from(ev.$field)) {
                        return Err($crate::error::DecodeError::BadField {
                            kind: $kind,
                            field: stringify!($field),
                        });
                    }
                )?)*
                Ok(ev)
            }

            /// Append the encoded body to `out`: every field little-endian
            /// at its table offset, what bincode's fixed-int encoding
            /// writes (a test holds the two together), without going
            /// through bincode's per-field calls on the agent's hot path.
            #[inline]
            pub fn encode_body(&self, out: &mut Vec<u8>) {
                let start = out.len();
                out.resize(start + Self::BODY_LEN, 0);
                let b = &mut out[start..];
                let mut off = 0usize;
                $(
                    let size = <$ty as $crate::layout::field::WireValue>::SIZE;
                    $crate::layout::field::WireValue::write(&self.$field, &mut b[off..off + size]);
                    off += size;
                )*
                debug_assert_eq!(off, Self::BODY_LEN);
            }

            /// Each field's little-endian bytes, by name (layout tests).
            #[cfg(test)]
            pub(crate) fn field_bytes(&self) -> Vec<(&'static str, Vec<u8>)> {
                vec![$(
                    (stringify!($field), {
                        let mut v = vec![0u8; <$ty as $crate::layout::field::WireValue>::SIZE];
                        $crate::layout::field::WireValue::write(&self.$field, &mut v);
                        v
                    })
                ),*]
            }
        }

        impl $crate::body::WireEvent for $name {
            const KIND: u16 = $kind;
            const BODY_LEN: usize = $name::BODY_LEN;

            #[inline]
            fn encode_body(&self, out: &mut Vec<u8>) {
                $name::encode_body(self, out)
            }
        }
    };
}
