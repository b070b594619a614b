//! What every event body shares: fixed-width little-endian bincode, and
//! the [`WireEvent`] trait a sender frames a body through (`wire_event!`
//! implements it for every kind it declares).

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

/// The bincode configuration the wire's bodies follow: fixed-width
/// little-endian integers, so a Lua dissector can read fields at fixed
/// offsets. The codec encodes and decodes at the table's offsets itself;
/// tests hold both to what bincode does with this configuration.
#[cfg(test)]
pub(crate) fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard()
        .with_little_endian()
        .with_fixed_int_encoding()
}
