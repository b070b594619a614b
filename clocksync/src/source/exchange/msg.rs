//! The exchange's message codec (linuxptp's `msg.c`): 40-byte
//! little-endian messages, encoded and validated here, no I/O; with a key,
//! each message carries a 16-byte tag ([`Message::seal`], [`Message::open`]).

use tracer_auth::{MacKey, MAC_LEN};

use crate::error::{ClockError, MessageError};

/// Message magic.
pub const MAGIC: [u8; 4] = *b"CSX1";
/// Protocol version.
pub const VERSION: u8 = 1;
/// Size of every message, bytes.
pub const MSG_LEN: usize = 40;
/// Flag: the responder's global clock is locked.
pub const FLAG_SYNCED: u16 = 1;
/// Flag: a [`MAC_LEN`]-byte tag (HMAC-SHA256-128 with the exchange key,
/// over the 40 bytes before it) follows the message.
pub const FLAG_MAC: u16 = 2;
/// Size of a tagged message, bytes.
pub const TAGGED_LEN: usize = MSG_LEN + MAC_LEN;

/// One message as sent: 40 bytes, or 56 with its tag.
#[derive(Debug, Clone, Copy)]
pub struct Frame {
    buf: [u8; TAGGED_LEN],
    len: usize,
}

impl Frame {
    /// The bytes to send.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// Message kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Client → responder.
    Request = 1,
    /// Responder → client, with t2.
    Response = 2,
    /// Responder → client, with t3.
    FollowUp = 3,
    /// Client → responder, ignored: sent just before each request so the
    /// request does not travel a cache-cold path (see `try_exchange`).
    Warmup = 4,
}

/// One protocol message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message {
    /// Kind.
    pub kind: Kind,
    /// Flags ([`FLAG_SYNCED`]).
    pub flags: u16,
    /// Sequence number.
    pub seq: u64,
    /// t2 or t3 on the responder's global axis, ns.
    pub t_ns: u64,
    /// Responder servo state code (255 = none).
    pub state: u32,
    /// Responder error estimate, ns.
    pub error_estimate_ns: u32,
}

impl Message {
    /// A request.
    pub fn request(seq: u64) -> Self {
        Message {
            kind: Kind::Request,
            flags: 0,
            seq,
            t_ns: 0,
            state: 255,
            error_estimate_ns: 0,
        }
    }

    /// Encode.
    pub fn encode(&self) -> [u8; MSG_LEN] {
        let mut b = [0u8; MSG_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = VERSION;
        b[5] = self.kind as u8;
        b[6..8].copy_from_slice(&self.flags.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.t_ns.to_le_bytes());
        b[24..28].copy_from_slice(&self.state.to_le_bytes());
        b[28..32].copy_from_slice(&self.error_estimate_ns.to_le_bytes());
        b
    }

    /// Encode, tagged when `key` is set (the tag covers [`FLAG_MAC`] too).
    pub fn seal(&self, key: Option<&MacKey>) -> Frame {
        let mut buf = [0u8; TAGGED_LEN];
        let Some(key) = key else {
            buf[..MSG_LEN].copy_from_slice(&self.encode());
            return Frame { buf, len: MSG_LEN };
        };
        let m = Message {
            flags: self.flags | FLAG_MAC,
            ..*self
        };
        buf[..MSG_LEN].copy_from_slice(&m.encode());
        let tag = key.tag(&buf[..MSG_LEN]);
        buf[MSG_LEN..].copy_from_slice(&tag);
        Frame {
            buf,
            len: TAGGED_LEN,
        }
    }

    /// Decode a received message. With `key`, only a tagged message whose
    /// tag checks is taken ([`MessageError::Unauthenticated`] otherwise);
    /// without, a tagged message is read and its tag ignored (this side
    /// has nothing to check it with).
    pub fn open(b: &[u8], key: Option<&MacKey>) -> Result<Self, ClockError> {
        let unauth = Err(ClockError::Message(MessageError::Unauthenticated));
        if b.len() != TAGGED_LEN {
            return match key {
                // Decoded first so garbage still reads as garbage.
                Some(_) => Self::decode(b).and(unauth),
                None => Self::decode(b),
            };
        }
        let (msg, tag) = b.split_at(MSG_LEN);
        let m = Self::decode(msg)?;
        if m.flags & FLAG_MAC == 0 {
            return Err(ClockError::Message(MessageError::Length(b.len())));
        }
        match key {
            Some(k) if !k.verify(msg, tag) => unauth,
            _ => Ok(Message {
                flags: m.flags & !FLAG_MAC,
                ..m
            }),
        }
    }

    /// Decode; rejects wrong size, magic, version or kind.
    pub fn decode(b: &[u8]) -> Result<Self, ClockError> {
        let bad = |e: MessageError| Err(ClockError::Message(e));
        if b.len() != MSG_LEN {
            return bad(MessageError::Length(b.len()));
        }
        if b[0..4] != MAGIC {
            return bad(MessageError::Magic);
        }
        if b[4] != VERSION {
            return bad(MessageError::Version(b[4]));
        }
        let kind = match b[5] {
            1 => Kind::Request,
            2 => Kind::Response,
            3 => Kind::FollowUp,
            4 => Kind::Warmup,
            k => return bad(MessageError::Kind(k)),
        };
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        let u32_at = |o: usize| {
            let mut a = [0u8; 4];
            a.copy_from_slice(&b[o..o + 4]);
            u32::from_le_bytes(a)
        };
        Ok(Message {
            kind,
            flags: u16::from_le_bytes([b[6], b[7]]),
            seq: u64_at(8),
            t_ns: u64_at(16),
            state: u32_at(24),
            error_estimate_ns: u32_at(28),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seed: u8) -> MacKey {
        tracer_auth::SharedKey::from_bytes(&[seed; 32])
            .unwrap()
            .mac_key(tracer_auth::Purpose::ClockExchange)
    }

    #[test]
    fn sealed_messages_open_only_with_their_key() {
        let m = Message {
            kind: Kind::Response,
            flags: FLAG_SYNCED,
            seq: 77,
            t_ns: 1_700_000_000_000_000_000,
            state: 2,
            error_estimate_ns: 5,
        };
        let (k, other) = (key(1), key(2));
        let sealed = m.seal(Some(&k));
        assert_eq!(sealed.as_bytes().len(), TAGGED_LEN);
        assert_eq!(Message::open(sealed.as_bytes(), Some(&k)).unwrap(), m);
        let unauth = |r: Result<Message, ClockError>| {
            matches!(r, Err(ClockError::Message(MessageError::Unauthenticated)))
        };
        assert!(unauth(Message::open(sealed.as_bytes(), Some(&other))));
        // A forged reply: right format, no tag, or a changed t_ns.
        let plain = m.seal(None);
        assert_eq!(plain.as_bytes(), &m.encode()[..]);
        assert!(unauth(Message::open(plain.as_bytes(), Some(&k))));
        for i in 0..TAGGED_LEN {
            let mut b = sealed.as_bytes().to_vec();
            b[i] ^= 0x10;
            assert!(
                Message::open(&b, Some(&k)).is_err(),
                "byte {i} changed and accepted"
            );
        }
        // Without a key both read; the tag is not checked.
        assert_eq!(Message::open(plain.as_bytes(), None).unwrap(), m);
        assert_eq!(Message::open(sealed.as_bytes(), None).unwrap(), m);
        // Garbage stays garbage with a key.
        assert!(matches!(
            Message::open(&[0u8; 40], Some(&k)),
            Err(ClockError::Message(MessageError::Magic))
        ));
    }

    #[test]
    fn message_round_trip_and_rejects() {
        let m = Message {
            kind: Kind::FollowUp,
            flags: FLAG_SYNCED,
            seq: 0x0102_0304_0506_0708,
            t_ns: 42,
            state: 3,
            error_estimate_ns: 17,
        };
        let b = m.encode();
        assert_eq!(&b[0..4], b"CSX1");
        assert_eq!(b[5], 3);
        assert_eq!(Message::decode(&b).unwrap(), m);
        let err = |b: &[u8]| match Message::decode(b) {
            Err(ClockError::Message(e)) => e,
            other => panic!("{other:?}"),
        };
        assert_eq!(err(&b[..39]), MessageError::Length(39));
        let mut bad = b;
        bad[0] = b'X';
        assert_eq!(err(&bad), MessageError::Magic);
        let mut bad = b;
        bad[4] = 2;
        assert_eq!(err(&bad), MessageError::Version(2));
        let mut bad = b;
        bad[5] = 9;
        assert_eq!(err(&bad), MessageError::Kind(9));
    }
}
