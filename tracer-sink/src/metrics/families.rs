//! The families a scrape writes, one function per part of the sink.

use std::fmt;

use prometheus_client::encoding::EncodeMetric;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use super::figures::{Figures, Out};
use crate::stats::LiveStats;
use tracer_prom::Escaped;

pub(super) fn process(o: &mut Out<'_>, started_unix_s: f64) -> fmt::Result {
    let seconds = Unit::Seconds;
    if let Some(cpu) = tracer_prom::process_cpu_seconds() {
        o.family(
            "cpu",
            "CPU time (user and system) of the process the sink runs in.",
            Some(&seconds),
            MetricType::Counter,
            |m| ConstCounter::new(cpu).encode(m),
        )?;
    }
    o.family(
        "start_time",
        "Unix time the sink started.",
        Some(&seconds),
        MetricType::Gauge,
        |m| ConstGauge::new(started_unix_s).encode(m),
    )?;
    if let Some(rss) = resident_bytes() {
        o.gauge(
            "resident_memory",
            "Resident memory of the process the sink runs in.",
            Some(&Unit::Bytes),
            rss,
        )?;
    }
    Ok(())
}

pub(super) fn ingest(o: &mut Out<'_>, f: &Figures) -> fmt::Result {
    o.counter(
        "datagrams_received",
        "Datagrams read from the UDP socket, accepted or rejected.",
        None,
        f.datagrams_received,
    )?;
    o.counter(
        "received",
        "UDP payload bytes read from the socket, accepted or rejected.",
        Some(&Unit::Bytes),
        f.bytes_received,
    )?;
    o.counter(
        "datagrams_accepted",
        "Datagrams accepted: their events go to the file.",
        None,
        f.datagrams_accepted,
    )?;
    o.counters(
        "datagrams_rejected",
        "Datagrams rejected, by reason (the reasons of the stats' rejects; every one listed).",
        f.rejects.iter().map(|&(r, n)| ([("reason", r)], n)),
    )?;
    o.gauge(
        "datagrams_held",
        "Authenticated datagrams waiting for their agent to bind to this sink.",
        None,
        f.datagrams_held,
    )?;
    o.counter(
        "datagrams_tag_unchecked",
        "Accepted datagrams with a tag this sink could not check (it has no key).",
        None,
        f.tags_unchecked,
    )?;
    o.counter(
        "datagrams_hostname_sanitized",
        "Accepted datagrams whose host name held control characters (written with '?').",
        None,
        f.hostnames_sanitized,
    )?;
    o.counter(
        "events_accepted",
        "Events in accepted datagrams.",
        None,
        f.events_accepted,
    )?;
    o.counter(
        "acks_sent",
        "Acknowledgements sent to agents.",
        None,
        f.acks_sent,
    )?;
    o.gauge(
        "agents",
        "Agents live in the agent table.",
        None,
        f.agents_live,
    )?;
    o.counter(
        "agents_admitted",
        "Agents admitted since the sink started (live and expired).",
        None,
        f.agents_admitted,
    )?;
    o.counter(
        "agents_expired",
        "Agents that expired after sending nothing for the idle timeout.",
        None,
        f.agents_expired,
    )?;
    o.counter(
        "events_reported_lost",
        "Events the agents reported lost before sending (every agent, live and expired).",
        None,
        f.reported_lost,
    )?;
    o.gauge(
        "events_missing",
        "Events missing from the agents' sequences, net of late arrivals (every agent, live and expired).",
        None,
        f.missing_events,
    )
}

pub(super) fn output(o: &mut Out<'_>, f: &Figures) -> fmt::Result {
    o.counter(
        "events_written",
        "Events committed to a trace file.",
        None,
        f.events_written,
    )?;
    o.counter(
        "events_write_lost",
        "Events accepted that the sink could not write (write error, full disk, no file open).",
        None,
        f.sink_write_lost,
    )?;
    o.counter(
        "events_out_of_order",
        "Events written after an event with a later timestamp (they arrived after the reorder window).",
        None,
        f.events_out_of_order,
    )?;
    o.counter(
        "events_reorder_overflow",
        "Events written early because the reorder buffer was full.",
        None,
        f.reorder_overflow,
    )?;
    o.gauge(
        "reorder_events",
        "Events waiting in the reorder buffer.",
        None,
        f.reorder_held,
    )?;
    o.gauge(
        "reorder_max_events",
        "Most events the reorder buffer holds before it writes early.",
        None,
        f.reorder_max_events,
    )?;
    o.counter(
        "written",
        "Bytes committed to trace files (compressed bytes on disk with zstd).",
        Some(&Unit::Bytes),
        f.bytes_written,
    )?;
    o.counter(
        "written_uncompressed",
        "The pcapng bytes of those files uncompressed.",
        Some(&Unit::Bytes),
        f.bytes_uncompressed,
    )?;
    o.counter("files_opened", "Trace files opened.", None, f.files)
}

pub(super) fn agents(o: &mut Out<'_>, f: &Figures) -> fmt::Result {
    let a = &f.agents;
    o.counters(
        "agent_datagrams_accepted",
        "Datagrams accepted, per live agent.",
        a.iter().map(|a| (a.labels(), a.datagrams)),
    )?;
    o.counters(
        "agent_events_accepted",
        "Events accepted, per live agent.",
        a.iter().map(|a| (a.labels(), a.events)),
    )?;
    o.counters(
        "agent_events_delivered",
        "Events committed to a trace file, per live agent.",
        a.iter().map(|a| (a.labels(), a.delivered)),
    )?;
    o.counters(
        "agent_events_write_lost",
        "Events accepted that the sink could not write, per live agent.",
        a.iter().map(|a| (a.labels(), a.write_lost)),
    )?;
    o.counters(
        "agent_events_reported_lost",
        "Events the agent reported lost before sending (its cumulative lost_events), per live agent.",
        a.iter().map(|a| (a.labels(), a.reported_lost)),
    )?;
    o.gauges(
        "agent_events_missing",
        "Events missing from the agent's sequence (lost on the way), net of late arrivals, per live agent.",
        a.iter().map(|a| (a.labels(), a.missing_events)),
    )?;
    o.gauges(
        "agent_datagrams_missing",
        "Datagrams missing from the agent's sequence, net of late arrivals, per live agent.",
        a.iter().map(|a| (a.labels(), a.missing_datagrams)),
    )?;
    o.family(
        "agent_datagrams_rejected",
        "Datagrams of the agent rejected by its sequence tracking, by reason, per live agent.",
        None,
        MetricType::Counter,
        |mut m| {
            for a in &f.agents {
                let [host, id, boot, inc] = a.labels();
                for (reason, v) in [
                    ("duplicate", a.duplicates),
                    ("stale", a.stale),
                    ("seq_jump", a.seq_jumps),
                ] {
                    let l = [host, id, boot, inc, ("reason", Escaped(reason))];
                    ConstCounter::new(v).encode(m.encode_family(&l)?)?;
                }
            }
            Ok(())
        },
    )?;
    o.counters(
        "agent_datagrams_late",
        "Late datagrams that filled a gap of the agent's sequence (accepted), per live agent.",
        a.iter().map(|a| (a.labels(), a.late)),
    )?;
    o.counters(
        "agent_resyncs",
        "Times the sink followed the agent's sequence to a new position (the distance is not counted as loss), per live agent.",
        a.iter().map(|a| (a.labels(), a.resyncs)),
    )
}

pub(super) fn live_outputs(o: &mut Out<'_>, l: &LiveStats) -> fmt::Result {
    if l.iface.is_some() {
        o.counter(
            "live_frames_sent",
            "Frames the kernel took on the live interface (--live-iface).",
            None,
            l.frames_sent,
        )?;
        o.counters(
            "live_frames_dropped",
            "Frames not shown on the live interface, by reason: queue (its writer was behind), kernel (no room), error (refused).",
            [
                ([("reason", "queue")], l.frames_dropped_queue),
                ([("reason", "kernel")], l.frames_dropped_kernel),
                ([("reason", "error")], l.frames_dropped_error),
            ],
        )?;
    }
    if l.stream_listen.is_some() {
        o.gauge(
            "live_stream_clients",
            "Live stream clients connected now (--live-listen).",
            None,
            l.clients_live,
        )?;
        o.counter(
            "live_stream_clients_connected",
            "Live stream clients accepted (the handshake passed).",
            None,
            l.clients_connected,
        )?;
        o.counters(
            "live_stream_clients_refused",
            "Live stream connections refused, by reason: key (wrong or missing), full (too many clients), handshake (failed or timed out).",
            [
                ([("reason", "key")], l.clients_refused_key),
                ([("reason", "full")], l.clients_refused_full),
                ([("reason", "handshake")], l.clients_handshake_failed),
            ],
        )?;
        o.counter(
            "live_stream_clients_cut",
            "Live stream clients cut loose because they read too slowly.",
            None,
            l.clients_cut,
        )?;
        o.counter(
            "live_stream_events_sent",
            "Events queued to live stream clients (one per event per client).",
            None,
            l.stream_frames_sent,
        )?;
        o.counter(
            "live_stream_events_dropped",
            "Events a live stream client missed because it was cut at them.",
            None,
            l.stream_frames_dropped,
        )?;
    }
    Ok(())
}

/// Resident memory of this process (`VmRSS` of /proc/self/status), in bytes.
pub(super) fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
