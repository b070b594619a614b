//! The agent's counters, printed as a table or JSON.

use clocksync::exchange::ExchangeStats;
use clocksync::SanityCounters;
use serde::Serialize;
use tracer_codec::{RxStage, TxStage};

use crate::acks::SinkAck;
use crate::probes::ProbeCounters;

/// Everything the agent counts.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AgentStats {
    /// TX events read from the probes' rings, by stage (index: the wire
    /// value, [`TxStage::ALL`] order).
    pub events_by_stage: [u64; TxStage::ALL.len()],
    /// RX events read from the probes' rings, by stage (index: the wire
    /// value, [`RxStage::ALL`] order).
    pub rx_events_by_stage: [u64; RxStage::ALL.len()],
    /// Clock updates sent.
    pub clock_events: u64,
    /// CPU cost samples sent (one per CPU per read of the counters).
    pub cpu_events: u64,
    /// skb drop events read from the drops probe.
    pub drop_events: u64,
    /// TCP anomaly events read from the tcp probe.
    pub tcp_events: u64,
    /// Records the probe overwrote before the agent read them (lost).
    pub ring_overruns: u64,
    /// Probe records the agent refused (undecodable, or a stage, family or
    /// length the wire format does not allow); counted as lost.
    pub bad_records: u64,
    /// BPF-side counters, summed over the probes.
    pub bpf: ProbeCounters,
    /// Datagrams handed to the kernel. UDP to a sink that is down also
    /// "succeeds": what reached a file is `events_delivered`.
    pub datagrams: u64,
    /// Bytes handed to the kernel (UDP payload).
    pub bytes: u64,
    /// System calls that handed them (`--batch-send`: up to 64
    /// datagrams per call).
    pub send_calls: u64,
    /// Events given a sequence number (put into a datagram, whether its
    /// send succeeded or not): `events_delivered + events_sink_lost +
    /// events_unconfirmed`.
    pub events_sequenced: u64,
    /// Events a sink confirmed written to its file (summed over sink
    /// restarts).
    pub events_delivered: u64,
    /// Events a sink confirmed it counted lost (sequence gaps: datagrams
    /// dropped on the way or not sent; events it could not write).
    pub events_sink_lost: u64,
    /// Events no sink confirmed: still on their way, sent while no sink
    /// listened (in no file), or sent to a sink that does not acknowledge.
    pub events_unconfirmed: u64,
    /// Acknowledgements taken.
    pub acks: u64,
    /// Datagrams from the sink's address that were not a valid
    /// acknowledgement for this agent (untagged or wrongly tagged with a
    /// key set, malformed, or for another agent).
    pub acks_rejected: u64,
    /// ICMP port unreachable reports (on a send or while reading acks):
    /// nothing listened at the sink address.
    pub sink_unreachable: u64,
    /// What each sink instance confirmed last, oldest first.
    pub sinks: Vec<SinkAck>,
    /// Datagrams whose send failed (the sink sees their sequence gap).
    pub send_errors: u64,
    /// Events inside datagrams whose send failed.
    pub events_unsent: u64,
    /// What the clock refused: failed samples, samples the servo's sanity
    /// check did not follow, answers the exchange refused.
    pub clock: ClockCounters,
    /// Mean BPF run time per callback (ns) over every probe's programs,
    /// when kernel.bpf_stats_enabled=1.
    pub bpf_ns_per_run: Option<f64>,
    /// BPF program runs over every probe's programs, when
    /// kernel.bpf_stats_enabled=1.
    pub bpf_runs: Option<u64>,
}

/// The clock's refusals, for the stats and `--json`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ClockCounters {
    /// Clock samples that failed (every exchange of a burst timed out, a
    /// clock could not be read): the clock kept its last mapping.
    pub sample_failures: u64,
    /// The servo's sanity check: samples held, corrections limited, moves
    /// followed and not followed (docs/clock-model.md).
    pub sanity: SanityCounters,
    /// With `--clock sink`: the exchange's answers, completed and refused
    /// (malformed, unauthenticated, `ignored`: unmatched or from an
    /// unsynchronised responder, `drained`: read away before an exchange).
    pub exchange: Option<ExchangeStats>,
}

impl AgentStats {
    /// Probe events read in total (TX, RX, drops, TCP anomalies).
    pub fn events(&self) -> u64 {
        self.tx_events()
            + self.rx_events_by_stage.iter().sum::<u64>()
            + self.drop_events
            + self.tcp_events
    }

    /// TX events read.
    pub fn tx_events(&self) -> u64 {
        self.events_by_stage.iter().sum()
    }

    /// Record the run statistics of every loaded program (all probes):
    /// total runs and the mean run time over them.
    pub fn set_bpf_runs(&mut self, programs: &[ProgInfo]) {
        let runs: u64 = programs.iter().map(|i| i.run_cnt).sum();
        let ns: u64 = programs.iter().map(|i| i.run_time_ns).sum();
        if runs > 0 {
            self.bpf_runs = Some(runs);
            self.bpf_ns_per_run = Some(ns as f64 / runs as f64);
        }
    }

    /// Human-readable table.
    pub fn table(&self) -> String {
        let mut s = String::from("events by kind:\n");
        for st in TxStage::ALL {
            s.push_str(&format!(
                "  tx {:<8} {:>12}\n",
                st.name(),
                self.events_by_stage[st as usize]
            ));
        }
        let rx: u64 = self.rx_events_by_stage.iter().sum();
        if rx > 0 {
            for st in RxStage::ALL {
                s.push_str(&format!(
                    "  rx {:<11} {:>9}\n",
                    st.name(),
                    self.rx_events_by_stage[st as usize]
                ));
            }
        }
        s.push_str(&format!("  clock       {:>12}\n", self.clock_events));
        s.push_str(&format!("  cpu         {:>12}\n", self.cpu_events));
        s.push_str(&format!("  drop        {:>12}\n", self.drop_events));
        s.push_str(&format!("  tcp anomaly {:>12}\n", self.tcp_events));
        s.push_str(&format!(
            "  tx total    {:>12}\nlosses:\n  ring overrun{:>12}\n  bad records {:>12}\n  unsent      {:>12}\n",
            self.tx_events(),
            self.ring_overruns + self.bpf.ringbuf_lost,
            self.bad_records,
            self.events_unsent
        ));
        s.push_str(&format!(
            "delivery (confirmed by the sink):\n  sequenced   {:>12}\n  delivered   {:>12}\n  sink lost   {:>12}\n  unconfirmed {:>12}{}\n",
            self.events_sequenced,
            self.events_delivered,
            self.events_sink_lost,
            self.events_unconfirmed,
            if self.acks == 0 && self.events_sequenced > 0 {
                " (no acknowledgement received: sink down, unreachable, or too old to acknowledge)"
            } else {
                ""
            }
        ));
        s.push_str(&format!(
            "handed to the kernel:\n  datagrams   {:>12}\n  bytes       {:>12}\n  send calls  {:>12}\n  send errors {:>12}\n  unreachable {:>12}\n  acks        {:>12}\n  acks refused{:>12}\nbpf:\n  sockets     {:>12}\n  tag errors  {:>12}\n  sockopt err {:>12}\n",
            self.datagrams,
            self.bytes,
            self.send_calls,
            self.send_errors,
            self.sink_unreachable,
            self.acks,
            self.acks_rejected,
            self.bpf.sockets,
            self.bpf.tag_errors,
            self.bpf.setsockopt_errors
        ));
        if self.bpf.sendmsg_seen > 0 {
            s.push_str(&format!(
                "  sendmsg seen{:>12} (sampled: one granule in N tagged)\n",
                self.bpf.sendmsg_seen
            ));
        }
        if self.bpf.rx_read_errors > 0 {
            s.push_str(&format!(
                "  rx hdr errs {:>12} (IP header unreadable: skb not recorded)\n",
                self.bpf.rx_read_errors
            ));
        }
        if let (Some(ns), Some(runs)) = (self.bpf_ns_per_run, self.bpf_runs) {
            s.push_str(&format!(
                "  runs        {runs:>12}\n  ns/run      {ns:>12.1}\n"
            ));
        }
        s.push_str(&self.clock.table());
        s
    }
}

impl ClockCounters {
    /// The table's clock section.
    fn table(&self) -> String {
        let c = &self.sanity;
        let mut s = format!(
            "clock:\n  sample fails{:>12}\n  held        {:>12} (reference moved beyond the sanity limit: HOLDOVER)\n  freq limited{:>12}\n  reacquired  {:>12} (persisting moves followed)\n  beyond max  {:>12} (--servo-max-change)\n",
            self.sample_failures, c.rejected, c.freq_limited, c.reacquired, c.beyond_max_change
        );
        if let Some(x) = &self.exchange {
            s.push_str(&format!(
                "clock exchange:\n  completed   {:>12}\n  timeouts    {:>12}\n  malformed   {:>12}\n  unauthentic.{:>12}\n  unmatched   {:>12}\n  drained     {:>12}\n",
                x.completed, x.timeouts, x.malformed, x.unauthenticated, x.ignored, x.drained
            ));
        }
        s
    }
}

/// Kernel-side facts about a loaded program.
#[derive(Debug, Clone, Copy)]
pub struct ProgInfo {
    /// Program id (as `bpftool prog show id N` takes it).
    pub id: u32,
    /// Cumulative run time (kernel.bpf_stats_enabled=1), ns.
    pub run_time_ns: u64,
    /// Runs counted while stats were enabled.
    pub run_cnt: u64,
}

/// Id and run statistics of a loaded program, or None if the kernel refuses.
pub fn bpf_prog_info(fd: std::os::fd::BorrowedFd<'_>) -> Option<ProgInfo> {
    use std::os::fd::AsRawFd;
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: info is a valid, writable bpf_prog_info of `len` bytes; fd is a live program fd.
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
    (rc == 0).then_some(ProgInfo {
        id: info.id,
        run_time_ns: info.run_time_ns,
        run_cnt: info.run_cnt,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bpf_runs_aggregate_over_programs() {
        let mut s = AgentStats::default();
        let prog = |run_time_ns, run_cnt| ProgInfo {
            id: 1,
            run_time_ns,
            run_cnt,
        };
        s.set_bpf_runs(&[prog(0, 0)]);
        assert_eq!((s.bpf_runs, s.bpf_ns_per_run), (None, None));
        s.set_bpf_runs(&[prog(1000, 10), prog(3000, 10)]);
        assert_eq!((s.bpf_runs, s.bpf_ns_per_run), (Some(20), Some(200.0)));
    }

    #[test]
    fn the_table_has_a_line_per_stage() {
        let mut s = AgentStats::default();
        for (i, c) in s.events_by_stage.iter_mut().enumerate() {
            *c = 100 + i as u64;
        }
        let t = s.table();
        for st in TxStage::ALL {
            let line = format!("tx {:<8} {:>12}", st.name(), 100 + st as u64);
            assert!(t.contains(&line), "{t} lacks {line:?}");
        }
        assert_eq!(
            s.events(),
            (100..100 + TxStage::ALL.len() as u64).sum::<u64>()
        );
        s.rx_events_by_stage[0] = 7;
        s.drop_events = 3;
        s.tcp_events = 2;
        assert_eq!(
            s.events(),
            (100..100 + TxStage::ALL.len() as u64).sum::<u64>() + 12,
            "every kind counts"
        );
    }

    #[test]
    fn the_clock_refusals_are_in_the_table_and_the_json() {
        let mut s = AgentStats::default();
        s.clock.sanity.rejected = 17;
        let t = s.table();
        assert!(t.contains(&format!("  held        {:>12}", 17)), "{t}");
        assert!(
            !t.contains("clock exchange"),
            "no exchange without --clock sink: {t}"
        );
        s.clock.exchange = Some(ExchangeStats {
            ignored: 5,
            malformed: 9,
            ..Default::default()
        });
        let t = s.table();
        assert!(t.contains(&format!("  unmatched   {:>12}", 5)), "{t}");
        assert!(t.contains(&format!("  malformed   {:>12}", 9)), "{t}");
        let j = serde_json::to_value(&s).unwrap();
        assert_eq!(j["clock"]["sanity"]["rejected"], 17);
        assert_eq!(j["clock"]["exchange"]["malformed"], 9);
        assert_eq!(j["clock"]["exchange"]["ignored"], 5);
    }
}
