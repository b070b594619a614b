//! The report's SVG charts: CDFs on a log axis, the timeline of the
//! slowest packets' lives, and each host pair's offset interval.

use std::fmt::Write;

use crate::hist::Hist;
use crate::lifetime::{gap_name, LifeReport, Stage, GAPS};
use crate::report::PairReport;
use crate::text::dur;

/// One colour per gap of the life (sender's in warm tones, the wire in
/// grey, the receiver's in cool ones), chosen to stay apart for readers
/// with the common colour-vision deficiencies.
pub(super) const GAP_COLOURS: [&str; GAPS] = [
    "#e69f00", "#d55e00", "#7f7f7f", "#0072b2", "#56b4e9", "#009e73", "#cc79a7",
];
/// Colours of the lines of a CDF chart.
pub(super) const LINE_COLOURS: [&str; 8] = [
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#7f7f7f", "#000000",
];

/// `s` as HTML (and SVG) text.
pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A log-scale x axis in ns, drawn in µs.
struct LogAxis {
    lo: f64,
    hi: f64,
    x0: f64,
    width: f64,
}

impl LogAxis {
    fn new(min_ns: f64, max_ns: f64, x0: f64, width: f64) -> Self {
        // A little room below the smallest value: a distribution that sits
        // on a decade must not hide in the axis.
        let lo = 10f64.powf((min_ns * 0.98).max(1.0).log10().floor());
        let mut hi = 10f64.powf(max_ns.max(1.0).log10().ceil());
        if hi <= lo {
            hi = lo * 10.0;
        }
        LogAxis { lo, hi, x0, width }
    }

    fn x(&self, ns: f64) -> f64 {
        let v = ns.clamp(self.lo, self.hi);
        self.x0 + (v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10()) * self.width
    }

    fn decades(&self) -> Vec<f64> {
        let mut v = Vec::new();
        let mut d = self.lo;
        while d <= self.hi * 1.0001 {
            v.push(d);
            d *= 10.0;
        }
        v
    }
}

/// A CDF chart of several histograms on a log axis.
pub(super) fn cdf_chart(title: &str, lines: &[(String, &str, &Hist)]) -> String {
    let (w, h) = (1000.0, 330.0);
    let (x0, y0, pw, ph) = (70.0, 20.0, 520.0, 260.0);
    let mut lo = f64::MAX;
    let mut hi: f64 = 1.0;
    for (_, _, hist) in lines {
        for (v, _) in hist.cdf() {
            if v > 0 {
                lo = lo.min(v as f64);
                hi = hi.max(v as f64);
            }
        }
    }
    if lo == f64::MAX {
        return format!("<p class=\"note\">{}: no samples.</p>", esc(title));
    }
    let ax = LogAxis::new(lo, hi, x0, pw);
    let y = |f: f64| y0 + ph - f * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        "<figure><figcaption>{}</figcaption><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">",
        esc(title)
    );
    // Grid and axes.
    for f in [0.0, 0.25, 0.5, 0.75, 0.9, 1.0] {
        let yy = y(f);
        let _ = write!(
            s,
            "<line x1=\"{x0}\" x2=\"{}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{f}</text>",
            x0 + pw,
            x0 - 6.0,
            yy + 4.0,
        );
    }
    for d in ax.decades() {
        let xx = ax.x(d);
        let _ = write!(
            s,
            "<line x1=\"{xx:.1}\" x2=\"{xx:.1}\" y1=\"{y0}\" y2=\"{}\" stroke=\"#ddd\"/><text x=\"{xx:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            y0 + ph,
            y0 + ph + 16.0,
            esc(&dur(d as i64))
        );
    }
    let _ = write!(
        s,
        "<rect x=\"{x0}\" y=\"{y0}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#333\"/><text x=\"{}\" y=\"{}\" text-anchor=\"middle\">latency (log scale)</text><text transform=\"translate(16,{}) rotate(-90)\" text-anchor=\"middle\">fraction of packets ≤ x</text>",
        x0 + pw / 2.0,
        y0 + ph + 34.0,
        y0 + ph / 2.0
    );
    // Lines and legend.
    for (k, (label, colour, hist)) in lines.iter().enumerate() {
        let neg = hist.negatives() as f64 / hist.count().max(1) as f64;
        let mut pts = format!("{:.1},{:.1}", x0, y(neg));
        let mut prev = neg;
        for (v, f) in hist.cdf() {
            if v <= 0 {
                continue;
            }
            let xx = ax.x(v as f64);
            let _ = write!(pts, " {xx:.1},{:.1} {xx:.1},{:.1}", y(prev), y(f));
            prev = f;
        }
        let _ = write!(
            s,
            "<polyline points=\"{pts}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"/>"
        );
        let ly = y0 + 14.0 + k as f64 * 18.0;
        let lx = x0 + pw + 16.0;
        let extra = if neg > 0.0 {
            format!(" ({:.1} % below 0, not on the axis)", neg * 100.0)
        } else {
            String::new()
        };
        let _ = write!(
            s,
            "<line x1=\"{lx}\" x2=\"{}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\" stroke-width=\"3\"/><text x=\"{}\" y=\"{ly:.1}\">{}{}</text>",
            lx + 18.0,
            ly - 4.0,
            ly - 4.0,
            lx + 24.0,
            esc(label),
            esc(&extra)
        );
    }
    s.push_str("</svg></figure>");
    s
}

/// A round axis span at or above `v` (1, 2, 5 × 10^n).
fn nice(v: f64) -> f64 {
    let p = 10f64.powf(v.max(1.0).log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * p >= v {
            return m * p;
        }
    }
    10.0 * p
}

/// An axis label in µs with no more digits than it needs.
fn axis_us(ns: f64) -> String {
    let us = ns / 1000.0;
    if us == 0.0 || us >= 10.0 {
        format!("{us:.0}")
    } else if us >= 1.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.2}")
    }
}

/// The lives of the slowest packets: one row each, each gap a segment.
pub(super) fn timeline(lives: &[LifeReport]) -> String {
    if lives.is_empty() {
        return "<p class=\"note\">No matched packets.</p>".into();
    }
    let row_h = 22.0;
    let (label_w, pw) = (330.0, 600.0);
    let x0 = label_w;
    let top = 44.0;
    let h = top + row_h * lives.len() as f64 + 80.0;
    let w = label_w + pw + 90.0;
    let span = nice(lives.iter().map(|l| l.total_ns).max().unwrap_or(1) as f64);
    let x = |ns: f64| x0 + ns / span * pw;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    // Axis in µs along the top and grid lines.
    for k in 0..=10 {
        let v = span * f64::from(k) / 10.0;
        let xx = x(v);
        let _ = write!(
            s,
            "<line x1=\"{xx:.1}\" x2=\"{xx:.1}\" y1=\"{}\" y2=\"{:.1}\" stroke=\"#e4e4e4\"/>",
            top - 4.0,
            top + row_h * lives.len() as f64
        );
        if k % 2 == 0 {
            let _ = write!(
                s,
                "<text x=\"{xx:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                top - 8.0,
                axis_us(v)
            );
        }
    }
    let _ = write!(
        s,
        "<text x=\"{}\" y=\"14\" text-anchor=\"middle\" font-weight=\"bold\">µs since the packet's first recorded stage</text>",
        x0 + pw / 2.0
    );
    for (r, l) in lives.iter().enumerate() {
        let yy = top + row_h * r as f64;
        let label = format!(
            "{}→{} tskey {}{}",
            l.sender,
            l.receiver,
            l.tskey,
            if l.retransmit { " (retx)" } else { "" }
        );
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            label_w - 8.0,
            yy + 15.0,
            esc(&label)
        );
        let at: Vec<(usize, u64)> = l
            .stages_ns
            .iter()
            .filter_map(|(n, t)| {
                Stage::ALL
                    .iter()
                    .position(|s| s.name() == n)
                    .map(|i| (i, *t))
            })
            .collect();
        let Some(&(_, t0)) = at.first() else { continue };
        for pair in at.windows(2) {
            let ((_, ta), (j, tb)) = (pair[0], pair[1]);
            let (xa, xb) = (x((ta - t0) as f64), x((tb.max(ta) - t0) as f64));
            let gap = j - 1;
            let _ = write!(
                s,
                "<rect x=\"{xa:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{}\" fill=\"{}\"><title>{} {}</title></rect>",
                yy + 4.0,
                (xb - xa).max(1.0),
                row_h - 8.0,
                GAP_COLOURS[gap],
                esc(&gap_name(gap)),
                esc(&dur(tb as i64 - ta as i64))
            );
        }
        for (_, t) in &at {
            let xx = x((t - t0) as f64);
            let _ = write!(
                s,
                "<line x1=\"{xx:.1}\" x2=\"{xx:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#222\"/>",
                yy + 2.0,
                yy + row_h - 2.0
            );
        }
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            x(l.total_ns as f64) + 6.0,
            yy + 15.0,
            esc(&dur(l.total_ns as i64))
        );
    }
    // Legend: four per row.
    let base = top + row_h * lives.len() as f64 + 16.0;
    for (i, c) in GAP_COLOURS.iter().enumerate() {
        let (lx, ly) = (10.0 + (i % 4) as f64 * 250.0, base + (i / 4) as f64 * 22.0);
        let _ = write!(
            s,
            "<rect x=\"{lx}\" y=\"{ly}\" width=\"14\" height=\"14\" fill=\"{c}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            lx + 20.0,
            ly + 11.0,
            esc(&gap_name(i))
        );
    }
    s.push_str("</svg>");
    s
}

/// The offset interval of a pair on a number line, with the agents' claim.
pub(super) fn offset_line(p: &PairReport) -> String {
    let (w, h) = (860.0, 90.0);
    let (x0, pw) = (60.0, 740.0);
    let claim = p.claimed_bound_ns.map(|c| c as f64);
    let mut ext: f64 = 1.0;
    for v in [p.lo_ns, p.hi_ns].into_iter().flatten() {
        ext = ext.max((v as f64).abs());
    }
    if let Some(c) = claim {
        ext = ext.max(c);
    }
    let ext = nice(ext * 1.15);
    let x = |v: f64| x0 + (v + ext) / (2.0 * ext) * pw;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = write!(
        s,
        "<line x1=\"{x0}\" x2=\"{}\" y1=\"50\" y2=\"50\" stroke=\"#333\"/>",
        x0 + pw
    );
    for k in -4..=4 {
        let v = ext * f64::from(k) / 4.0;
        let _ = write!(
            s,
            "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"46\" y2=\"54\" stroke=\"#333\"/><text x=\"{0:.1}\" y=\"70\" text-anchor=\"middle\">{1}</text>",
            x(v),
            esc(&dur(v as i64))
        );
    }
    let lo = p.lo_ns.map_or(-ext, |v| v as f64);
    let hi = p.hi_ns.map_or(ext, |v| v as f64);
    let colour = if p.contains_zero == Some(false) || p.self_consistent == Some(false) {
        "#d55e00"
    } else {
        "#009e73"
    };
    let _ = write!(
        s,
        "<rect x=\"{:.1}\" y=\"40\" width=\"{:.1}\" height=\"20\" fill=\"{colour}\" fill-opacity=\"0.55\"><title>data: offset in [{}, {}]</title></rect>",
        x(lo.min(hi)),
        (x(hi.max(lo)) - x(lo.min(hi))).max(2.0),
        esc(&p.lo_ns.map_or("-∞".into(), dur)),
        esc(&p.hi_ns.map_or("+∞".into(), dur))
    );
    if let Some(c) = claim {
        let _ = write!(
            s,
            "<path d=\"M{a:.1},30 v-8 H{b:.1} v8\" fill=\"none\" stroke=\"#0072b2\" stroke-width=\"2\"/><text x=\"{m:.1}\" y=\"16\" text-anchor=\"middle\" fill=\"#0072b2\">agents claim ±{}</text>",
            esc(&dur(c as i64)),
            a = x(-c),
            b = x(c),
            m = x(0.0)
        );
    }
    let _ = write!(
        s,
        "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"34\" y2=\"66\" stroke=\"#000\" stroke-dasharray=\"3,2\"/><text x=\"{x0}\" y=\"86\">θ = clock({1}) − clock({2}); bar: what the matched packets prove</text>",
        x(0.0),
        esc(&p.b),
        esc(&p.a)
    );
    s.push_str("</svg>");
    s
}
