//! The match report: what `--json` prints and the terminal summary and
//! the HTML report render. Built once, at the end, from the matcher's
//! accumulators.

use std::collections::HashMap;

use serde::Serialize;
use tracer_codec::{ClockSource, ClockState};

use crate::cpu::HostCpuCost;
use crate::hist::{Dist, Hist};
use crate::input::merge::{AgentTotals, InputStats};
use crate::input::{HostId, HostTable};
use crate::lifetime::{gap_meaning, gap_name, Life, LifeReport, GAPS};
use crate::matcher::Matcher;
use crate::stats::{Ambiguous, Direction, Unmatched};

/// How the run was configured.
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    /// Matching window, ns: an RX skb matches a send within ± this.
    pub window_ns: u64,
    /// Input reorder window, ns.
    pub reorder_window_ns: u64,
    /// The agents' sampling rate given to the matcher (1: none).
    pub sample_every: u32,
}

/// Lost events of one host.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct HostLoss {
    /// Lost before the sink wrote them, as the files' ISBs report
    /// (`isb_ifdrop`, summed over the host's agents).
    pub reported: u64,
    /// Missing event numbers, placed in time by the matcher.
    pub placed: u64,
    /// Reported but not placed (the agent's own ring losses): charged to
    /// unmatched skbs sent to this host, at most one each.
    pub unplaced: u64,
}

/// What a host's agent claims about its clock.
#[derive(Debug, Clone, Serialize)]
pub struct ClockReport {
    /// Clock source (`system`, `phc`, `sink`).
    pub source: Option<String>,
    /// Servo state at its last CLOCK event.
    pub state: Option<String>,
    /// CLOCK events.
    pub updates: u64,
    /// Error estimate at the last CLOCK event, ns.
    pub last_error_estimate_ns: Option<u64>,
    /// Largest error estimate once locked, ns.
    pub max_error_estimate_ns: Option<u64>,
    /// Largest |offset| the servo measured once locked, ns.
    pub max_offset_ns: Option<u64>,
}

/// Per host.
#[derive(Debug, Clone, Serialize)]
pub struct HostReport {
    /// Hostname (the pcapng interface).
    pub name: String,
    /// Agent ids seen for it (hex).
    pub agents: Vec<String>,
    /// Events by kind.
    pub events: std::collections::BTreeMap<&'static str, u64>,
    /// First and last event, global ns.
    pub first_ns: Option<u64>,
    /// Last event, global ns.
    pub last_ns: Option<u64>,
    /// Lost events.
    pub lost_events: HostLoss,
    /// TCP RETRANSMIT events.
    pub retransmit_events: u64,
    /// TX tags that never reached the wire under their tag.
    pub sendmsg_never_sent: u64,
    /// TX tags the kernel put on an skb already sent (its first
    /// transmission was not stamped).
    pub sendmsg_already_sent: u64,
    /// Tags whose first stamped send did not carry their byte (TCP moved
    /// it into an earlier, unstamped skb): their SENDMSG starts no life.
    pub tags_moved: u64,
    /// Clock claims.
    pub clock: ClockReport,
}

/// One gap of the life, summarised.
#[derive(Debug, Clone, Serialize)]
pub struct StageReport {
    /// `FROM→TO`.
    pub gap: String,
    /// What it measures.
    pub meaning: &'static str,
    /// Its distribution (ns), when any packet had both stages.
    pub dist: Option<Dist>,
}

/// Causality violations of a direction.
#[derive(Debug, Clone, Serialize)]
pub struct Violations {
    /// Matched packets received before they were sent (one-way < 0).
    pub count: u64,
    /// Of them, with a clock not locked at either end (its servo had not
    /// converged: expected, not a sign of a broken sync).
    pub while_unlocked: u64,
    /// The most negative one-way latency, ns.
    pub worst_ns: Option<i64>,
    /// That packet.
    pub worst: Option<LifeReport>,
}

/// One direction: sender host -> receiver host.
#[derive(Debug, Clone, Serialize)]
pub struct DirectionReport {
    /// Sending host.
    pub sender: String,
    /// Receiving host; `None` for peers no traced host receives for.
    pub receiver: Option<String>,
    /// Flows (4-tuples) seen.
    pub flows: usize,
    /// Sender skbs: transmissions (each SND_SW, retransmissions included).
    pub sent: u64,
    /// Of them, retransmissions.
    pub retransmits: u64,
    /// Matched to the receiver's RX skb.
    pub matched: u64,
    /// matched / sent.
    pub matched_ratio: f64,
    /// Matched retransmissions.
    pub matched_retransmits: u64,
    /// Matched without a recorded STACK_ENTRY (no one-way latency).
    pub matched_without_stack_entry: u64,
    /// Unmatched by reason.
    pub unmatched: Unmatched,
    /// Neither matched nor unmatched: copies of the byte reached the
    /// receiver, but not one per recorded transmission, so which is whose
    /// is not known (docs/matching.md).
    pub ambiguous: Ambiguous,
    /// One-way latency SND_SW -> STACK_ENTRY, ns.
    pub one_way: Option<Dist>,
    /// One-way latency between hardware stamps, ns.
    pub one_way_hw: Option<Dist>,
    /// Each gap of the life.
    pub stages: Vec<StageReport>,
    /// Receives before sends.
    pub violations: Violations,
}

/// What the data prove about the clock offset of a host pair.
#[derive(Debug, Clone, Serialize)]
pub struct PairReport {
    /// First host (by name).
    pub a: String,
    /// Second host.
    pub b: String,
    /// The offset bounded: `clock_b - clock_a` (how far b's global
    /// clock reads ahead of a's at the same instant).
    pub offset: &'static str,
    /// Lower bound, ns: `-min one-way(b→a)`; `None` without b→a packets.
    pub lo_ns: Option<i64>,
    /// Upper bound, ns: `+min one-way(a→b)`; `None` without a→b packets.
    pub hi_ns: Option<i64>,
    /// `hi - lo` when both exist: the true round trip's minimum, bounded.
    pub width_ns: Option<i64>,
    /// Matched packets a→b and b→a behind the bounds.
    pub packets_a_to_b: u64,
    /// Matched packets b→a.
    pub packets_b_to_a: u64,
    /// Only packets sent and received while both clocks were locked
    /// count, when a direction has any; true when a direction had none
    /// and all its packets were used.
    pub includes_unlocked: bool,
    /// Does the interval contain 0 (clocks could agree)? `None` when a
    /// bound is missing and the other does not already exclude 0.
    pub contains_zero: Option<bool>,
    /// False when lo > hi: no single offset explains both directions
    /// (the clocks moved against each other during the trace).
    pub self_consistent: Option<bool>,
    /// The agents' own claim: |offset| <= a's + b's error estimate, ns
    /// (largest estimates once locked).
    pub claimed_bound_ns: Option<u64>,
    /// Why there is a claimed bound, or why not.
    pub claim_basis: &'static str,
    /// Does the claim overlap what the data prove? `false` means the
    /// clocks are worse than their agents say.
    pub claim_consistent: Option<bool>,
    /// When the interval holds 0: the bound on |θ| the data prove,
    /// `max(−lo, hi)`, ns.
    pub data_bound_ns: Option<u64>,
    /// The data prove a tighter bound than the agents claim.
    pub data_tighter_than_claim: Option<bool>,
    /// When the data contradict the claim: the packets that do (the
    /// fastest of the direction whose bound lies outside ±claim).
    pub contradicting: Vec<LifeReport>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Settings.
    pub settings: Settings,
    /// What reading met.
    pub input: InputStats,
    /// Per host.
    pub hosts: Vec<HostReport>,
    /// Per direction.
    pub directions: Vec<DirectionReport>,
    /// Per host pair.
    pub pairs: Vec<PairReport>,
    /// The slowest packets, first to last stage.
    pub slowest: Vec<LifeReport>,
    /// What the network stack cost each host's CPUs (the hosts whose
    /// agents sent CPU events, by name).
    pub cpu_cost: Vec<HostCpuCost>,
    /// Most transmissions and RX skbs the matcher held at once.
    pub peak_held_by_matcher: usize,
}

/// Histograms for the HTML report (not in JSON).
#[derive(Debug, Clone)]
pub struct Charts {
    /// (sender, receiver, one-way histogram, gap histograms).
    pub directions: Vec<(String, String, Hist, Vec<Hist>)>,
}

fn clock_source_name(v: u8) -> String {
    ClockSource::from_u8(v).map_or_else(|| format!("source {v}"), |s| s.name().to_owned())
}

fn clock_state_name(v: u8) -> String {
    ClockState::from_u8(v).map_or_else(|| format!("state {v}"), |s| s.name().to_owned())
}

fn direction_report(d: &Direction, name: &dyn Fn(HostId) -> String) -> DirectionReport {
    DirectionReport {
        sender: name(d.sender),
        receiver: d.receiver.map(name),
        flows: d.flows.len(),
        sent: d.attempts,
        retransmits: d.retransmits,
        matched: d.matched,
        matched_ratio: if d.attempts == 0 {
            0.0
        } else {
            d.matched as f64 / d.attempts as f64
        },
        matched_retransmits: d.matched_retransmits,
        matched_without_stack_entry: d.matched_without_stack_entry,
        unmatched: d.unmatched,
        ambiguous: d.ambiguous,
        one_way: d.one_way.dist(),
        one_way_hw: d.one_way_hw.dist(),
        stages: (0..GAPS)
            .map(|i| StageReport {
                gap: gap_name(i),
                meaning: gap_meaning(i),
                dist: d.gaps[i].dist(),
            })
            .collect(),
        violations: Violations {
            count: d.violations,
            while_unlocked: d.violations_unlocked,
            worst_ns: d.worst.as_ref().and_then(|l| l.one_way()),
            worst: d.worst.as_ref().map(|l| l.report(name)),
        },
    }
}

/// The offset interval of hosts `a`, `b` from the one-way minima.
pub fn offset_interval(min_ab: Option<i64>, min_ba: Option<i64>) -> (Option<i64>, Option<i64>) {
    (min_ba.map(|d| -d), min_ab)
}

/// Build the report (and the charts' data) from a finished matcher.
pub fn build(
    mut m: Matcher,
    hosts: &HostTable,
    input: InputStats,
    totals: &HashMap<u64, AgentTotals>,
    reorder_window_ns: u64,
) -> (Report, Charts) {
    let name = |h: HostId| hosts.name(h).to_owned();
    let nhosts = hosts.len().max(m.hosts.len());
    // Losses the files report, per host, against those placed in time.
    let mut host_loss = vec![HostLoss::default(); nhosts];
    for t in totals.values() {
        if let Some(l) = host_loss.get_mut(t.host as usize) {
            l.reported += t.ifdrop;
        }
    }
    for (h, l) in host_loss.iter_mut().enumerate() {
        l.placed = m.hosts.get(h).map_or(0, |s| s.located_losses);
        l.unplaced = l.reported.saturating_sub(l.placed);
        if l.unplaced > 0 {
            m.blame_unplaced_losses(h as HostId, l.unplaced);
        }
    }
    let host_reports = (0..nhosts)
        .map(|h| {
            let s = m.hosts.get(h).cloned().unwrap_or_default();
            let c = s.clock;
            HostReport {
                name: name(h as HostId),
                agents: hosts
                    .agents(h as HostId)
                    .iter()
                    .map(|a| format!("{a:016x}"))
                    .collect(),
                events: ["tx", "rx", "tcp", "clock", "cpu", "other"]
                    .into_iter()
                    .zip(s.events)
                    .collect(),
                first_ns: s.span.map(|x| x.0),
                last_ns: s.span.map(|x| x.1),
                lost_events: host_loss[h],
                retransmit_events: s.retransmit_events,
                sendmsg_never_sent: s.sendmsg_never_sent,
                sendmsg_already_sent: s.sendmsg_already_sent,
                tags_moved: s.tags_moved,
                clock: ClockReport {
                    source: c.source.map(clock_source_name),
                    state: c.state.map(clock_state_name),
                    updates: c.updates,
                    last_error_estimate_ns: c.last_error_ns,
                    max_error_estimate_ns: c.max_locked_error_ns,
                    max_offset_ns: c.max_locked_offset_ns,
                },
            }
        })
        .collect::<Vec<_>>();
    let mut host_reports = host_reports;
    host_reports.sort_by(|a, b| a.name.cmp(&b.name));
    let mut cpu_cost: Vec<HostCpuCost> = m
        .hosts
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.cpu.is_empty())
        .map(|(h, s)| HostCpuCost::new(name(h as HostId), &s.cpu))
        .collect();
    cpu_cost.sort_by(|a, b| a.host.cmp(&b.host));

    let mut dirs: Vec<&Direction> = m.dirs.values().collect();
    dirs.sort_by_key(|d| (name(d.sender), d.receiver.map(name)));
    let directions: Vec<DirectionReport> =
        dirs.iter().map(|d| direction_report(d, &name)).collect();

    // Host pairs: every pair with traffic in at least one direction.
    let mut pairs = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for d in &dirs {
        let Some(r) = d.receiver else { continue };
        if r == d.sender {
            continue;
        }
        let (a, b) = if name(d.sender) <= name(r) {
            (d.sender, r)
        } else {
            (r, d.sender)
        };
        if !seen.insert((name(a), name(b))) {
            continue;
        }
        let ab = m.dirs.get(&(a, Some(b)));
        let ba = m.dirs.get(&(b, Some(a)));
        // Packets sent and received on locked clocks only, when a
        // direction has any: before a servo locks, a clock may be far off.
        let min = |d: Option<&Direction>| {
            d.and_then(|d| {
                if d.locked > 0 {
                    d.min_locked
                } else {
                    d.one_way.min()
                }
            })
        };
        let count = |d: Option<&Direction>| {
            d.map_or(0, |d| {
                if d.locked > 0 {
                    d.locked
                } else {
                    d.one_way.count()
                }
            })
        };
        let includes_unlocked = [ab, ba]
            .into_iter()
            .flatten()
            .any(|d| d.locked == 0 && d.one_way.count() > 0);
        let (lo, hi) = offset_interval(min(ab), min(ba));
        let contains_zero = match (lo, hi) {
            (Some(l), Some(h)) => Some(l <= 0 && 0 <= h),
            (Some(l), None) if l > 0 => Some(false),
            (None, Some(h)) if h < 0 => Some(false),
            _ => None,
        };
        let err = |h: HostId| {
            m.hosts
                .get(h as usize)
                .and_then(|s| s.clock.max_locked_error_ns.or(s.clock.last_error_ns))
        };
        let source = |h: HostId| m.hosts.get(h as usize).and_then(|s| s.clock.source);
        // Error estimates bound the pair's offset only when both clocks
        // follow one reference: the sink's (`--clock sink`). On `system`
        // or `phc` each estimate is against the host's own reference.
        let sink = Some(ClockSource::Sink as u8);
        let (claimed, claim_basis) = match (err(a), err(b)) {
            (Some(x), Some(y)) if source(a) == sink && source(b) == sink => (
                Some(x + y),
                "both agents follow the sink's clock: |θ| ≤ the sum of their error estimates",
            ),
            (Some(_), Some(_)) => (
                None,
                "the agents' clocks follow their own references (system or PHC): their error estimates say nothing about the offset between them",
            ),
            _ => (None, "no clock error estimates in the trace"),
        };
        let claim_consistent = claimed.map(|c| {
            let c = c as i64;
            lo.is_none_or(|l| l <= c) && hi.is_none_or(|h| h >= -c)
        });
        let data_bound = match (lo, hi, contains_zero) {
            (Some(l), Some(h), Some(true)) => Some((-l).max(h) as u64),
            _ => None,
        };
        let data_tighter_than_claim = claimed.zip(data_bound).map(|(c, d)| d < c);
        // The packets behind a bound that lies outside ±claim.
        let mut contradicting = Vec::new();
        if let Some(c) = claimed.map(|c| c as i64) {
            fn fastest(d: Option<&Direction>) -> Option<&Life> {
                d.and_then(|d| d.fastest_locked.as_ref().or(d.fastest.as_ref()))
            }
            if hi.is_some_and(|h| h < -c) {
                contradicting.extend(fastest(ab).map(|l| l.report(name)));
            }
            if lo.is_some_and(|l| l > c) {
                contradicting.extend(fastest(ba).map(|l| l.report(name)));
            }
        }
        pairs.push(PairReport {
            a: name(a),
            b: name(b),
            offset: "clock_b - clock_a",
            lo_ns: lo,
            hi_ns: hi,
            width_ns: lo.zip(hi).map(|(l, h)| h - l),
            packets_a_to_b: count(ab),
            packets_b_to_a: count(ba),
            includes_unlocked,
            contains_zero,
            self_consistent: lo.zip(hi).map(|(l, h)| l <= h),
            claimed_bound_ns: claimed,
            claim_basis,
            claim_consistent,
            data_bound_ns: data_bound,
            data_tighter_than_claim,
            contradicting,
        });
    }

    let charts = Charts {
        directions: dirs
            .iter()
            .filter_map(|d| {
                Some((
                    name(d.sender),
                    name(d.receiver?),
                    d.one_way.clone(),
                    d.gaps.clone(),
                ))
            })
            .collect(),
    };
    let report = Report {
        settings: Settings {
            window_ns: m.config().window_ns,
            reorder_window_ns,
            sample_every: m.config().sample_every,
        },
        input,
        hosts: host_reports,
        directions,
        pairs,
        slowest: m.slowest.sorted().iter().map(|l| l.report(name)).collect(),
        cpu_cost,
        peak_held_by_matcher: m.peak_held,
    };
    (report, charts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_interval_signs() {
        // b's clock 5 µs ahead, true one-way 10 µs both ways: a→b looks
        // 15 µs, b→a looks 5 µs; offset = clock_b - clock_a in [-5, +15].
        let (lo, hi) = offset_interval(Some(15_000), Some(5_000));
        assert_eq!((lo, hi), (Some(-5_000), Some(15_000)));
        assert!(lo.unwrap() <= 5_000 && 5_000 <= hi.unwrap());
        // b's clock 50 µs behind: a→b looks -40 µs (a violation), b→a 60 µs.
        let (lo, hi) = offset_interval(Some(-40_000), Some(60_000));
        assert_eq!((lo, hi), (Some(-60_000), Some(-40_000)));
        assert!(lo.unwrap() <= -50_000 && -50_000 <= hi.unwrap());
        assert_eq!(offset_interval(None, Some(3)), (Some(-3), None));
    }
}
