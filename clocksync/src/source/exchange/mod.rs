//! Two-way time exchange for hosts without PTP: the agent (client) asks the
//! sink (responder, the master) over UDP; every message is stamped by the
//! kernel (SO_TIMESTAMPING software TX stamps from the error queue, RX stamps
//! from the SCM_TIMESTAMPING control message), never in user space. Offset
//! and path delay come from the four stamps; the minimum-delay exchange of a
//! burst becomes one [`crate::OffsetSample`] for the servo.
//!
//! # Messages
//! Every message is 40 bytes, little-endian (requests as long as answers,
//! so both directions take the same serialisation time):
//!
//! | off | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `b"CSX1"` |
//! | 4 | 1 | version = 1 |
//! | 5 | 1 | kind: 1 request, 2 response (carries t2), 3 follow-up (carries t3) |
//! | 6 | 2 | flags: bit 0 = responder clock synchronised (locked) |
//! | 8 | 8 | sequence number (client's; echoed) |
//! | 16 | 8 | `t_ns`: t2 or t3 on the responder's global axis, 0 in requests |
//! | 24 | 4 | responder servo state code (0-3, 255 = none) |
//! | 28 | 4 | responder error estimate, ns (saturated) |
//! | 32 | 8 | reserved, 0 |
//! | 40 | 16 | tag, only when flags bit 1 is set: HMAC-SHA256-128 of bytes 0-39 with the exchange key |
//!
//! With a key (`--key-file`), both sides send only tagged messages and drop
//! every message whose tag is missing or wrong (counted as
//! `unauthenticated`): a forged reply would otherwise shift the client's
//! clock. A replayed reply cannot be used either: the client starts its
//! sequence numbers at a random value per process and takes only the
//! answers to its current request.
//!
//! The responder learns t3 (its reply's TX stamp) only after sending the
//! response, so it sends it in a follow-up, as two-step PTP does.
//!
//! # Time axes
//! Kernel software stamps are CLOCK_REALTIME. Each side maps them to its own
//! axis with a tight realtime↔monotonic bracket taken per exchange (same
//! kernel, so only the bracket width and NTP slew during one round trip
//! matter): the client to CLOCK_MONOTONIC, the responder further through
//! its [`crate::GlobalClock`]. The client applies the test-only
//! [`crate::ErrorInjection`] to every realtime stamp and reading, which cancels
//! out, as it must: the exchange does not depend on the client's realtime.
//! A simulated oscillator ([`crate::Oscillator`], test-only) is different: it
//! stands for the client's whole clock, so t1 and t4 are the instants its
//! monotonic clock would read, each with its own noise, before any
//! arithmetic; the servo then has to learn it, as on a second machine.
//!
//! With t1 (client TX), t2 (responder RX), t3 (responder TX), t4 (client RX):
//! `offset = ((t2 - t1) + (t3 - t4)) / 2`, `delay = (t4 - t1) - (t3 - t2)`,
//! and the sample is "at mono (t1+t4)/2 the reference read (t2+t3)/2".
//!
//! # Files
//! [`msg`] the message codec, [`stamps`] the four-stamp arithmetic,
//! [`socket`] SO_TIMESTAMPING and every `unsafe` of the exchange,
//! [`phcmap`] hardware stamps on the monotonic axis, [`client`] and
//! [`responder`] the two sides, [`stats`] their counters.

pub mod client;
pub mod msg;
pub mod phcmap;
pub mod responder;
pub mod socket;
pub mod stamps;
pub mod stats;

pub use client::{ExchangeClient, ExchangeConfig};
pub use msg::{Frame, Kind, Message, FLAG_MAC, FLAG_SYNCED, MAGIC, MSG_LEN, TAGGED_LEN, VERSION};
pub use phcmap::PhcMap;
pub use responder::{spawn_responder, Responder};
pub use socket::{enable_timestamping, sockaddr_to_std, StampMode, HARDWARE_FLAGS, SOFTWARE_FLAGS};
pub use stamps::{min_delay, Exchange};
pub use stats::{ExchangeStats, SharedExchangeStats};
