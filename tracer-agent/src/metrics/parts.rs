//! `--metrics-with`: which parts of the metrics mode run.

/// Which parts of the metrics program run (`--metrics-with`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricParts {
    /// RX latency histograms.
    pub rx: bool,
    /// TX stage histograms (BPF TX timestamping, a sockops program).
    pub tx: bool,
    /// Drops by reason.
    pub drops: bool,
    /// TCP retransmissions, resets, socket queue and memory events.
    pub tcp: bool,
    /// CPU the network stack costs (softirqs, socket calls).
    pub cpu: bool,
}

impl MetricParts {
    /// Every part.
    pub const ALL: MetricParts = MetricParts {
        rx: true,
        tx: true,
        drops: true,
        tcp: true,
        cpu: true,
    };
    /// The names `--metrics-with` takes.
    pub const NAMES: [&'static str; 5] = ["rx", "tx", "drops", "tcp", "cpu"];

    /// Parse a comma-separated list of [`Self::NAMES`].
    pub fn parse(list: &str) -> Result<Self, String> {
        let mut p = MetricParts {
            rx: false,
            tx: false,
            drops: false,
            tcp: false,
            cpu: false,
        };
        for name in list.split(',').map(str::trim) {
            match name {
                "rx" => p.rx = true,
                "tx" => p.tx = true,
                "drops" => p.drops = true,
                "tcp" => p.tcp = true,
                "cpu" => p.cpu = true,
                "all" => p = Self::ALL,
                other => {
                    return Err(format!(
                        "unknown metrics part {other:?}: known parts are {}, or all",
                        Self::NAMES.join(", ")
                    ))
                }
            }
        }
        Ok(p)
    }

    /// Whether any BPF hook of the metrics program is wanted.
    pub fn any_kernel(&self) -> bool {
        self.rx || self.tx || self.drops || self.tcp
    }
}

#[cfg(test)]
mod tests {
    use super::MetricParts;

    #[test]
    fn parts_parse_and_refuse_unknown_names() {
        let p = MetricParts::parse("rx, drops").unwrap();
        assert!(p.rx && p.drops && !p.tx && !p.tcp && !p.cpu);
        assert_eq!(MetricParts::parse("all").unwrap(), MetricParts::ALL);
        let e = MetricParts::parse("rx,bogus").unwrap_err();
        assert!(e.contains("\"bogus\"") && e.contains("cpu"), "{e}");
        assert!(!MetricParts::parse("cpu").unwrap().any_kernel());
    }
}
