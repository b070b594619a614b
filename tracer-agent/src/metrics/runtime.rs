//! Metrics while the agent runs: the BPF side attached, the `/metrics`
//! endpoint serving, and what the main loop publishes for it. Used beside
//! tracing (`run::run`) and alone (`run::run_metrics`).

use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use libbpf_rs::OpenObject;
use prometheus_client::registry::Registry;
use tracer_codec::ClockEvent;
use tracer_prom::MetricsServer;

use super::error::MetricsError;
use super::export::{AgentView, CpuReader, Exporter, Identity};
use super::kernel::{KernelConfig, KernelMetrics};
use super::parts::MetricParts;
use crate::cpucost::{CpuCost, CpuCostConfig};
use crate::probes::drops::names::DropReasons;
use crate::stats::AgentStats;

/// `--metrics` and its options.
#[derive(Debug, Clone)]
pub struct MetricsConfig {
    /// Where `/metrics` is served.
    pub listen: SocketAddr,
    /// Which parts run (`--metrics-with`).
    pub parts: MetricParts,
    /// Label series by network namespace (`--metrics-by netns`).
    pub by_netns: bool,
    /// Label RX series by interface (`--metrics-by iface`).
    pub by_iface: bool,
    /// Most label sets per map when grouping (`--metrics-max-series`).
    pub max_series: u32,
}

/// How often the TAI - REALTIME offset is refreshed in the program.
const REFRESH: Duration = Duration::from_secs(1);

/// Metrics attached and served; dropping it stops serving, then detaches.
pub struct MetricsRuntime<'obj> {
    server: MetricsServer,
    kernel: Option<KernelMetrics<'obj>>,
    cpu: Option<CpuCost>,
    view: Arc<Mutex<AgentView>>,
    last_refresh: Instant,
}

impl<'obj> MetricsRuntime<'obj> {
    /// Attach what `cfg.parts` asks for and start serving.
    pub fn start(
        object: &'obj mut MaybeUninit<OpenObject>,
        cfg: &MetricsConfig,
        kernel_cfg: KernelConfig,
        btf: &std::path::Path,
        identity: Identity,
    ) -> Result<Self, MetricsError> {
        let (kernel, maps) = if cfg.parts.any_kernel() {
            let (k, m) = KernelMetrics::start(object, &kernel_cfg)?;
            (Some(k), Some(m))
        } else {
            (None, None)
        };
        let reasons = if cfg.parts.drops {
            DropReasons::from_btf(btf).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "drop reasons will be numbers in the metrics");
                DropReasons::default()
            })
        } else {
            DropReasons::default()
        };
        let own_netns = crate::preflight::netns_inode("/proc/self/ns/net".as_ref()).unwrap_or(0);
        let cpu = if cfg.parts.cpu {
            // The agent's own socket calls are nettrace's work, not the
            // traced host's: left out, like its own traffic.
            Some(CpuCost::start_with(&CpuCostConfig {
                exclude_pid: Some(std::process::id()),
                btf: btf.to_path_buf(),
            })?)
        } else {
            None
        };
        let cpu_reader: Option<CpuReader> = match &cpu {
            Some(c) => {
                let r = c.reader()?;
                Some(Box::new(move || match r.read() {
                    Ok(reading) => Some(reading.per_cpu),
                    Err(e) => {
                        tracing::warn!(error = %e, "reading the CPU accounting for a scrape");
                        None
                    }
                }))
            }
            None => None,
        };
        let view = Arc::new(Mutex::new(AgentView::default()));
        let exporter = Exporter::new(
            maps,
            reasons,
            own_netns,
            identity,
            Arc::clone(&view),
            cpu_reader,
        );
        let mut registry = Registry::default();
        registry.register_collector(Box::new(exporter));
        let server = MetricsServer::start(cfg.listen, registry)?;
        Ok(MetricsRuntime {
            server,
            kernel,
            cpu,
            view,
            last_refresh: Instant::now(),
        })
    }

    /// The address `/metrics` is served on.
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// Publish the agent's state for the next scrape, and keep the
    /// program's clock offset current. Cheap: call it every loop turn.
    pub fn publish(&mut self, stats: Option<&AgentStats>, clock: &[ClockEvent]) {
        // Most drain turns have neither: no lock then.
        let news = stats.is_some() || !clock.is_empty();
        if let Some(mut v) = news.then(|| self.view.lock().ok()).flatten() {
            if let Some(s) = stats {
                v.stats = Some(s.clone());
            }
            if let Some(last) = clock.last() {
                v.clock = Some(*last);
                v.clock_updates += clock.len() as u64;
            }
        }
        if self.last_refresh.elapsed() >= REFRESH {
            if let Some(k) = &mut self.kernel {
                k.refresh();
            }
            self.last_refresh = Instant::now();
        }
    }

    /// The CPU accounting's totals now (per CPU, ns by category since it
    /// started), when it runs.
    pub fn cpu_totals(&self) -> Option<Vec<[u64; 4]>> {
        let c = self.cpu.as_ref()?;
        match c.read() {
            Ok(r) => Some(r.per_cpu),
            Err(e) => {
                tracing::warn!(error = %e, "reading the CPU accounting");
                None
            }
        }
    }

    /// When the CPU accounting started, when it runs.
    pub fn cpu_started(&self) -> Option<Instant> {
        self.cpu.as_ref().map(CpuCost::started)
    }

    /// The attached programs (bpf_stats).
    pub fn programs(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        self.kernel
            .as_ref()
            .map(|k| k.programs())
            .unwrap_or_default()
    }
}
