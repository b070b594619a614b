//! The serialisable [`SinkStats`] snapshot and its human table: what the
//! binary prints (JSON with `--json`) and tests read.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use tracer_codec::ClockSource;

use super::live::LiveStats;
use crate::agents::AgentTotals;

/// One agent's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentStats {
    /// Hostname from the latest datagram.
    pub host: String,
    /// Agent id as 16 hex digits (as in the pcapng interface description).
    pub agent_id: String,
    /// Boot id of the agent host, 32 hex digits.
    pub boot_id: String,
    /// Clock source name (`system`, `phc`, `sink`, or `unknown(N)`).
    pub clock_source: String,
    /// Clock servo state name (`UNLOCKED` ... `LOCKED_STABLE`).
    pub clock_state: String,
    /// Datagrams accepted.
    pub datagrams: u64,
    /// Events accepted.
    pub events: u64,
    /// Datagrams missing from the sequence (net of late arrivals).
    pub datagram_gaps: u64,
    /// Events missing according to `first_event_seq` (net of late arrivals).
    pub event_gaps: u64,
    /// Events the agent itself reported lost (max of its cumulative counter).
    pub agent_lost: u64,
    /// Exact duplicate datagrams rejected.
    pub duplicates: u64,
    /// Datagrams older than every remembered gap, rejected.
    pub stale: u64,
    /// Late datagrams that filled a gap (accepted).
    pub late_datagrams: u64,
    /// Datagrams rejected as `seq_jump`: their sequence, event sequence
    /// or position was beyond the bounds of `tracer_sink::seq` (a forged
    /// or confused sender); they changed nothing.
    #[serde(default)]
    pub seq_jumps: u64,
    /// Times the sink followed the agent to a new sequence position after
    /// a consistent jump (the distance is not counted as loss).
    #[serde(default)]
    pub resyncs: u64,
    /// Late datagrams accepted into a gap range kept whole at the memory
    /// bound (loss counters left as they were: loss may be overstated).
    #[serde(default)]
    pub uncertain_fills: u64,
    /// Datagrams whose cumulative `lost_events` rose by more than the
    /// bounded step (the rise was cut).
    #[serde(default)]
    pub lost_clamped: u64,
    /// Gap ranges the sink holds for this agent (bounded).
    #[serde(default)]
    pub gap_ranges: u64,
    /// Incarnation, 16 hex digits (random per agent start; 0 from a
    /// version-1 agent).
    #[serde(default)]
    pub incarnation: String,
    /// Source address of its latest accepted datagram.
    #[serde(default)]
    pub source: String,
    /// Times an accepted datagram came from another address than the one
    /// before (logged at warn).
    #[serde(default)]
    pub source_changes: u64,
    /// Events numbered before the first one this sink received: sent
    /// before it started, or while no sink listened. Not lost to this
    /// sink, but in none of its files.
    #[serde(default)]
    pub preceding_events: u64,
    /// Events committed to a file.
    #[serde(default)]
    pub delivered_events: u64,
    /// Events accepted that the sink could not write (part of the sink's
    /// `sink_write_lost`).
    #[serde(default)]
    pub write_lost: u64,
    /// Datagrams accepted although another one with the same sequence
    /// number and other content was accepted before (without a key one of
    /// the two is forged; both are in the file).
    #[serde(default)]
    pub seq_conflicts: u64,
}

impl AgentStats {
    /// Events lost on the way: event gaps plus agent-side losses (the ISB
    /// `isb_ifdrop` of this agent's interface).
    pub fn dropped(&self) -> u64 {
        self.event_gaps + self.agent_lost
    }
}

/// Everything the sink counts, as one snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SinkStats {
    /// Seconds since the sink started.
    pub uptime_s: f64,
    /// Datagrams read from the socket.
    pub datagrams_received: u64,
    /// UDP payload bytes read from the socket (every datagram, accepted
    /// or rejected).
    #[serde(default)]
    pub bytes_received: u64,
    /// Datagrams accepted (their events go to the file).
    pub datagrams_accepted: u64,
    /// Datagrams rejected, all reasons.
    pub datagrams_rejected: u64,
    /// Events in accepted datagrams.
    pub events_accepted: u64,
    /// Events written to a pcapng file (committed to the file system).
    pub events_written: u64,
    /// Events accepted but lost by the sink itself (write error, full disk,
    /// no file open). Never silent.
    pub sink_write_lost: u64,
    /// Events written later than an event with a larger timestamp (arrived
    /// after the reorder window had moved past them).
    pub events_out_of_order: u64,
    /// Events released early because the reorder buffer was full.
    pub reorder_overflow: u64,
    /// Events waiting in the reorder buffer (bounded by
    /// `SinkConfig::reorder_max_events`) when the writer last published
    /// its counters (after every batch and tick).
    #[serde(default)]
    pub reorder_held: u64,
    /// Bytes committed to trace files (compressed bytes on disk when
    /// `compression` is `zstd`).
    pub bytes_written: u64,
    /// The pcapng bytes those files hold uncompressed (equal to
    /// `bytes_written` without compression).
    #[serde(default)]
    pub bytes_uncompressed: u64,
    /// How the files are written: `none` (`.pcapng`) or `zstd`
    /// (`.pcapng.zst`).
    #[serde(default)]
    pub compression: String,
    /// pcapng files opened.
    pub files: u64,
    /// The file being written, if any.
    pub current_file: Option<String>,
    /// Accepted datagrams whose host name held control characters (shown
    /// and written with `?` in their place).
    #[serde(default)]
    pub hostnames_sanitized: u64,
    /// Whether datagrams are authenticated (`--key-file`).
    #[serde(default)]
    pub authenticated: bool,
    /// Datagrams that carried a tag this sink could not check (it has no
    /// key); accepted.
    #[serde(default)]
    pub tags_unchecked: u64,
    /// Acknowledgements sent to agents.
    #[serde(default)]
    pub acks_sent: u64,
    /// Authenticated datagrams waiting for their agent to bind to this
    /// sink (neither accepted nor rejected yet; see docs/security.md).
    #[serde(default)]
    pub datagrams_held: u64,
    /// Rejected datagrams by reason (every reason listed, zeros included).
    pub rejects: BTreeMap<String, u64>,
    /// Rejected datagrams by source address, then reason (non-zero only).
    pub rejects_by_source: BTreeMap<String, BTreeMap<String, u64>>,
    /// Per live agent, in order of first appearance; at most the
    /// configured number (`SinkConfig::stats_max_agents`): the agents
    /// with the most events. The others are added up in
    /// `agents_not_listed`.
    pub agents: Vec<AgentStats>,
    /// Live agents (listed or not).
    #[serde(default)]
    pub agents_live: u64,
    /// Agents admitted since the sink started (live and expired).
    #[serde(default)]
    pub agents_seen: u64,
    /// Live agents not listed in `agents`, their counters added up.
    #[serde(default)]
    pub agents_not_listed: AgentTotals,
    /// Agents that expired after sending nothing for the idle timeout,
    /// their counters added up.
    #[serde(default)]
    pub agents_expired: AgentTotals,
    /// The live interface and stream (`--live-iface`, `--live-listen`):
    /// present only when one is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<LiveStats>,
}

/// Name of a clock source wire value (`unknown(N)` for values this build
/// does not know).
pub fn clock_source_name(v: u8) -> String {
    ClockSource::from_u8(v)
        .map(|c| c.name().to_owned())
        .unwrap_or_else(|| format!("unknown({v})"))
}

impl SinkStats {
    /// The stats as a multi-line human table (what the binary prints
    /// without `--json`).
    pub fn to_table(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "sink: up {:.1}s  datagrams {} (accepted {}, rejected {})  events accepted {}  written {}  sink_write_lost {}",
            self.uptime_s,
            self.datagrams_received,
            self.datagrams_accepted,
            self.datagrams_rejected,
            self.events_accepted,
            self.events_written,
            self.sink_write_lost
        );
        let ratio = if self.bytes_written > 0 && self.compression == "zstd" {
            format!(
                " (zstd, {} uncompressed, {:.1}x)",
                self.bytes_uncompressed,
                self.bytes_uncompressed as f64 / self.bytes_written as f64
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            o,
            "      files {}  bytes {}{}  out-of-order {}  reorder overflow {}  current {}",
            self.files,
            self.bytes_written,
            ratio,
            self.events_out_of_order,
            self.reorder_overflow,
            self.current_file.as_deref().unwrap_or("-")
        );
        if let Some(l) = &self.live {
            live_lines(&mut o, l);
        }
        let rejects: Vec<String> = self
            .rejects
            .iter()
            .filter(|(_, &n)| n > 0)
            .map(|(r, n)| format!("{r}={n}"))
            .collect();
        if !rejects.is_empty() {
            let _ = writeln!(o, "      rejects: {}", rejects.join(" "));
        }
        if self.hostnames_sanitized > 0 {
            let _ = writeln!(
                o,
                "      host names with control characters (replaced by '?'): {} datagrams",
                self.hostnames_sanitized
            );
        }
        if self.agents.is_empty() && self.agents_expired.agents == 0 {
            let _ = writeln!(o, "      no agents yet");
            return o;
        }
        let _ = writeln!(
            o,
            "{:<20} {:<16} {:<18} {:>10} {:>12} {:>8} {:>10} {:>10} {:>6} {:>10} {:>7} {:<21}",
            "HOST",
            "AGENT",
            "CLOCK",
            "DATAGRAMS",
            "EVENTS",
            "DG_GAPS",
            "EV_GAPS",
            "AGENT_LOST",
            "DUPS",
            "PRECEDING",
            "SRC_CHG",
            "SOURCE"
        );
        for a in &self.agents {
            let clock = format!("{}/{}", a.clock_source, a.clock_state);
            let _ = writeln!(
                o,
                "{:<20} {:<16} {:<18} {:>10} {:>12} {:>8} {:>10} {:>10} {:>6} {:>10} {:>7} {:<21}",
                a.host,
                a.agent_id,
                clock,
                a.datagrams,
                a.events,
                a.datagram_gaps,
                a.event_gaps,
                a.agent_lost,
                a.duplicates,
                a.preceding_events,
                a.source_changes,
                a.source
            );
        }
        for (what, t) in [
            ("more live agents (fewest events)", &self.agents_not_listed),
            ("expired agents (idle)", &self.agents_expired),
        ] {
            if t.agents > 0 {
                let _ = writeln!(
                    o,
                    "... {} {what}: datagrams {} events {} dg_gaps {} ev_gaps {} agent_lost {} dups {} seq_jumps {}",
                    t.agents,
                    t.datagrams,
                    t.events,
                    t.datagram_gaps,
                    t.event_gaps,
                    t.agent_lost,
                    t.duplicates,
                    t.seq_jumps
                );
            }
        }
        o
    }
}

/// The live outputs' lines of the human table.
fn live_lines(o: &mut String, l: &LiveStats) {
    if let Some(i) = &l.iface {
        let _ = writeln!(
            o,
            "      live {i}: frames sent {}  dropped {} (queue {}, kernel {}, error {})",
            l.frames_sent,
            l.frames_dropped,
            l.frames_dropped_queue,
            l.frames_dropped_kernel,
            l.frames_dropped_error
        );
    }
    if let Some(a) = &l.stream_listen {
        let _ = writeln!(
            o,
            "      live stream {a}: clients {} now, {} connected, refused {} (key) {} (full), \
             handshake failed {}, cut {}, left {}; events sent {} dropped {}",
            l.clients_live,
            l.clients_connected,
            l.clients_refused_key,
            l.clients_refused_full,
            l.clients_handshake_failed,
            l.clients_cut,
            l.clients_left,
            l.stream_frames_sent,
            l.stream_frames_dropped
        );
    }
}
