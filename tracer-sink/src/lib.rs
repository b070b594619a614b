//! tracer-sink: receives events from tracer agents over UDP, checks them,
//! orders them in global time and writes pcapng files.
//!
//! Library first, thin binary: [`run`] takes a bound socket, a
//! [`SinkConfig`] and a shutdown future, so tests drive the real server on
//! `127.0.0.1:0`. Data path:
//!
//! ```text
//! UDP socket -> receive task (tokio): recvmmsg, header read once, tag
//!               check (with a key), the rest validated, per-agent
//!               sequence, acks back; under load one wakeup a millisecond
//!            -> batches over a bounded channel (recycled through a pool)
//!            -> writer thread: reorder buffer (time buckets of event
//!               references) -> pcapng (SHB/IDB/ISB by pcap-file, EPBs
//!               encoded in place) -> files (written in 1 MiB chunks,
//!               write-behind)
//! ```
//!
//! Memory is bounded by configuration, not by what senders do:
//! - batches in flight: [`CHANNEL_BATCHES`] (64) of at most 8192 events
//!   (about 1.6 MB each with MTU-sized datagrams), plus spare batches of
//!   at most 2 MB each, 32 MB in all, kept for reuse;
//! - the reorder buffer: at most `reorder_max_events` events (2 M by
//!   default), each holding its record, 32 bytes of metadata, a 16-byte
//!   reorder entry and its share of a batch; a batch handed over is at
//!   most 4 times the size of its content (`Batch::take_fitting`: batches
//!   sized for a burst but holding a few datagrams, kept alive for one
//!   reorder window, were what grew a sink to 125 MB at 105 k events/s;
//!   it now stays near 27 MB);
//! - agents: at most [`agents::MAX_AGENTS`] live, admitted at a limited
//!   rate ([`limits`]), idle ones expired; gap tracking at most
//!   [`seq::MAX_GAP_RANGES`] ranges per agent and
//!   [`agents::MAX_TOTAL_GAP_RANGES`] in all (about 12 MB);
//! - rejects by source: [`stats::MAX_REJECT_SOURCES`] addresses;
//! - the live interface (`live_iface`): at most 64 chunks of 64 KiB
//!   queued for its writer thread (`tracer_live::iface`);
//! - the live stream (`live_stream`): at most `max_clients` clients, each
//!   with at most `client_queue_chunks` hand-overs of 256 KiB (8 MiB by
//!   default) queued; the stream's header (SHB and IDBs) at most 4096
//!   interfaces before a new section starts ([`live`]);
//! - the metrics (`metrics`): one series per live agent and metric,
//!   encoded at each scrape, none kept in between ([`metrics`]).
//!
//! Loss is never silent: rejected datagrams are counted by reason and by
//! source; sequence gaps and agent-side losses per agent (and in each
//! file's Interface Statistics Blocks); events the sink itself could not
//! write as `sink_write_lost`; live frames and stream events not shown,
//! and stream clients cut or refused, under `live`.

pub mod agents;
mod batch;
pub mod clock;
pub mod compression;
pub mod config;
pub mod embedded;
pub mod error;
mod fasthash;
pub mod freshness;
pub mod limits;
pub mod live;
pub mod metrics;
mod pcapng;
pub mod peers;
mod receiver;
pub mod reorder;
pub mod seq;
mod service;
pub mod socket;
pub mod stats;
mod summary;
pub mod timesync;
pub mod trace_writer;
mod writer;
pub mod writer_args;

pub use crate::clock::SinkClock;
pub use crate::config::{
    parse_rcvbuf, parse_rotate_size, parse_size, prepare_output_dir, Compression, SinkConfig,
};
pub use crate::embedded::EmbeddedSink;
pub use crate::error::SinkError;
pub use crate::live::LiveStreamConfig;
pub use crate::metrics::SinkMetrics;
pub use crate::pcapng::{flush_len, interface_description, is_zstd, EPB_PACKETID, PAD_BLOCK};
pub use crate::peers::SinkKeys;
pub use crate::socket::{bind_udp, DEFAULT_RCVBUF};
pub use crate::stats::{AgentStats, LiveStats, SinkStats};
pub use crate::trace_writer::{InterfaceTotals, LinkType, TraceAgent, TraceWriter};
pub use crate::writer_args::WriterArgs;

pub use crate::service::{run, run_with_reporter, CHANNEL_BATCHES};
