//! What a scrape shows of a sink run, copied out under the stats lock,
//! and the writer of `nettrace_sink_` families.

use std::fmt::{self, Write as _};

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use crate::stats::Shared;
use tracer_prom::Escaped;

/// One live agent's figures.
#[derive(Debug)]
pub(super) struct AgentFigures {
    pub(super) host: String,
    pub(super) agent_id: String,
    pub(super) boot_id: String,
    pub(super) incarnation: String,
    pub(super) datagrams: u64,
    pub(super) events: u64,
    pub(super) delivered: u64,
    pub(super) write_lost: u64,
    pub(super) reported_lost: u64,
    pub(super) missing_events: u64,
    pub(super) missing_datagrams: u64,
    pub(super) duplicates: u64,
    pub(super) stale: u64,
    pub(super) seq_jumps: u64,
    pub(super) late: u64,
    pub(super) resyncs: u64,
}

/// Everything a scrape shows of the run, copied under the lock.
#[derive(Debug, Default)]
pub(super) struct Figures {
    pub(super) datagrams_received: u64,
    pub(super) datagrams_accepted: u64,
    pub(super) bytes_received: u64,
    pub(super) events_accepted: u64,
    pub(super) rejects: Vec<(&'static str, u64)>,
    pub(super) datagrams_held: u64,
    pub(super) tags_unchecked: u64,
    pub(super) hostnames_sanitized: u64,
    pub(super) acks_sent: u64,
    pub(super) events_written: u64,
    pub(super) sink_write_lost: u64,
    pub(super) events_out_of_order: u64,
    pub(super) reorder_overflow: u64,
    pub(super) reorder_held: u64,
    pub(super) reorder_max_events: u64,
    pub(super) bytes_written: u64,
    pub(super) bytes_uncompressed: u64,
    pub(super) files: u64,
    pub(super) agents_live: u64,
    pub(super) agents_admitted: u64,
    pub(super) agents_expired: u64,
    /// Sink-wide (live and expired agents).
    pub(super) reported_lost: u64,
    pub(super) missing_events: u64,
    pub(super) agents: Vec<AgentFigures>,
}

impl Figures {
    pub(super) fn read(shared: &Shared, reorder_max_events: u64) -> Self {
        let s = shared.lock();
        let (rx, wr, table) = (&s.rx, &s.wr, &s.agents);
        let agents: Vec<AgentFigures> = table
            .agents
            .values()
            .map(|a| {
                let p = s.peers.get(a.index);
                AgentFigures {
                    host: a.host.clone(),
                    agent_id: format!("{:016x}", a.key.agent_id),
                    boot_id: a.key.boot_id.iter().fold(String::new(), |mut o, b| {
                        let _ = write!(o, "{b:02x}");
                        o
                    }),
                    incarnation: format!("{:016x}", a.key.incarnation),
                    datagrams: a.datagrams,
                    events: a.events,
                    delivered: p.map_or(0, |p| p.delivered_events),
                    write_lost: p.map_or(0, |p| p.write_lost),
                    reported_lost: a.agent_lost,
                    missing_events: a.seq.event_gaps,
                    missing_datagrams: a.seq.datagram_gaps,
                    duplicates: a.duplicates,
                    stale: a.stale,
                    seq_jumps: a.seq_jumps,
                    late: a.late,
                    resyncs: a.resyncs,
                }
            })
            .collect();
        Figures {
            datagrams_received: rx.datagrams_received,
            datagrams_accepted: rx.datagrams_accepted,
            bytes_received: rx.bytes_received,
            events_accepted: rx.events_accepted,
            rejects: rx.rejects.iter().map(|(r, n)| (*r, *n)).collect(),
            datagrams_held: s.fresh.as_ref().map_or(0, |f| f.held() as u64),
            tags_unchecked: rx.tags_unchecked,
            hostnames_sanitized: rx.hostnames_sanitized,
            acks_sent: rx.acks_sent,
            events_written: wr.events_written,
            sink_write_lost: wr.sink_write_lost,
            events_out_of_order: wr.events_out_of_order,
            reorder_overflow: wr.reorder_overflow,
            reorder_held: wr.reorder_held,
            reorder_max_events,
            bytes_written: wr.bytes_written,
            bytes_uncompressed: wr.bytes_uncompressed,
            files: wr.files,
            agents_live: table.agents.len() as u64,
            agents_admitted: table.admitted(),
            agents_expired: table.expired.agents,
            reported_lost: table.expired.agent_lost
                + agents.iter().map(|a| a.reported_lost).sum::<u64>(),
            missing_events: table.expired.event_gaps
                + agents.iter().map(|a| a.missing_events).sum::<u64>(),
            agents,
        }
    }
}

pub(super) type Labels<'a> = [(&'static str, Escaped<&'a str>); 4];

impl AgentFigures {
    pub(super) fn labels(&self) -> Labels<'_> {
        [
            ("host", Escaped(&self.host)),
            ("agent_id", Escaped(&self.agent_id)),
            ("boot_id", Escaped(&self.boot_id)),
            ("incarnation", Escaped(&self.incarnation)),
        ]
    }
}

/// Writes families with the `nettrace_sink_` prefix in their names.
pub(super) struct Out<'a> {
    pub(super) e: DescriptorEncoder<'a>,
}

impl Out<'_> {
    pub(super) fn family(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<&Unit>,
        ty: MetricType,
        rows: impl FnOnce(MetricEncoder<'_>) -> fmt::Result,
    ) -> fmt::Result {
        let name = format!("nettrace_sink_{name}");
        rows(self.e.encode_descriptor(&name, help, unit, ty)?)
    }

    pub(super) fn counter(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<&Unit>,
        v: u64,
    ) -> fmt::Result {
        self.family(name, help, unit, MetricType::Counter, |m| {
            ConstCounter::new(v).encode(m)
        })
    }

    pub(super) fn gauge(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<&Unit>,
        v: u64,
    ) -> fmt::Result {
        self.family(name, help, unit, MetricType::Gauge, |m| {
            ConstGauge::new(v).encode(m)
        })
    }

    /// A counter with one series per `(labels, value)` row.
    pub(super) fn counters<L: EncodeLabelSet>(
        &mut self,
        name: &str,
        help: &str,
        rows: impl IntoIterator<Item = (L, u64)>,
    ) -> fmt::Result {
        self.family(name, help, None, MetricType::Counter, |mut m| {
            for (l, v) in rows {
                ConstCounter::new(v).encode(m.encode_family(&l)?)?;
            }
            Ok(())
        })
    }

    /// A gauge with one series per `(labels, value)` row.
    pub(super) fn gauges<L: EncodeLabelSet>(
        &mut self,
        name: &str,
        help: &str,
        rows: impl IntoIterator<Item = (L, u64)>,
    ) -> fmt::Result {
        self.family(name, help, None, MetricType::Gauge, |mut m| {
            for (l, v) in rows {
                ConstGauge::new(v).encode(m.encode_family(&l)?)?;
            }
            Ok(())
        })
    }
}
