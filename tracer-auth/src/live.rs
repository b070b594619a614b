//! The handshake that opens a sink's live stream (`tracer-sink
//! --live-listen`), which Wireshark's extcap program reads: the sink says
//! whether it wants the deployment key, then each side proves it holds the
//! key over both sides' fresh nonces, so neither a client without the key
//! nor a stranger posing as the sink gets through, and a recorded
//! handshake cannot be replayed (the other side's nonce is new each time).
//!
//! On the wire, in order (all sizes fixed):
//! 1. sink → client, [`ServerHello`] (25 bytes): `b"NTLIVE01"`, a flags
//!    byte (bit 0: key required), the sink's 16-byte nonce;
//! 2. client → sink, [`ClientHello`] (32 bytes): the client's 16-byte
//!    nonce, its 16-byte tag (zero without a key);
//! 3. sink → client, [`Verdict`] (17 bytes): a [`Status`] byte and the
//!    sink's 16-byte tag (zero without a key);
//! 4. on [`Status::Ok`], the pcapng stream until either side closes.
//!
//! The tags are [`MacKey::tag`] with the [`Purpose::LiveStream`] key over
//! a role byte (`C` for the client's, `S` for the sink's) and both nonces.
//! Pure encoding and checking; the caller does the I/O and draws the
//! nonces from the OS.

use crate::{MacKey, Purpose, SharedKey, MAC_LEN};

/// Opens the sink's first message; the digits are the protocol version.
pub const MAGIC: [u8; 8] = *b"NTLIVE01";
/// Bytes of a nonce.
pub const NONCE_LEN: usize = 16;
/// Bytes of the sink's first message.
pub const SERVER_HELLO_LEN: usize = MAGIC.len() + 1 + NONCE_LEN;
/// Bytes of the client's reply.
pub const CLIENT_HELLO_LEN: usize = NONCE_LEN + MAC_LEN;
/// Bytes of the sink's verdict.
pub const VERDICT_LEN: usize = 1 + MAC_LEN;

const FLAG_KEY_REQUIRED: u8 = 1;

/// Why a handshake failed. Every message says what to do.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HandshakeError {
    /// The peer does not speak this protocol (or another version of it).
    #[error(
        "the peer is not a nettrace sink's live stream (got {got:02x?} where \"NTLIVE01\" \
         belongs): check the address and port given to --live-listen"
    )]
    BadMagic {
        /// The bytes received instead of the magic.
        got: [u8; 8],
    },
    /// Flag bits this version does not know.
    #[error("the sink sent unknown flags {0:#04x}: it is a newer version; upgrade this program")]
    UnknownFlags(u8),
    /// The sink wants a key the client does not have.
    #[error("the sink requires the deployment key: pass --key-file with the sink's key")]
    KeyRequired,
    /// The sink refused the client.
    #[error("the sink refused the connection: {0}")]
    Refused(Status),
    /// A status byte this version does not know.
    #[error("the sink answered with unknown status {0}: upgrade this program")]
    UnknownStatus(u8),
    /// The sink's tag does not check: it does not hold our key.
    #[error(
        "the sink could not prove it holds the deployment key: a different key, or not \
         the sink you meant; check --key-file on both ends"
    )]
    BadServerTag,
}

/// The sink's answer to a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    /// Accepted: the stream follows.
    Ok = 0,
    /// The client's tag did not check (no key or another key).
    BadTag = 1,
    /// The sink serves as many clients as it allows.
    TooManyClients = 2,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Status::Ok => "accepted",
            Status::BadTag => "wrong or missing key (pass --key-file with the sink's key)",
            Status::TooManyClients => {
                "the sink serves as many live clients as it allows (close another one)"
            }
        })
    }
}

impl Status {
    fn from_byte(b: u8) -> Result<Self, HandshakeError> {
        match b {
            0 => Ok(Status::Ok),
            1 => Ok(Status::BadTag),
            2 => Ok(Status::TooManyClients),
            other => Err(HandshakeError::UnknownStatus(other)),
        }
    }
}

/// The sink's first message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerHello {
    /// Whether the client must prove it holds the key.
    pub key_required: bool,
    /// The sink's fresh nonce.
    pub nonce: [u8; NONCE_LEN],
}

impl ServerHello {
    /// The bytes to send.
    pub fn encode(&self) -> [u8; SERVER_HELLO_LEN] {
        let mut b = [0u8; SERVER_HELLO_LEN];
        b[..8].copy_from_slice(&MAGIC);
        b[8] = if self.key_required {
            FLAG_KEY_REQUIRED
        } else {
            0
        };
        b[9..].copy_from_slice(&self.nonce);
        b
    }

    /// Parse the bytes received.
    pub fn decode(b: &[u8; SERVER_HELLO_LEN]) -> Result<Self, HandshakeError> {
        let mut magic = [0u8; 8];
        magic.copy_from_slice(&b[..8]);
        if magic != MAGIC {
            return Err(HandshakeError::BadMagic { got: magic });
        }
        if b[8] & !FLAG_KEY_REQUIRED != 0 {
            return Err(HandshakeError::UnknownFlags(b[8]));
        }
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&b[9..]);
        Ok(ServerHello {
            key_required: b[8] & FLAG_KEY_REQUIRED != 0,
            nonce,
        })
    }
}

/// The client's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientHello {
    /// The client's fresh nonce.
    pub nonce: [u8; NONCE_LEN],
    /// Its proof of the key (zero without one).
    pub tag: [u8; MAC_LEN],
}

impl ClientHello {
    /// The reply to `server` with the client's fresh `nonce`, tagged with
    /// `key` if the client has one. Fails only when the sink wants a key
    /// and the client has none (sending a reply the sink must refuse would
    /// only delay that message).
    pub fn answer(
        server: &ServerHello,
        nonce: [u8; NONCE_LEN],
        key: Option<&SharedKey>,
    ) -> Result<Self, HandshakeError> {
        let tag = match key {
            Some(k) => tag(&mac(k), b'C', &server.nonce, &nonce),
            None if server.key_required => return Err(HandshakeError::KeyRequired),
            None => [0u8; MAC_LEN],
        };
        Ok(ClientHello { nonce, tag })
    }

    /// The bytes to send.
    pub fn encode(&self) -> [u8; CLIENT_HELLO_LEN] {
        let mut b = [0u8; CLIENT_HELLO_LEN];
        b[..NONCE_LEN].copy_from_slice(&self.nonce);
        b[NONCE_LEN..].copy_from_slice(&self.tag);
        b
    }

    /// Parse the bytes received.
    pub fn decode(b: &[u8; CLIENT_HELLO_LEN]) -> Self {
        let mut nonce = [0u8; NONCE_LEN];
        let mut tag = [0u8; MAC_LEN];
        nonce.copy_from_slice(&b[..NONCE_LEN]);
        tag.copy_from_slice(&b[NONCE_LEN..]);
        ClientHello { nonce, tag }
    }
}

/// The sink's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// Accepted or why not.
    pub status: Status,
    /// The sink's proof of the key (zero without one).
    pub tag: [u8; MAC_LEN],
}

impl Verdict {
    /// The sink's decision on `client`, answering its own `server` hello:
    /// [`Status::BadTag`] when the sink has a key and the client's tag does
    /// not check, else `status` (what the sink's limits say). The verdict
    /// carries the sink's own tag whenever it has a key.
    pub fn decide(
        server: &ServerHello,
        client: &ClientHello,
        key: Option<&SharedKey>,
        status: Status,
    ) -> Self {
        let Some(k) = key else {
            return Verdict {
                status,
                tag: [0u8; MAC_LEN],
            };
        };
        let m = mac(k);
        let mut data = [0u8; 1 + 2 * NONCE_LEN];
        fill(&mut data, b'C', &server.nonce, &client.nonce);
        let status = if m.verify(&data, &client.tag) {
            status
        } else {
            Status::BadTag
        };
        Verdict {
            status,
            tag: tag(&m, b'S', &server.nonce, &client.nonce),
        }
    }

    /// The bytes to send.
    pub fn encode(&self) -> [u8; VERDICT_LEN] {
        let mut b = [0u8; VERDICT_LEN];
        b[0] = self.status as u8;
        b[1..].copy_from_slice(&self.tag);
        b
    }

    /// Parse the bytes received and check them against the handshake the
    /// client took part in: Ok only when the sink accepted and, if the
    /// client has a key, proved that it holds the same one.
    pub fn check(
        b: &[u8; VERDICT_LEN],
        server: &ServerHello,
        client: &ClientHello,
        key: Option<&SharedKey>,
    ) -> Result<(), HandshakeError> {
        let status = Status::from_byte(b[0])?;
        if status != Status::Ok {
            return Err(HandshakeError::Refused(status));
        }
        if let Some(k) = key {
            let mut data = [0u8; 1 + 2 * NONCE_LEN];
            fill(&mut data, b'S', &server.nonce, &client.nonce);
            if !mac(k).verify(&data, &b[1..]) {
                return Err(HandshakeError::BadServerTag);
            }
        }
        Ok(())
    }
}

fn mac(key: &SharedKey) -> MacKey {
    key.mac_key(Purpose::LiveStream)
}

fn fill(data: &mut [u8; 1 + 2 * NONCE_LEN], role: u8, server: &[u8; 16], client: &[u8; 16]) {
    data[0] = role;
    data[1..1 + NONCE_LEN].copy_from_slice(server);
    data[1 + NONCE_LEN..].copy_from_slice(client);
}

fn tag(m: &MacKey, role: u8, server: &[u8; 16], client: &[u8; 16]) -> [u8; MAC_LEN] {
    let mut data = [0u8; 1 + 2 * NONCE_LEN];
    fill(&mut data, role, server, client);
    m.tag(&data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> SharedKey {
        SharedKey::from_bytes(&[b; 32]).unwrap()
    }

    /// Both ends of one handshake; the verdict bytes as the client gets them.
    fn run(
        server_key: Option<&SharedKey>,
        client_key: Option<&SharedKey>,
        limits: Status,
    ) -> Result<(), HandshakeError> {
        let hello = ServerHello {
            key_required: server_key.is_some(),
            nonce: [7; 16],
        };
        let got = ServerHello::decode(&hello.encode())?;
        let reply = ClientHello::answer(&got, [9; 16], client_key)?;
        let at_sink = ClientHello::decode(&reply.encode());
        let verdict = Verdict::decide(&hello, &at_sink, server_key, limits);
        Verdict::check(&verdict.encode(), &got, &reply, client_key)
    }

    #[test]
    fn same_key_and_no_key_are_accepted() {
        assert_eq!(run(Some(&key(1)), Some(&key(1)), Status::Ok), Ok(()));
        assert_eq!(run(None, None, Status::Ok), Ok(()));
    }

    #[test]
    fn wrong_or_missing_key_is_refused() {
        assert_eq!(
            run(Some(&key(1)), Some(&key(2)), Status::Ok),
            Err(HandshakeError::Refused(Status::BadTag))
        );
        assert_eq!(
            run(Some(&key(1)), None, Status::Ok),
            Err(HandshakeError::KeyRequired)
        );
    }

    #[test]
    fn a_sink_without_our_key_is_caught() {
        // A client holding a key talks to something that does not: its
        // verdict carries no valid tag.
        assert_eq!(
            run(None, Some(&key(1)), Status::Ok),
            Err(HandshakeError::BadServerTag)
        );
    }

    #[test]
    fn limits_refuse_with_their_reason() {
        assert_eq!(
            run(Some(&key(1)), Some(&key(1)), Status::TooManyClients),
            Err(HandshakeError::Refused(Status::TooManyClients))
        );
    }

    #[test]
    fn a_replayed_client_hello_fails_a_new_nonce() {
        let k = key(3);
        let first = ServerHello {
            key_required: true,
            nonce: [1; 16],
        };
        let reply = ClientHello::answer(&first, [2; 16], Some(&k)).unwrap();
        let second = ServerHello {
            nonce: [4; 16],
            ..first
        };
        let v = Verdict::decide(&second, &reply, Some(&k), Status::Ok);
        assert_eq!(v.status, Status::BadTag);
        assert_eq!(
            Verdict::decide(&first, &reply, Some(&k), Status::Ok).status,
            Status::Ok
        );
    }

    #[test]
    fn malformed_hellos_and_verdicts_are_named() {
        let mut b = ServerHello {
            key_required: false,
            nonce: [0; 16],
        }
        .encode();
        b[8] = 0x80;
        assert_eq!(
            ServerHello::decode(&b),
            Err(HandshakeError::UnknownFlags(0x80))
        );
        b[0] = b'X';
        assert!(matches!(
            ServerHello::decode(&b),
            Err(HandshakeError::BadMagic { .. })
        ));
        let hello = ServerHello::decode(&{
            let mut ok = b;
            ok[..8].copy_from_slice(&MAGIC);
            ok[8] = 0;
            ok
        })
        .unwrap();
        let reply = ClientHello::answer(&hello, [0; 16], None).unwrap();
        let mut v = [0u8; VERDICT_LEN];
        v[0] = 9;
        assert_eq!(
            Verdict::check(&v, &hello, &reply, None),
            Err(HandshakeError::UnknownStatus(9))
        );
    }

    #[test]
    fn the_tag_binds_role_and_both_nonces() {
        let m = mac(&key(5));
        let base = tag(&m, b'C', &[1; 16], &[2; 16]);
        assert_ne!(base, tag(&m, b'S', &[1; 16], &[2; 16]));
        assert_ne!(base, tag(&m, b'C', &[2; 16], &[1; 16]));
        assert_ne!(base, tag(&m, b'C', &[1; 16], &[3; 16]));
        // Another purpose's key never makes this tag.
        let other = key(5).mac_key(Purpose::Datagram);
        assert_ne!(base, tag(&other, b'C', &[1; 16], &[2; 16]));
    }
}
