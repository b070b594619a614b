//! The wire format's constants: magic, versions, header and record
//! lengths, flags and size limits. The bottom of the wire modules.

/// First four bytes of every datagram.
pub const MAGIC: [u8; 4] = *b"NTRC";
/// The wire version this build writes (it reads this one,
/// [`WIRE_VERSION_2`] and [`WIRE_VERSION_1`]).
pub const WIRE_VERSION: u16 = 3;
/// The second wire version, still read (agents of older builds send it).
pub const WIRE_VERSION_2: u16 = 2;
/// The first wire version, still read (agents of older builds send it).
pub const WIRE_VERSION_1: u16 = 1;
/// Header bytes before the hostname (version 3).
pub const HEADER_FIXED_LEN: usize = 86;
/// Header bytes before the hostname in version 2.
pub const HEADER_FIXED_LEN_V2: usize = 70;
/// Header bytes before the hostname in version 1.
pub const HEADER_FIXED_LEN_V1: usize = 61;
/// `flags` bit 0: the datagram ends with a [`MAC_LEN`]-byte tag.
pub const FLAG_MAC: u8 = 1;
/// Every `flags` bit this build knows; a datagram with another is rejected.
pub const KNOWN_FLAGS: u8 = FLAG_MAC;
/// Bytes of the tag that ends an authenticated datagram.
pub const MAC_LEN: usize = 16;
/// Longest hostname carried (bytes).
pub const MAX_HOSTNAME_LEN: usize = 64;
/// Bytes of a record's kind + length prefix.
pub const RECORD_HEADER_LEN: usize = 4;
/// Largest UDP payload over IPv4; nothing larger is ever valid.
pub const MAX_DATAGRAM_LEN: usize = 65_507;

/// Header bytes before the hostname in `version` (1, 2 or 3).
pub const fn fixed_len(version: u16) -> usize {
    match version {
        WIRE_VERSION_1 => HEADER_FIXED_LEN_V1,
        WIRE_VERSION_2 => HEADER_FIXED_LEN_V2,
        _ => HEADER_FIXED_LEN,
    }
}
