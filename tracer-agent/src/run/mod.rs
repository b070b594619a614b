//! The agent's main loop: preflight, load and attach the selected probes,
//! drain their rings on a short timer, convert, batch, send, report, detach.

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use libbpf_rs::OpenObject;

use crate::clock::AgentClock;
use crate::pipeline::Pipeline;
use crate::preflight;
use crate::probes::ProbeConfig;
use crate::self_traffic::SelfTraffic;
use crate::sender::UdpTransport;
use crate::stamp::Stamper;
use crate::stats::{bpf_prog_info, AgentStats};
use tracer_codec::ClockState;

mod config;
mod cpu_sampler;
mod drain;
mod error;
mod host;
mod metrics_only;
mod wait;

pub use config::{AgentConfig, AgentKeys, NetnsFilter};
pub use error::AgentError;
pub use host::{boot_id, hostname, print_stats};
pub use metrics_only::{run_metrics, MetricsOnlyConfig};

use cpu_sampler::CpuSampler;
use drain::{drain, snapshot_clock, update_counters};
use wait::{doorbell_ring, next_poll, set_realtime, wait_or_doorbell};

/// How often BPF counters (losses) are read: from mapped memory.
const COUNTER_PERIOD: Duration = Duration::from_millis(100);
/// How often the programs' run statistics are read: a system call per
/// program, which an idle agent would otherwise spend most of its time on.
const RUNS_PERIOD: Duration = Duration::from_secs(1);
/// How often CPU events go into the trace (with `--metrics-with cpu`).
const CPU_EVENT_PERIOD: Duration = Duration::from_secs(1);

/// Run until `stop` is set; returns the final counters. BPF links are
/// detached before returning, also on error.
pub fn run(cfg: &AgentConfig, stop: &AtomicBool) -> Result<AgentStats, AgentError> {
    if cfg.probes.is_empty() {
        return Err(AgentError::NoProbes);
    }
    preflight::check_privileges()?;
    preflight::check_cgroup(&cfg.cgroup)?;
    let target_netns = cfg.netns.inode()?;
    let self_traffic = self_traffic_of(&cfg.netns, &cfg.self_endpoints)?;
    let probe_cfg = ProbeConfig {
        cgroup: cfg.cgroup.clone(),
        target_netns,
        sample_every: cfg.sample_every,
        slots_per_cpu: cfg.slots_per_cpu,
        btf: cfg.btf.clone(),
        filter: cfg.filter.clone(),
        self_traffic,
    };
    for spec in &cfg.probes {
        (spec.check)(&probe_cfg)?;
    }
    let mut transport =
        UdpTransport::connect(cfg.sink, cfg.max_payload, cfg.batch_send).map_err(|source| {
            AgentError::Socket {
                sink: cfg.sink,
                source,
            }
        })?;
    if let Some(local) = cfg.copy_to {
        transport = transport
            .with_copy_to(local)
            .map_err(|source| AgentError::Socket {
                sink: local,
                source,
            })?;
    }
    let max_payload = transport.max_payload();
    let (mut clock, local) = AgentClock::start(&cfg.clock).map_err(|source| AgentError::Clock {
        spec: Box::new(cfg.clock.choice.clone()),
        source,
    })?;
    let mut pipeline = Pipeline::new(&cfg.identity, transport, max_payload, cfg.flush_after);
    if let Some(k) = &cfg.keys {
        pipeline = pipeline.with_keys(k.datagram.clone(), k.ack.clone());
    }
    let pipeline = RefCell::new(pipeline);
    wait_for_lock(
        &mut clock,
        &mut pipeline.borrow_mut(),
        cfg.clock_lock_timeout,
        stop,
    );

    // One BPF object per probe, alive as long as the probes borrowing them.
    let mut objects: Vec<MaybeUninit<OpenObject>> =
        cfg.probes.iter().map(|_| MaybeUninit::uninit()).collect();
    let mut probes = Vec::with_capacity(cfg.probes.len());
    for (spec, object) in cfg.probes.iter().zip(objects.iter_mut()) {
        probes.push((spec.open)(object, &probe_cfg)?);
    }
    // Attach only once every probe loaded: a load error attaches nothing.
    // Dropping `probes` (also on error) detaches what was attached.
    for probe in &mut probes {
        probe.attach()?;
        let prog_id = probe
            .programs()
            .first()
            .and_then(|fd| bpf_prog_info(*fd))
            .map_or(0, |i| i.id);
        tracing::info!(
            prog_id,
            sink = %cfg.sink, cgroup = %cfg.cgroup.display(), netns = target_netns,
            sample_every = cfg.sample_every, max_payload, host = %cfg.identity.hostname,
            agent_id = format_args!("{:016x}", cfg.identity.agent_id),
            incarnation = format_args!("{:016x}", cfg.identity.incarnation),
            authenticated = cfg.keys.is_some(),
            "{} probe attached", probe.name()
        );
    }

    // Metrics beside the trace: after the probes, so a probe error
    // attaches nothing; dropped (detached) before the object.
    let mut metrics_object = MaybeUninit::uninit();
    let mut metrics = match &cfg.metrics {
        Some(m) => Some(metrics_only::start_metrics(
            &mut metrics_object,
            m,
            &metrics_only::MetricsSetup {
                target_netns,
                sample_every: cfg.sample_every,
                filter: &cfg.filter,
                self_traffic: &probe_cfg.self_traffic,
                cgroup: &cfg.cgroup,
                btf: &cfg.btf,
                identity: &cfg.identity,
            },
        )?),
        None => None,
    };

    // CPU events in the trace while the CPU accounting runs: the first
    // interval starts when the accounting did.
    let mut cpu_sampler = metrics
        .as_ref()
        .and_then(|m| m.cpu_started())
        .map(|started| {
            let now = Instant::now();
            let since = now.duration_since(started).as_nanos() as u64;
            CpuSampler::new(CPU_EVENT_PERIOD, now, mono_now_ns().saturating_sub(since))
        });

    let mut p = pipeline.into_inner();
    let mut stamper = Stamper::new(local, clock.converter());
    let mut last_state = stamper.state();
    p.set_clock(clock.source(), last_state);
    let mut last_stats = Instant::now();
    let mut last_counters = Instant::now();
    let mut last_runs = Instant::now();
    let doorbell_maps = probes
        .iter()
        .map(|p| p.doorbell())
        .collect::<Result<Vec<_>, _>>()?;
    let doorbells = doorbell_ring(&doorbell_maps);
    if let Some(prio) = cfg.realtime {
        set_realtime(prio);
    }
    let mut wait = cfg.poll_interval;
    let mut last_drain = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        wait_or_doorbell(doorbells.as_ref(), wait, stop);
        let started = Instant::now();
        snapshot_clock(&clock, &mut stamper, &mut p, &mut last_state);
        let backlog = drain(&mut probes, &mut p, &mut stamper);
        wait = next_poll(
            backlog.unwrap_or(0),
            started.duration_since(last_drain),
            cfg.slots_per_cpu,
            cfg.poll_interval,
        );
        last_drain = started;
        let now = Instant::now();
        // Clock events carry their global stamps already (taken when the
        // clock made them), so order within a datagram is harmless.
        let clock_events = clock.drain_events();
        for ev in &clock_events {
            p.push_clock(ev);
        }
        p.stats.clock = clock.counters();
        // Losses need not be reported faster.
        let counters_due = now.duration_since(last_counters) >= COUNTER_PERIOD;
        if counters_due {
            let runs_due = now.duration_since(last_runs) >= RUNS_PERIOD;
            update_counters(&probes, &mut p, runs_due);
            last_counters = now;
            if runs_due {
                last_runs = now;
            }
        }
        if let (Some(sampler), Some(m)) = (&mut cpu_sampler, &metrics) {
            if sampler.due(now) {
                push_cpu_events(sampler, m, &mut stamper, &mut p, now);
            }
        }
        if let Some(m) = &mut metrics {
            m.publish(counters_due.then_some(&p.stats), &clock_events);
        }
        p.tick(now);
        if let Some(iv) = cfg.stats_interval {
            if now.duration_since(last_stats) >= iv {
                print_stats(&p.stats, cfg.json, false);
                last_stats = now;
            }
        }
    }

    // Detach first so no new events arrive, then drain what is left.
    for probe in &mut probes {
        probe.detach();
    }
    snapshot_clock(&clock, &mut stamper, &mut p, &mut last_state);
    drain(&mut probes, &mut p, &mut stamper);
    update_counters(&probes, &mut p, true);
    for ev in clock.drain_events() {
        p.push_clock(&ev);
    }
    p.stats.clock = clock.counters();
    // The last, partial interval of CPU time.
    if let (Some(sampler), Some(m)) = (&mut cpu_sampler, &metrics) {
        push_cpu_events(sampler, m, &mut stamper, &mut p, Instant::now());
    }
    p.flush();
    stamper.flush();
    // UDP to a dead sink "succeeds": only the sink's acknowledgement says
    // what reached a file. Give it a moment to confirm the last events.
    if !p.wait_for_acks(cfg.ack_wait) && p.stats.acks > 0 {
        tracing::warn!(
            unconfirmed = p.stats.events_unconfirmed,
            "the sink did not confirm every event before the agent stopped"
        );
    }
    let stats = p.stats.clone();
    for probe in &probes {
        tracing::info!(
            events = stats.events(),
            datagrams = stats.datagrams,
            "{} probe detached",
            probe.name()
        );
    }
    Ok(stats)
}

/// This host's CLOCK_MONOTONIC now, ns (the clock BPF stamps with).
fn mono_now_ns() -> u64 {
    clocksync::bracket::now_ns(clocksync::ClockId::Monotonic).unwrap_or(0)
}

/// One CPU event per CPU for the time since the last ones, stamped on
/// the global axis like every other event.
fn push_cpu_events(
    sampler: &mut CpuSampler,
    m: &crate::metrics::MetricsRuntime<'_>,
    stamper: &mut Stamper,
    p: &mut Pipeline<UdpTransport>,
    now: Instant,
) {
    let Some(per_cpu) = m.cpu_totals() else {
        return;
    };
    let raw = mono_now_ns();
    let (mono_ns, global_ns) = stamper.stamp_mono(raw);
    for mut ev in sampler.sample(now, raw, &per_cpu) {
        (ev.mono_ns, ev.global_ns) = (mono_ns, global_ns);
        p.push_cpu(&ev);
    }
}

/// The table of nettrace's own endpoints, local ones told by the traced
/// namespace (with `--all-netns`, by the agent's own).
fn self_traffic_of(
    netns: &NetnsFilter,
    endpoints: &[SocketAddr],
) -> Result<SelfTraffic, AgentError> {
    let netns = match netns {
        NetnsFilter::Path(p) => Some(p.as_path()),
        NetnsFilter::Own | NetnsFilter::All => None,
    };
    let t = SelfTraffic::in_netns(endpoints, netns).map_err(|source| AgentError::Netns {
        path: netns.map_or_else(|| "/proc/self/ns/net".into(), |p| p.to_path_buf()),
        source,
    })?;
    if t.is_empty() {
        tracing::info!("tracing nettrace's own traffic too (--trace-self)");
    } else {
        tracing::info!(endpoints = %t, "not tracing nettrace's own traffic (--trace-self traces it)");
    }
    Ok(t)
}

/// Give the clock up to `timeout` to lock before tracing starts, so the
/// first events are already on the global axis (events before a lock are
/// converted with this host's own TAI and flagged UNLOCKED).
fn wait_for_lock(
    clock: &mut AgentClock,
    p: &mut Pipeline<UdpTransport>,
    timeout: Duration,
    stop: &AtomicBool,
) {
    let start = Instant::now();
    loop {
        for ev in clock.drain_events() {
            p.push_clock(&ev);
        }
        p.stats.clock = clock.counters();
        let state = clock.converter().state;
        if matches!(state, ClockState::Locked | ClockState::LockedStable) {
            tracing::info!(state = %state.name(), source = %clock.source().name(),
                waited_ms = start.elapsed().as_millis() as u64, "clock locked");
            return;
        }
        if start.elapsed() >= timeout || stop.load(Ordering::Relaxed) {
            if !timeout.is_zero() {
                tracing::warn!(source = %clock.source().name(), timeout_s = timeout.as_secs_f64(),
                    "clock not locked yet; tracing starts anyway, events are marked UNLOCKED until it locks");
            }
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
