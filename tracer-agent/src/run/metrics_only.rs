//! `--metrics` without a trace (no --sink, --write or --live-iface): the
//! metrics program and the clock, served at `/metrics`, nothing else.

use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use libbpf_rs::OpenObject;

use super::config::NetnsFilter;
use super::error::AgentError;
use crate::clock::{AgentClock, ClockConfig};
use crate::filter::FlowFilter;
use crate::metrics::{Identity, KernelConfig, MetricsConfig, MetricsRuntime};
use crate::pipeline::AgentIdentity;
use crate::preflight;
use crate::self_traffic::SelfTraffic;

/// What a metrics-only run needs.
#[derive(Debug, Clone)]
pub struct MetricsOnlyConfig {
    /// `--metrics` and its options.
    pub metrics: MetricsConfig,
    /// cgroup v2 directory of the TX stage program.
    pub cgroup: PathBuf,
    /// Namespace filter.
    pub netns: NetnsFilter,
    /// `--sample-every` (TX stage histograms).
    pub sample_every: u32,
    /// `--filter`.
    pub filter: FlowFilter,
    /// Kernel BTF (drop reason names, the TX timestamping check).
    pub btf: PathBuf,
    /// The global clock, whose state the metrics show.
    pub clock: ClockConfig,
    /// This agent's name and id.
    pub identity: AgentIdentity,
}

/// What both modes pass to [`start_metrics`].
pub(super) struct MetricsSetup<'a> {
    pub target_netns: u32,
    pub sample_every: u32,
    pub filter: &'a FlowFilter,
    pub self_traffic: &'a SelfTraffic,
    pub cgroup: &'a Path,
    pub btf: &'a Path,
    pub identity: &'a AgentIdentity,
}

/// Check what the chosen parts need, then attach and serve.
pub(super) fn start_metrics<'o>(
    object: &'o mut MaybeUninit<OpenObject>,
    m: &MetricsConfig,
    s: &MetricsSetup<'_>,
) -> Result<MetricsRuntime<'o>, AgentError> {
    if m.parts.tx {
        preflight::check_tx_timestamping(s.btf)?;
        preflight::check_cgroup(s.cgroup)?;
    }
    let kernel = KernelConfig {
        parts: m.parts,
        target_netns: s.target_netns,
        sample_threshold: tracer_codec::sample::threshold(s.sample_every),
        by_netns: m.by_netns,
        by_iface: m.by_iface,
        max_series: m.max_series,
        filter: s.filter.clone(),
        self_traffic: s.self_traffic.clone(),
        cgroup: s.cgroup.to_path_buf(),
    };
    let identity = Identity {
        host: s.identity.hostname.clone(),
        agent_id: format!("{:016x}", s.identity.agent_id),
    };
    let rt = MetricsRuntime::start(object, m, kernel, s.btf, identity)?;
    tracing::info!(addr = %rt.local_addr(), rx = m.parts.rx, tx = m.parts.tx,
        drops = m.parts.drops, tcp = m.parts.tcp, cpu = m.parts.cpu,
        "metrics attached");
    Ok(rt)
}

/// Serve metrics until `stop` is set; detaches everything before returning.
pub fn run_metrics(cfg: &MetricsOnlyConfig, stop: &AtomicBool) -> Result<(), AgentError> {
    preflight::check_privileges()?;
    let target = cfg.netns.inode()?;
    let (mut clock, _local) =
        AgentClock::start(&cfg.clock).map_err(|source| AgentError::Clock {
            spec: Box::new(cfg.clock.choice.clone()),
            source,
        })?;
    let mut object = MaybeUninit::uninit();
    let mut metrics = start_metrics(
        &mut object,
        &cfg.metrics,
        &MetricsSetup {
            target_netns: target,
            sample_every: cfg.sample_every,
            filter: &cfg.filter,
            self_traffic: &SelfTraffic::default(),
            cgroup: &cfg.cgroup,
            btf: &cfg.btf,
            identity: &cfg.identity,
        },
    )?;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        let events = clock.drain_events();
        metrics.publish(None, &events);
    }
    tracing::info!("metrics detached");
    Ok(())
}
