//! The HTML report: one self-contained file (inline CSS and SVG, no
//! scripts, nothing fetched) with the summary tables, the offset interval
//! of each host pair, CDFs of the one-way latency and of each host's stage
//! latencies, a timeline of the slowest packets' lives and, when the
//! agents sent CPU events, the CPU cost of the network stack.

use std::fmt::Write;

use crate::cpu::{CpuCostReport, HostCpuCost};
use crate::hist::Hist;
use crate::lifetime::{gap_meaning, gap_name, Stage};
use crate::report::{Charts, Report};
use crate::text::dur;

mod charts;

use charts::{cdf_chart, esc, offset_line, timeline, GAP_COLOURS, LINE_COLOURS};

fn td(v: impl std::fmt::Display) -> String {
    format!("<td>{}</td>", esc(&v.to_string()))
}

/// A share as a percentage, `-` without one.
fn share(s: Option<f64>) -> String {
    s.map_or_else(|| "-".into(), |s| format!("{:.1} %", s * 100.0))
}

/// One row of the CPU cost table.
fn cpu_row(s: &mut String, host: &str, r: &CpuCostReport) {
    let cpu = r.cpu.map_or_else(|| "all".to_owned(), |c| c.to_string());
    let _ = write!(
        s,
        "<tr>{}{}{}",
        td(host),
        td(cpu),
        td(dur(r.covered_ns as i64))
    );
    for (_, c) in r.categories() {
        let _ = write!(s, "{}{}", td(dur(c.ns as i64)), td(share(c.share)));
    }
    let _ = write!(s, "{}</tr>", td(r.samples));
}

/// The table "CPU cost of the network stack", as the text summary has it.
fn cpu_cost(s: &mut String, hosts: &[HostCpuCost]) {
    s.push_str("<h2>CPU cost of the network stack</h2><p class=\"note\">From the agents' CPU events: the time they cover on each CPU, and the time each category took in it (NET_RX and NET_TX softirqs, socket send and receive calls) with its share. Categories may overlap (a softirq run inside a send call counts in both).</p><table><tr><th>host</th><th>CPU</th><th>covered</th>");
    for name in ["NET_RX", "NET_TX", "send", "recv"] {
        let _ = write!(s, "<th>{name}</th><th>share</th>");
    }
    s.push_str("<th>samples</th></tr>");
    for h in hosts {
        for c in &h.cpus {
            cpu_row(s, &h.host, c);
        }
        if h.cpus.len() > 1 {
            cpu_row(s, &h.host, &h.all);
        }
    }
    s.push_str("</table>");
    for h in hosts.iter().filter(|h| h.ignored_samples > 0) {
        let _ = write!(
            s,
            "<p class=\"bad\">{}: {} CPU events of CPUs past the first {} not counted.</p>",
            esc(&h.host),
            h.ignored_samples,
            crate::cpu::MAX_CPUS
        );
    }
}

/// The whole HTML document.
pub fn render(r: &Report, charts: &Charts) -> String {
    let mut s = String::new();
    s.push_str("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>nettrace match report</title><style>");
    s.push_str(
        "body{font-family:sans-serif;margin:24px;color:#222;max-width:1100px}\
         table{border-collapse:collapse;margin:8px 0 18px}\
         td,th{border:1px solid #ccc;padding:3px 8px;text-align:right;font-size:13px}\
         th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}\
         .bad{color:#b00;font-weight:bold}.note{color:#555;font-size:13px}\
         figure{margin:10px 0}figcaption{font-weight:bold;margin-bottom:4px}h2{margin-top:28px}",
    );
    s.push_str("</style></head><body><h1>nettrace match report</h1>");
    let i = &r.input;
    let _ = write!(
        s,
        "<p class=\"note\">{} file(s), {} events ({} used, {} late). Matching window ±{}, {}.</p>",
        i.files.len(),
        i.events,
        i.used,
        i.late,
        esc(&dur(r.settings.window_ns as i64)),
        if r.settings.sample_every > 1 {
            format!("agents sampled 1 in {}", r.settings.sample_every)
        } else {
            "no sampling".into()
        }
    );

    s.push_str("<h2>Directions</h2><table><tr><th>sender → receiver</th><th>sender skbs</th><th>matched</th><th>no RX</th><th>sampled out</th><th>outside window</th><th>lost events</th><th>ambiguous</th><th>one-way p50</th><th>p99</th><th>max</th><th>violations</th></tr>");
    for d in &r.directions {
        let ow = d.one_way.as_ref();
        let _ = write!(
            s,
            "<tr>{}{}{}{}{}{}{}{}{}{}{}<td{}>{}</td></tr>",
            td(format!(
                "{} → {}",
                d.sender,
                d.receiver.as_deref().unwrap_or("(untraced)")
            )),
            td(d.sent),
            td(format!("{} ({:.1} %)", d.matched, d.matched_ratio * 100.0)),
            td(d.unmatched.no_rx),
            td(d.unmatched.sampled_out),
            td(d.unmatched.outside_window),
            td(d.unmatched.lost_events),
            td(d.ambiguous.total()),
            td(ow.map_or("-".into(), |o| dur(o.p50_ns))),
            td(ow.map_or("-".into(), |o| dur(o.p99_ns))),
            td(ow.map_or("-".into(), |o| dur(o.max_ns))),
            if d.violations.count > 0 {
                " class=\"bad\""
            } else {
                ""
            },
            d.violations.count
        );
    }
    s.push_str("</table>");

    if !r.cpu_cost.is_empty() {
        cpu_cost(&mut s, &r.cpu_cost);
    }

    if !r.pairs.is_empty() {
        s.push_str("<h2>Clock offset: what the trace proves</h2><p class=\"note\">A packet cannot arrive before it was sent, so the smallest one-way latency each way bounds the offset between the two hosts' clocks: θ = clock(b) − clock(a) ∈ [−min d(b→a), +min d(a→b)].</p>");
        for p in &r.pairs {
            let _ = write!(
                s,
                "<p>{} and {}: θ ∈ [{}, {}]{}{}</p>",
                esc(&p.a),
                esc(&p.b),
                esc(&p.lo_ns.map_or("−∞".into(), dur)),
                esc(&p.hi_ns.map_or("+∞".into(), dur)),
                match p.contains_zero {
                    Some(true) => " — contains 0",
                    Some(false) => " — <span class=\"bad\">excludes 0</span>",
                    None => "",
                },
                match p.claim_consistent {
                    Some(false) =>
                        " — <span class=\"bad\">contradicts the agents' error estimates</span>"
                            .to_owned(),
                    Some(true) => " — consistent with the agents' error estimates".to_owned(),
                    None => format!(" — no claim to compare: {}", esc(p.claim_basis)),
                }
            );
            if let (Some(d), Some(true)) = (p.data_bound_ns, p.data_tighter_than_claim) {
                let _ = write!(
                    s,
                    "<p>The data prove more than the agents claim: |θ| ≤ {}.</p>",
                    esc(&dur(d as i64))
                );
            }
            for l in &p.contradicting {
                let _ = write!(
                    s,
                    "<p class=\"bad\">Proof: {} → {}, flow {}, one-way {} (STACK_ENTRY − SND_SW).</p>",
                    esc(&l.sender),
                    esc(&l.receiver),
                    esc(&l.flow),
                    esc(&l.one_way_ns.map_or("-".into(), dur))
                );
            }
            s.push_str(&offset_line(p));
        }
    }

    s.push_str("<h2>One-way latency</h2>");
    let lines: Vec<(String, &str, &Hist)> = charts
        .directions
        .iter()
        .enumerate()
        .map(|(k, (a, b, h, _))| {
            (
                format!("{a} → {b}"),
                LINE_COLOURS[k % LINE_COLOURS.len()],
                h,
            )
        })
        .collect();
    s.push_str(&cdf_chart(
        "CDF of one-way latency (SND_SW → STACK_ENTRY)",
        &lines,
    ));

    s.push_str("<h2>Stage latencies per host</h2>");
    let mut hosts: Vec<&String> = charts
        .directions
        .iter()
        .flat_map(|(a, b, _, _)| [a, b])
        .collect();
    hosts.sort();
    hosts.dedup();
    for host in hosts {
        let mut lines: Vec<(String, &str, &Hist)> = Vec::new();
        for (a, b, _, gaps) in &charts.directions {
            for (g, hist) in gaps.iter().enumerate() {
                // The sender's own gaps (up to SND_SW) and the receiver's
                // (from STACK_ENTRY on); the wire is the one-way chart.
                let sender_side = g < Stage::SndSw as usize;
                let receiver_side = g >= Stage::StackEntry as usize;
                let mine = (sender_side && a == host) || (receiver_side && b == host);
                if mine && hist.count() > 0 {
                    let peer = if receiver_side {
                        format!(" (from {a})")
                    } else {
                        format!(" (to {b})")
                    };
                    lines.push((format!("{}{peer}", gap_name(g)), GAP_COLOURS[g], hist));
                }
            }
        }
        if !lines.is_empty() {
            s.push_str(&cdf_chart(
                &format!("{host}: CDF of stage latencies"),
                &lines,
            ));
        }
    }

    let _ = write!(
        s,
        "<h2>The {} slowest packets</h2><p class=\"note\">One row per packet, from its first to its last recorded stage; each segment is one gap of its life. Hover a segment for its length.</p>",
        r.slowest.len()
    );
    s.push_str(&timeline(&r.slowest));
    s.push_str("<table><tr><th>gap</th><th>what it measures</th></tr>");
    for (g, colour) in GAP_COLOURS.iter().enumerate() {
        let _ = write!(
            s,
            "<tr><td><span style=\"color:{}\">■</span> {}</td><td style=\"text-align:left\">{}</td></tr>",
            colour,
            esc(&gap_name(g)),
            esc(gap_meaning(g))
        );
    }
    s.push_str("</table></body></html>\n");
    s
}
