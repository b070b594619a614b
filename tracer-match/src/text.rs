//! The terminal summary: per host, per direction (matched, unmatched by
//! reason, one-way and per-stage latencies, violations), per host pair
//! (the offset interval beside the agents' claims) and, when the agents
//! sent CPU events, what the network stack cost each host's CPUs.

use std::fmt::Write;

use crate::cpu::{CpuCostReport, HostCpuCost};
use crate::report::{DirectionReport, PairReport, Report};

/// A duration for people: `850 ns`, `12.3 µs`, `4.56 ms`, `1.23 s`.
pub fn dur(ns: i64) -> String {
    let a = ns.unsigned_abs() as f64;
    let sign = if ns < 0 { "-" } else { "" };
    let (v, unit) = if a < 1e3 {
        return format!("{ns} ns");
    } else if a < 1e6 {
        (a / 1e3, "µs")
    } else if a < 1e9 {
        (a / 1e6, "ms")
    } else {
        (a / 1e9, "s")
    };
    let digits = if v < 10.0 {
        2
    } else if v < 100.0 {
        1
    } else {
        0
    };
    format!("{sign}{v:.digits$} {unit}")
}

/// A signed duration with an explicit `+`.
fn sdur(ns: i64) -> String {
    if ns > 0 {
        format!("+{}", dur(ns))
    } else {
        dur(ns)
    }
}

fn opt(ns: Option<i64>) -> String {
    ns.map_or_else(|| "-".into(), dur)
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1} %", part as f64 * 100.0 / whole as f64)
    }
}

fn direction(out: &mut String, d: &DirectionReport) {
    let to = d.receiver.as_deref().unwrap_or("(untraced peer)");
    let _ = writeln!(
        out,
        "\n{} → {}   ({} flow{})",
        d.sender,
        to,
        d.flows,
        if d.flows == 1 { "" } else { "s" }
    );
    let _ = writeln!(
        out,
        "  sender skbs     {:>9}   (retransmissions {})",
        d.sent, d.retransmits
    );
    let _ = writeln!(
        out,
        "  matched         {:>9}   {}   (retransmissions {}{})",
        d.matched,
        pct(d.matched, d.sent),
        d.matched_retransmits,
        if d.matched_without_stack_entry > 0 {
            format!(", without STACK_ENTRY {}", d.matched_without_stack_entry)
        } else {
            String::new()
        }
    );
    let u = &d.unmatched;
    let _ = writeln!(
        out,
        "  unmatched       {:>9}   no RX seen {} (then retransmitted {}) · sampled out {} · outside trace window {} · lost events {} · peer not traced {}",
        u.total(),
        u.no_rx,
        u.no_rx_then_retransmitted,
        u.sampled_out,
        u.outside_window,
        u.lost_events,
        u.peer_not_traced
    );
    let a = &d.ambiguous;
    if a.total() > 0 {
        let _ = writeln!(
            out,
            "  ambiguous       {:>9}   {}   (copies received ≠ sends recorded: unstamped send {} · copy lost {}{})",
            a.total(),
            pct(a.total(), d.sent),
            a.unrecorded_send,
            a.lost_copy,
            if a.too_many_copies > 0 {
                format!(" · too many copies {}", a.too_many_copies)
            } else {
                String::new()
            }
        );
    }
    if let Some(o) = &d.one_way {
        let _ = writeln!(
            out,
            "  one-way         p50 {}   p99 {}   max {}   min {}   (SND_SW → STACK_ENTRY, {} packets)",
            dur(o.p50_ns),
            dur(o.p99_ns),
            dur(o.max_ns),
            dur(o.min_ns),
            o.count
        );
    }
    if let Some(o) = &d.one_way_hw {
        let _ = writeln!(
            out,
            "  one-way (hw)    p50 {}   p99 {}   max {}   (NIC stamps, {} packets)",
            dur(o.p50_ns),
            dur(o.p99_ns),
            dur(o.max_ns),
            o.count
        );
    }
    if d.stages.iter().any(|s| s.dist.is_some()) {
        let _ = writeln!(
            out,
            "  stage                          p50         p99       count"
        );
        for s in &d.stages {
            let Some(x) = &s.dist else { continue };
            let _ = writeln!(
                out,
                "    {:<26} {:>10}  {:>10}  {:>10}",
                s.gap,
                dur(x.p50_ns),
                dur(x.p99_ns),
                x.count
            );
        }
    }
    let v = &d.violations;
    if v.count == 0 {
        let _ = writeln!(out, "  causality       0 violations");
    } else {
        let _ = writeln!(
            out,
            "  causality       {} VIOLATIONS (received before sent; {} of matched{}), worst {}{}",
            v.count,
            pct(v.count, d.matched),
            if v.while_unlocked > 0 {
                format!("; {} while a clock was not locked yet", v.while_unlocked)
            } else {
                String::new()
            },
            opt(v.worst_ns),
            v.worst
                .as_ref()
                .map(|w| format!(" (flow {} tskey {})", w.flow, w.tskey))
                .unwrap_or_default()
        );
    }
}

/// A share as a percentage, `-` without one.
fn share(s: Option<f64>) -> String {
    s.map_or_else(|| "-".into(), |s| format!("{:.1} %", s * 100.0))
}

/// One row of the CPU cost table.
fn cpu_row(out: &mut String, host: &str, r: &CpuCostReport) {
    let cpu = r.cpu.map_or_else(|| "all".to_owned(), |c| c.to_string());
    let _ = write!(out, "{host:<16} {cpu:>5} {:>10}", dur(r.covered_ns as i64));
    for (_, c) in r.categories() {
        let _ = write!(out, "  {:>9} {:>7}", dur(c.ns as i64), share(c.share));
    }
    let _ = writeln!(out, "  {:>7}", r.samples);
}

/// The section "CPU cost of the network stack": per host and CPU, the
/// time the CPU events cover and each category's time and share of it.
fn cpu_cost(out: &mut String, hosts: &[HostCpuCost]) {
    let _ = writeln!(
        out,
        "\nCPU cost of the network stack (the agents' CPU events: time covered, then each category's time and share of it; categories may overlap)"
    );
    let _ = write!(out, "{:<16} {:>5} {:>10}", "host", "cpu", "covered");
    for name in ["NET_RX", "NET_TX", "send", "recv"] {
        let _ = write!(out, "  {name:>17}");
    }
    let _ = writeln!(out, "  {:>7}", "samples");
    for h in hosts {
        for c in &h.cpus {
            cpu_row(out, &h.host, c);
        }
        if h.cpus.len() > 1 {
            cpu_row(out, &h.host, &h.all);
        }
        if h.ignored_samples > 0 {
            let _ = writeln!(
                out,
                "  warning: {}: {} CPU events of CPUs past the first {} not counted",
                h.host,
                h.ignored_samples,
                crate::cpu::MAX_CPUS
            );
        }
    }
}

fn pair(out: &mut String, p: &PairReport) {
    let _ = writeln!(out, "\nclock offset θ = clock({}) − clock({})", p.b, p.a);
    let bound = |v: Option<i64>, inf: &str| v.map_or_else(|| inf.to_owned(), sdur);
    let verdict = match (p.contains_zero, p.self_consistent) {
        (_, Some(false)) => "INCONSISTENT: no single offset explains both directions (clocks drifted apart during the trace?)".to_owned(),
        (Some(true), _) => "contains 0: the trace does not contradict synchronised clocks".to_owned(),
        (Some(false), _) => "EXCLUDES 0: the clocks disagree by at least this much".to_owned(),
        (None, _) => "one direction only: half-bounded".to_owned(),
    };
    let _ = writeln!(
        out,
        "  data prove      θ ∈ [{}, {}]{}   ({} packets {}→{}, {} {}→{})",
        bound(p.lo_ns, "−∞"),
        bound(p.hi_ns, "+∞"),
        p.width_ns
            .map(|w| format!(", width {}", dur(w)))
            .unwrap_or_default(),
        p.packets_a_to_b,
        p.a,
        p.b,
        p.packets_b_to_a,
        p.b,
        p.a
    );
    let _ = writeln!(out, "                  {verdict}");
    if p.includes_unlocked {
        let _ = writeln!(
            out,
            "                  (from packets sent or received before a clock locked: no locked ones in one direction)"
        );
    }
    match (p.claimed_bound_ns, p.claim_consistent) {
        (Some(c), Some(ok)) => {
            let _ = writeln!(
                out,
                "  agents claim    |θ| ≤ {} (sum of their error estimates): {}",
                dur(c as i64),
                if ok {
                    "consistent with the data"
                } else {
                    "CONTRADICTED by the data: the clocks are worse than their agents say"
                }
            );
            if let (Some(d), Some(true)) = (p.data_bound_ns, p.data_tighter_than_claim) {
                let _ = writeln!(
                    out,
                    "                  the data prove more: |θ| ≤ {}, {:.1}x tighter than the claim",
                    dur(d as i64),
                    c as f64 / (d.max(1)) as f64
                );
            }
            for l in &p.contradicting {
                let _ = writeln!(
                    out,
                    "                  proof: {} → {} flow {} bytes {} one-way {} (STACK_ENTRY − SND_SW on the global axis)",
                    l.sender,
                    l.receiver,
                    l.flow,
                    l.tx_range
                        .map_or(format!("..={}", l.tskey), |(s, e)| format!("{s}..{e}")),
                    l.one_way_ns.map_or("-".into(), sdur),
                );
            }
        }
        _ => {
            let _ = writeln!(
                out,
                "  agents claim    (no clock error estimates in the trace)"
            );
        }
    }
}

/// The whole summary.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let i = &r.input;
    let _ = writeln!(
        out,
        "nettrace-match: {} file{}, {} events ({} used){}{}",
        i.files.len(),
        if i.files.len() == 1 { "" } else { "s" },
        i.events,
        i.used,
        if i.late > 0 {
            format!(", {} late beyond the reorder window", i.late)
        } else {
            String::new()
        },
        if i.decode_errors > 0 {
            format!(", {} undecodable", i.decode_errors)
        } else {
            String::new()
        }
    );
    for (f, why) in &i.damaged_files {
        let _ = writeln!(out, "  warning: {f}: {why} (events before it used)");
    }
    if i.undeclared_interface > 0 {
        let _ = writeln!(
            out,
            "  warning: {} frames of interfaces their file never declared (skipped)",
            i.undeclared_interface
        );
    }
    let s = &r.settings;
    let _ = writeln!(
        out,
        "matching window ±{}, reorder window {}, {}",
        dur(s.window_ns as i64),
        dur(s.reorder_window_ns as i64),
        if s.sample_every > 1 {
            format!("agents sampled 1 in {}", s.sample_every)
        } else {
            "no sampling".to_owned()
        }
    );
    let _ = writeln!(
        out,
        "\n{:<16} {:>9} {:>9} {:>8} {:>8}   clock (source, state, error estimate last / max)",
        "host", "TX", "RX", "lost", "retx"
    );
    for h in &r.hosts {
        let c = &h.clock;
        let lost = h.lost_events.reported.max(h.lost_events.placed);
        let _ = writeln!(
            out,
            "{:<16} {:>9} {:>9} {:>8} {:>8}   {} {} {} / {}",
            h.name,
            h.events.get("tx").copied().unwrap_or(0),
            h.events.get("rx").copied().unwrap_or(0),
            lost,
            h.retransmit_events,
            c.source.as_deref().unwrap_or("?"),
            c.state.as_deref().unwrap_or("-"),
            c.last_error_estimate_ns
                .map_or("-".into(), |v| dur(v as i64)),
            c.max_error_estimate_ns
                .map_or("-".into(), |v| dur(v as i64)),
        );
    }
    for d in &r.directions {
        direction(&mut out, d);
    }
    for p in &r.pairs {
        pair(&mut out, p);
    }
    if !r.cpu_cost.is_empty() {
        cpu_cost(&mut out, &r.cpu_cost);
    }
    if r.directions.is_empty() {
        let _ = writeln!(
            out,
            "\nno sender skbs in the trace: run the sender's agent with the tx probe (--probes tx,rx)"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(dur(850), "850 ns");
        assert_eq!(dur(12_345), "12.3 µs");
        assert_eq!(dur(-4_560_000), "-4.56 ms");
        assert_eq!(dur(123_000_000_000), "123 s");
        assert_eq!(sdur(2_000), "+2.00 µs");
    }
}
