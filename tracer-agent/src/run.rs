//! The agent's main loop: preflight, load and attach, drain the ring
//! buffer on a short timer, convert, batch, send, report, detach.

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::clock::{AgentClock, ClockConfig};
use crate::pipeline::{AgentIdentity, Pipeline};
use crate::preflight::{self, PreflightError};
use crate::probes::slots::Drained;
use crate::probes::tx::{ProbeError, TxProbe, TxProbeConfig, TxRecord};
use crate::sender::UdpTransport;
use crate::stats::{bpf_prog_info, AgentStats};
use tracer_codec::ClockState;

/// How often BPF counters (losses) are read.
const COUNTER_PERIOD: Duration = Duration::from_millis(100);

/// Which network namespaces to trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetnsFilter {
    /// The agent's own namespace (/proc/self/ns/net).
    Own,
    /// The namespace of this file (e.g. /run/netns/NAME).
    Path(PathBuf),
    /// Every namespace.
    All,
}

/// Everything `run` needs.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Sink address.
    pub sink: SocketAddr,
    /// cgroup v2 directory to attach to.
    pub cgroup: PathBuf,
    /// Namespace filter.
    pub netns: NetnsFilter,
    /// Tag one sendmsg in N.
    pub sample_every: u32,
    /// Print stats this often (None: only at exit).
    pub stats_interval: Option<Duration>,
    /// Stats as JSON lines.
    pub json: bool,
    /// Identity in datagram headers.
    pub identity: AgentIdentity,
    /// Datagram payload size; None derives it from the route MTU.
    pub max_payload: Option<usize>,
    /// Longest an event waits in a partial datagram.
    pub flush_after: Duration,
    /// Drain period of the probe's ring.
    pub poll_interval: Duration,
    /// Record slots per CPU in the probe's ring (power of two).
    pub slots_per_cpu: u32,
    /// Kernel BTF to check for BPF TX timestamping.
    pub btf: PathBuf,
    /// The global clock.
    pub clock: ClockConfig,
    /// How long to wait for the clock to lock before attaching the probes.
    pub clock_lock_timeout: Duration,
}

/// Why the agent stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A precondition failed.
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    /// The probe could not be set up.
    #[error(transparent)]
    Probe(#[from] ProbeError),
    /// The clock source could not be opened.
    #[error("setting up the clock ({what}): {source}")]
    Clock {
        /// The --clock choice.
        what: String,
        /// Why.
        source: clocksync::ClockError,
    },
    /// Socket or file I/O.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> AgentError {
    let what = what.into();
    move |source| AgentError::Io { what, source }
}

/// Run until `stop` is set; returns the final counters. BPF links are
/// detached before returning, also on error.
pub fn run(cfg: &AgentConfig, stop: &AtomicBool) -> Result<AgentStats, AgentError> {
    preflight::check_privileges()?;
    preflight::check_cgroup(&cfg.cgroup)?;
    preflight::check_tx_timestamping(&cfg.btf)?;
    let target_netns = match &cfg.netns {
        NetnsFilter::All => 0,
        NetnsFilter::Own => preflight::netns_inode("/proc/self/ns/net".as_ref())
            .map_err(io("reading /proc/self/ns/net"))?,
        NetnsFilter::Path(p) => preflight::netns_inode(p)
            .map_err(io(format!("reading network namespace {}", p.display())))?,
    };
    let transport = UdpTransport::connect(cfg.sink, cfg.max_payload)
        .map_err(io(format!("opening a UDP socket to the sink {}", cfg.sink)))?;
    let max_payload = transport.max_payload();
    let mut clock = AgentClock::start(&cfg.clock).map_err(|source| AgentError::Clock {
        what: format!("{:?}", cfg.clock.choice),
        source,
    })?;
    let pipeline = RefCell::new(Pipeline::new(
        &cfg.identity,
        transport,
        max_payload,
        cfg.flush_after,
    ));
    wait_for_lock(
        &mut clock,
        &mut pipeline.borrow_mut(),
        cfg.clock_lock_timeout,
        stop,
    );

    let mut object = MaybeUninit::uninit();
    let mut probe = TxProbe::load(
        &mut object,
        &TxProbeConfig {
            cgroup: cfg.cgroup.clone(),
            target_netns,
            sample_every: cfg.sample_every,
            slots_per_cpu: cfg.slots_per_cpu,
        },
    )?;
    let prog_id = bpf_prog_info(probe.prog_fd()).map_or(0, |i| i.id);
    tracing::info!(
        prog_id,
        sink = %cfg.sink, cgroup = %cfg.cgroup.display(), netns = target_netns,
        sample_every = cfg.sample_every, max_payload, host = %cfg.identity.hostname,
        agent_id = format_args!("{:016x}", cfg.identity.agent_id),
        "tx probe attached"
    );

    let mut p = pipeline.into_inner();
    let mut conv = clock.converter();
    p.set_clock(clock.source(), conv.state);
    let mut last_stats = Instant::now();
    let mut last_counters = Instant::now();
    let mut last_state = conv.state;
    let mut wait = cfg.poll_interval;
    while !stop.load(Ordering::Relaxed) {
        sleep_unless_stopped(wait, stop);
        // A backlog past a quarter of the ring: come back soon.
        wait = match drain(&mut probe, &mut p, &conv) {
            Some(d) if d.max_backlog > u64::from(cfg.slots_per_cpu / 4) => BUSY_POLL,
            _ => cfg.poll_interval,
        };
        let now = Instant::now();
        // Events drained above used the previous snapshot; clock events
        // carry their own stamps, so order within a datagram is harmless.
        for ev in clock.drain_events() {
            p.push_clock(&ev);
        }
        conv = clock.converter();
        if conv.state != last_state {
            tracing::info!(state = %conv.state.name(), source = %clock.source().name(), "clock state changed");
            last_state = conv.state;
        }
        p.set_clock(clock.source(), conv.state);
        // Counters cost two syscalls; losses need not be reported faster.
        if now.duration_since(last_counters) >= COUNTER_PERIOD {
            update_counters(&probe, &mut p);
            last_counters = now;
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
    probe.detach();
    drain(&mut probe, &mut p, &conv);
    update_counters(&probe, &mut p);
    p.flush();
    let stats = p.stats.clone();
    tracing::info!(
        events = stats.events(),
        datagrams = stats.datagrams,
        "tx probe detached"
    );
    Ok(stats)
}

/// Poll period while the ring is filling fast.
const BUSY_POLL: Duration = Duration::from_millis(5);

/// Sleep `d`, in slices, returning early once `stop` is set.
fn sleep_unless_stopped(d: Duration, stop: &AtomicBool) {
    let end = Instant::now() + d;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= end {
            return;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(100)));
    }
}

/// Move every record the probe wrote into the pipeline.
fn drain(
    probe: &mut TxProbe<'_>,
    p: &mut Pipeline<UdpTransport>,
    conv: &crate::clock::Converter,
) -> Option<Drained> {
    let res = probe.drain(|data| match TxRecord::decode(data) {
        Ok(rec) => p.push(&rec.to_event(conv.to_global_ns(rec.mono_ns()))),
        Err(e) => {
            if p.stats.bad_records == 0 {
                tracing::warn!(error = %e, "undecodable probe record");
            }
            p.stats.bad_records += 1;
        }
    });
    match res {
        Ok(d) => {
            p.stats.ring_overruns += d.overruns;
            Some(d)
        }
        Err(e) => {
            tracing::warn!(error = %e, "reading the probe's ring");
            None
        }
    }
}

/// Refresh the BPF-side counters and the loss total sent to the sink.
fn update_counters(probe: &TxProbe<'_>, p: &mut Pipeline<UdpTransport>) {
    match probe.counters() {
        Ok(c) => p.stats.bpf = c,
        Err(e) => tracing::warn!(error = %e, "reading BPF counters"),
    }
    p.set_lost_events(p.stats.bpf.ringbuf_lost + p.stats.ring_overruns + p.stats.bad_records);
    if let Some(info) = bpf_prog_info(probe.prog_fd()) {
        if info.run_cnt > 0 {
            p.stats.bpf_runs = Some(info.run_cnt);
            p.stats.bpf_ns_per_run = Some(info.run_time_ns as f64 / info.run_cnt as f64);
        }
    }
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

/// Print counters to stdout.
pub fn print_stats(stats: &AgentStats, json: bool, last: bool) {
    if json {
        let v = serde_json::json!({ "final": last, "stats": stats });
        println!("{v}");
    } else {
        let prefix = if last { "final " } else { "" };
        println!("{prefix}tracer-agent statistics");
        print!("{}", stats.table());
    }
}

/// Parse /proc/sys/kernel/random/boot_id into 16 bytes.
pub fn boot_id() -> [u8; 16] {
    let s = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let hex: Vec<u8> = s.trim().bytes().filter(u8::is_ascii_hexdigit).collect();
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).take(16).enumerate() {
        let digits = std::str::from_utf8(pair).unwrap_or("0");
        out[i] = u8::from_str_radix(digits, 16).unwrap_or(0);
    }
    out
}

/// This host's name.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}
