//! Shared-key authentication for a nettrace deployment: the key file
//! (`--key-file` on agent, sink and clock tools), the per-purpose keys
//! derived from it, and the 16-byte tags (HMAC-SHA256 truncated to 128
//! bits, as IEEE 1588-2019 annex P uses for PTP) carried by datagrams,
//! acknowledgements and clock exchange messages, and the handshake that
//! opens a sink's live stream ([`live`]).
//!
//! Why HMAC-SHA256 and not keyed BLAKE3: measured on the development VM
//! (x86-64 with the SHA extensions, hmac 0.12 / sha2 0.10 against blake3
//! 1.x `keyed_hash`), one 1472-byte datagram, the size agents send on an
//! Ethernet path, costs 0.92-0.98 µs with HMAC-SHA256 and 1.6-1.8 µs with
//! BLAKE3, whose SIMD speed only shows from several 1 KiB chunks on (8 KiB:
//! 1.7 µs against 4.7 µs). MTU-sized datagrams are the case that matters,
//! and HMAC-SHA256 is the standard choice that any other implementation
//! (a dissector, a PTP stack) can check.
//!
//! The key never leaves this crate in printable form: [`SharedKey`] and
//! [`MacKey`] print as `<redacted>`, and the key bytes are overwritten when
//! dropped.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub mod live;

/// Bytes of every tag on the wire.
pub const MAC_LEN: usize = 16;
/// Fewest key bytes a key file may hold (128 bits).
pub const MIN_KEY_LEN: usize = 16;
/// Most bytes a key file may hold: a larger file is probably not a key.
pub const MAX_KEY_LEN: usize = 4096;

type HmacSha256 = Hmac<Sha256>;

/// Why a key file was refused. Every message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file cannot be opened or read.
    #[error("cannot read the key file {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Group or other users may access the file.
    #[error(
        "the key file {} can be accessed by group or other users (mode {mode:04o}); \
         make it private with `chmod 600 {}`",
        path.display(),
        path.display()
    )]
    Permissions {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Not a regular file.
    #[error("the key file {} is not a regular file", path.display())]
    NotAFile {
        /// The path.
        path: PathBuf,
    },
    /// Too few bytes.
    #[error(
        "the key file {} holds {len} bytes, a key needs at least {MIN_KEY_LEN}; \
         make one with `head -c 32 /dev/urandom > {}`",
        path.display(),
        path.display()
    )]
    TooShort {
        /// The file.
        path: PathBuf,
        /// Bytes found.
        len: usize,
    },
    /// Too many bytes.
    #[error(
        "the key file {} holds more than {MAX_KEY_LEN} bytes: is it the right file?",
        path.display()
    )]
    TooLong {
        /// The file.
        path: PathBuf,
    },
}

/// What a derived key authenticates. Each purpose gets its own key, so a
/// tag made for one kind of message never checks as another kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Agent → sink datagrams.
    Datagram,
    /// Sink → agent acknowledgements.
    Ack,
    /// Clock exchange messages, both directions.
    ClockExchange,
    /// The live stream handshake ([`live`]), both directions.
    LiveStream,
}

impl Purpose {
    /// The derivation label (part of the protocol: changing it changes keys).
    fn label(self) -> &'static [u8] {
        match self {
            Purpose::Datagram => b"nettrace datagram v2",
            Purpose::Ack => b"nettrace ack v1",
            Purpose::ClockExchange => b"nettrace clock exchange v1",
            Purpose::LiveStream => b"nettrace live stream v1",
        }
    }
}

/// The deployment's shared key: the bytes of the key file.
pub struct SharedKey {
    bytes: Vec<u8>,
}

impl fmt::Debug for SharedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SharedKey(<redacted>)")
    }
}

impl Drop for SharedKey {
    fn drop(&mut self) {
        for b in self.bytes.iter_mut() {
            // SAFETY: `b` is a valid, exclusive reference to a byte we own;
            // a volatile write keeps the compiler from dropping the wipe.
            unsafe { std::ptr::write_volatile(b, 0) };
        }
    }
}

impl SharedKey {
    /// Read a key file: a regular file that only its owner may access
    /// (mode 0600 or stricter), holding 16 to 4096 bytes. Every byte counts
    /// (a trailing newline too): copy the same file to every host.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        use std::os::unix::fs::PermissionsExt;
        let read_err = |source| KeyError::Read {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read_err)?;
        // Checked on the open file, not the path: nothing can swap the file
        // between the check and the read.
        let meta = file.metadata().map_err(read_err)?;
        if !meta.is_file() {
            return Err(KeyError::NotAFile {
                path: path.to_owned(),
            });
        }
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(KeyError::Permissions {
                path: path.to_owned(),
                mode,
            });
        }
        let mut bytes = Vec::with_capacity(64);
        file.take(MAX_KEY_LEN as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(read_err)?;
        let key = SharedKey { bytes };
        if key.bytes.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong {
                path: path.to_owned(),
            });
        }
        if key.bytes.len() < MIN_KEY_LEN {
            return Err(KeyError::TooShort {
                path: path.to_owned(),
                len: key.bytes.len(),
            });
        }
        Ok(key)
    }

    /// A key from bytes (tests, tools): `None` when shorter than
    /// [`MIN_KEY_LEN`] or longer than [`MAX_KEY_LEN`].
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        (MIN_KEY_LEN..=MAX_KEY_LEN)
            .contains(&bytes.len())
            .then(|| SharedKey {
                bytes: bytes.to_vec(),
            })
    }

    /// The key for one purpose: HMAC-SHA256(shared key, label).
    pub fn mac_key(&self, purpose: Purpose) -> MacKey {
        let mut m = HmacSha256::new_from_slice(&self.bytes).expect("HMAC takes keys of any length");
        m.update(purpose.label());
        let derived = m.finalize().into_bytes();
        MacKey {
            mac: HmacSha256::new_from_slice(&derived).expect("HMAC takes keys of any length"),
        }
    }
}

/// A derived key, ready to tag and check messages. Cloning is cheap (the
/// keyed HMAC state is computed once).
#[derive(Clone)]
pub struct MacKey {
    mac: HmacSha256,
}

impl fmt::Debug for MacKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MacKey(<redacted>)")
    }
}

impl MacKey {
    /// The tag of `data`: HMAC-SHA256 truncated to its first 16 bytes.
    pub fn tag(&self, data: &[u8]) -> [u8; MAC_LEN] {
        let mut m = self.mac.clone();
        m.update(data);
        let full = m.finalize().into_bytes();
        let mut t = [0u8; MAC_LEN];
        t.copy_from_slice(&full[..MAC_LEN]);
        t
    }

    /// Whether `tag` is the tag of `data`, compared in constant time.
    pub fn verify(&self, data: &[u8], tag: &[u8]) -> bool {
        if tag.len() != MAC_LEN {
            return false;
        }
        let mut m = self.mac.clone();
        m.update(data);
        m.verify_truncated_left(tag).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn write_key(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn rfc4231_case_2_truncated() {
        // RFC 4231 test case 2 checks HMAC-SHA256 itself (no derivation).
        let mac = MacKey {
            mac: HmacSha256::new_from_slice(b"Jefe").unwrap(),
        };
        let want = [
            0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e, 0x6a, 0x04, 0x24, 0x26, 0x08, 0x95,
            0x75, 0xc7,
        ];
        let data = b"what do ya want for nothing?";
        assert_eq!(mac.tag(data), want);
        assert!(mac.verify(data, &want));
        let mut bad = want;
        bad[15] ^= 1;
        assert!(!mac.verify(data, &bad));
        assert!(!mac.verify(data, &want[..15]));
    }

    #[test]
    fn purposes_and_keys_give_different_tags() {
        let a = SharedKey::from_bytes(&[1u8; 32]).unwrap();
        let b = SharedKey::from_bytes(&[2u8; 32]).unwrap();
        let msg = b"NTRC some datagram";
        let d = a.mac_key(Purpose::Datagram).tag(msg);
        assert_eq!(d, a.mac_key(Purpose::Datagram).tag(msg), "deterministic");
        assert_ne!(d, a.mac_key(Purpose::Ack).tag(msg));
        assert_ne!(d, a.mac_key(Purpose::ClockExchange).tag(msg));
        assert_ne!(d, b.mac_key(Purpose::Datagram).tag(msg));
        assert!(!b.mac_key(Purpose::Datagram).verify(msg, &d));
        assert!(SharedKey::from_bytes(&[0; 15]).is_none());
    }

    #[test]
    fn key_files_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let good = write_key(dir.path(), "good", &[7; 32], 0o600);
        let k = SharedKey::load(&good).unwrap();
        assert_eq!(format!("{k:?}"), "SharedKey(<redacted>)");
        assert_eq!(
            format!("{:?}", k.mac_key(Purpose::Datagram)),
            "MacKey(<redacted>)"
        );
        assert!(SharedKey::load(&write_key(dir.path(), "ro", &[7; 32], 0o400)).is_ok());

        for mode in [0o640, 0o604, 0o660, 0o620, 0o601] {
            let p = write_key(dir.path(), &format!("m{mode:o}"), &[7; 32], mode);
            let e = SharedKey::load(&p).unwrap_err();
            assert!(matches!(e, KeyError::Permissions { .. }), "{mode:o}: {e}");
            let msg = e.to_string();
            assert!(msg.contains("chmod 600"), "{msg}");
            assert!(msg.contains(&format!("{mode:04o}")), "{msg}");
        }
        let short = write_key(dir.path(), "short", b"0123456789", 0o600);
        let e = SharedKey::load(&short).unwrap_err();
        assert!(matches!(e, KeyError::TooShort { len: 10, .. }), "{e}");
        assert!(e.to_string().contains("/dev/urandom"), "{e}");
        let long = write_key(dir.path(), "long", &[1; MAX_KEY_LEN + 1], 0o600);
        assert!(matches!(
            SharedKey::load(&long).unwrap_err(),
            KeyError::TooLong { .. }
        ));
        let missing = dir.path().join("missing");
        let e = SharedKey::load(&missing).unwrap_err();
        assert!(matches!(e, KeyError::Read { .. }), "{e}");
        assert!(e.to_string().contains("missing"), "{e}");
        let e = SharedKey::load(dir.path()).unwrap_err();
        assert!(matches!(e, KeyError::NotAFile { .. }), "{e}");
    }

    #[test]
    fn errors_never_show_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let secret = b"SECRET-KEY-BYTES-0123456789";
        let p = write_key(dir.path(), "k", secret, 0o644);
        let e = SharedKey::load(&p).unwrap_err();
        assert!(!format!("{e} {e:?}").contains("SECRET"));
    }
}
