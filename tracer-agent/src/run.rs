//! The agent's main loop: preflight, load and attach the selected probes,
//! drain their rings on a short timer, convert, batch, send, report, detach.

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use libbpf_rs::OpenObject;

use crate::clock::{AgentClock, ClockConfig, ClockSetupError};
use crate::filter::FlowFilter;
use crate::pipeline::{AgentIdentity, Pipeline};
use crate::preflight::{self, PreflightError};
use crate::probes::{
    Collector, Drained, Probe, ProbeConfig, ProbeCounters, ProbeError, ProbeEvent, ProbeSpec,
    RecordError,
};
use crate::self_traffic::SelfTraffic;
use crate::sender::{BatchSend, UdpTransport};
use crate::stamp::Stamper;
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
    /// Probes to load, in load order (see [`crate::probes::select_probes`]).
    pub probes: Vec<&'static ProbeSpec>,
    /// cgroup v2 directory to attach to.
    pub cgroup: PathBuf,
    /// Namespace filter.
    pub netns: NetnsFilter,
    /// Tag one sendmsg in N.
    pub sample_every: u32,
    /// `--filter`: flows to record (empty: all), evaluated in BPF.
    pub filter: FlowFilter,
    /// The UDP endpoints of nettrace's own traffic, whose flows the probes
    /// exclude ([`crate::self_traffic::agent_endpoints`]); empty with
    /// `--trace-self`.
    pub self_endpoints: Vec<SocketAddr>,
    /// Print stats this often (None: only at exit).
    pub stats_interval: Option<Duration>,
    /// Stats as JSON lines.
    pub json: bool,
    /// Identity in datagram headers.
    pub identity: AgentIdentity,
    /// Datagram payload size; None derives it from the route MTU.
    pub max_payload: Option<usize>,
    /// How datagrams reach the kernel (`--batch-send`).
    pub batch_send: BatchSend,
    /// Longest an event waits in a partial datagram.
    pub flush_after: Duration,
    /// Drain period of the probe's ring.
    pub poll_interval: Duration,
    /// `--realtime`: SCHED_FIFO priority of the drain loop.
    pub realtime: Option<u32>,
    /// Record slots per CPU in the probe's ring (power of two).
    pub slots_per_cpu: u32,
    /// Kernel BTF to check for BPF TX timestamping.
    pub btf: PathBuf,
    /// The global clock.
    pub clock: ClockConfig,
    /// How long to wait for the clock to lock before attaching the probes.
    pub clock_lock_timeout: Duration,
    /// Keys from `--key-file`: datagrams are tagged, acknowledgements checked.
    pub keys: Option<AgentKeys>,
    /// At exit, how long to wait for the sink to confirm the last events.
    pub ack_wait: Duration,
}

/// The keys the agent derives from the deployment's key file.
#[derive(Debug, Clone)]
pub struct AgentKeys {
    /// Tags datagrams.
    pub datagram: tracer_auth::MacKey,
    /// Checks the sink's acknowledgements.
    pub ack: tracer_auth::MacKey,
}

impl AgentKeys {
    /// The agent's keys (the clock exchange's is taken separately).
    pub fn from_shared(key: &tracer_auth::SharedKey) -> Self {
        AgentKeys {
            datagram: key.mac_key(tracer_auth::Purpose::Datagram),
            ack: key.mac_key(tracer_auth::Purpose::Ack),
        }
    }
}

/// Why the agent stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A precondition failed.
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    /// A probe could not be set up.
    #[error(transparent)]
    Probe(#[from] ProbeError),
    /// No probe was selected.
    #[error("no probe selected: pass --probes with at least one probe")]
    NoProbes,
    /// The clock source could not be opened.
    #[error("setting up the clock --clock {spec}")]
    Clock {
        /// The --clock choice.
        spec: Box<clocksync::SourceSpec>,
        /// Why.
        source: ClockSetupError,
    },
    /// The network namespace to trace could not be read.
    #[error("reading network namespace {path}")]
    Netns {
        /// The namespace file (e.g. /proc/self/ns/net).
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The namespace to trace is not a network namespace.
    #[error(transparent)]
    NetnsFile(#[from] preflight::NetnsFileError),
    /// The UDP socket to the sink could not be opened.
    #[error("opening a UDP socket to the sink {sink}")]
    Socket {
        /// The sink's address.
        sink: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Run until `stop` is set; returns the final counters. BPF links are
/// detached before returning, also on error.
pub fn run(cfg: &AgentConfig, stop: &AtomicBool) -> Result<AgentStats, AgentError> {
    if cfg.probes.is_empty() {
        return Err(AgentError::NoProbes);
    }
    preflight::check_privileges()?;
    preflight::check_cgroup(&cfg.cgroup)?;
    let netns_path = match &cfg.netns {
        NetnsFilter::All => None,
        NetnsFilter::Own => Some(PathBuf::from("/proc/self/ns/net")),
        NetnsFilter::Path(p) => Some(p.clone()),
    };
    let target_netns = match netns_path {
        None => 0,
        Some(path) => preflight::netns_inode(&path)?,
    };
    let self_traffic = self_traffic_of(cfg)?;
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
    let transport =
        UdpTransport::connect(cfg.sink, cfg.max_payload, cfg.batch_send).map_err(|source| {
            AgentError::Socket {
                sink: cfg.sink,
                source,
            }
        })?;
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

    let mut p = pipeline.into_inner();
    let mut stamper = Stamper::new(local, clock.converter());
    let mut last_state = stamper.state();
    p.set_clock(clock.source(), last_state);
    let mut last_stats = Instant::now();
    let mut last_counters = Instant::now();
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
        for ev in clock.drain_events() {
            p.push_clock(&ev);
        }
        p.stats.clock = clock.counters();
        // Counters cost a few syscalls; losses need not be reported faster.
        if now.duration_since(last_counters) >= COUNTER_PERIOD {
            update_counters(&probes, &mut p);
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
    for probe in &mut probes {
        probe.detach();
    }
    snapshot_clock(&clock, &mut stamper, &mut p, &mut last_state);
    drain(&mut probes, &mut p, &mut stamper);
    update_counters(&probes, &mut p);
    for ev in clock.drain_events() {
        p.push_clock(&ev);
    }
    p.stats.clock = clock.counters();
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

/// The table of nettrace's own endpoints, local ones told by the traced
/// namespace (with `--all-netns`, by the agent's own).
fn self_traffic_of(cfg: &AgentConfig) -> Result<SelfTraffic, AgentError> {
    let netns = match &cfg.netns {
        NetnsFilter::Path(p) => Some(p.as_path()),
        NetnsFilter::Own | NetnsFilter::All => None,
    };
    let t =
        SelfTraffic::in_netns(&cfg.self_endpoints, netns).map_err(|source| AgentError::Netns {
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

/// Shortest wait between drains.
const MIN_POLL: Duration = Duration::from_millis(1);

/// How long to sleep before the next drain: long enough to batch, short
/// enough that the fullest CPU's ring, filling as fast as it did since the
/// last drain (`backlog` records in `elapsed`), reaches only a quarter of
/// its `slots` by then; `poll` (--poll-ms) while it fills slower. A burst
/// that starts while the agent sleeps can still fill the rest of the ring.
fn next_poll(backlog: u64, elapsed: Duration, slots: u32, poll: Duration) -> Duration {
    let room = u128::from(slots / 4).max(1);
    let backlog = u128::from(backlog);
    if backlog == 0 {
        return poll;
    }
    // room / (backlog / elapsed), in ns, without floats.
    let ns = room * elapsed.as_nanos() / backlog;
    let wait = Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX));
    wait.clamp(MIN_POLL.min(poll), poll)
}

/// Make this thread (the drain loop; the clock's threads keep their
/// policy) SCHED_FIFO at `prio`; a refusal is a warning, not an error.
fn set_realtime(prio: u32) {
    let param = libc::sched_param {
        sched_priority: prio as libc::c_int,
    };
    // SAFETY: sched_setscheduler on the calling thread (0) with a valid param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), prio,
            "cannot run the drain loop as SCHED_FIFO (--realtime needs CAP_SYS_NICE): going on at normal priority");
    } else {
        tracing::info!(prio, "drain loop runs as SCHED_FIFO");
    }
}

/// One epoll set over the probes' doorbells; None (the agent then only
/// sleeps) if libbpf cannot build it.
fn doorbell_ring(maps: &[libbpf_rs::MapHandle]) -> Option<libbpf_rs::RingBuffer<'_>> {
    let mut b = libbpf_rs::RingBufferBuilder::new();
    for m in maps {
        // The record only says "drain now".
        if let Err(e) = b.add(m, |_| 0) {
            tracing::warn!(error = %e, "cannot wait on the probes' doorbells: draining on the timer only");
            return None;
        }
    }
    b.build()
        .map_err(|e| tracing::warn!(error = %e, "cannot wait on the probes' doorbells: draining on the timer only"))
        .ok()
}

/// Wait `d`, returning early when a probe rings its doorbell (a quarter
/// ring filled on some CPU) or `stop` is set.
fn wait_or_doorbell(rb: Option<&libbpf_rs::RingBuffer<'_>>, d: Duration, stop: &AtomicBool) {
    let Some(rb) = rb else {
        return sleep_unless_stopped(d, stop);
    };
    let end = Instant::now() + d;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= end {
            return;
        }
        // Slices, so that `stop` is seen within 100 ms.
        let rang = rb.poll_raw((end - now).min(Duration::from_millis(100)));
        if rang > 0 {
            return;
        }
        if rang < 0 && rang != -libc::EINTR {
            // Not expected; never spin on it.
            return sleep_unless_stopped(end.saturating_duration_since(Instant::now()), stop);
        }
    }
}

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

/// Take this drain's clock snapshot and advertise its state (logged when
/// it changes) on the datagrams its events go in.
fn snapshot_clock(
    clock: &AgentClock,
    stamper: &mut Stamper,
    p: &mut Pipeline<UdpTransport>,
    last_state: &mut ClockState,
) {
    stamper.snapshot(clock.converter());
    let state = stamper.state();
    if state != *last_state {
        tracing::info!(state = %state.name(), source = %clock.source().name(), "clock state changed");
        *last_state = state;
    }
    p.set_clock(clock.source(), state);
}

/// The pipeline seen by a probe's drain: each event stamped once, with
/// this drain's snapshot, then batched; bad records counted.
struct ToPipeline<'a> {
    p: &'a mut Pipeline<UdpTransport>,
    stamper: &'a mut Stamper,
}

impl Collector for ToPipeline<'_> {
    fn event(&mut self, mut ev: ProbeEvent<'_>) {
        self.stamper.stamp(&mut ev);
        match ev {
            ProbeEvent::Tx(ev) => self.p.push(ev),
            ProbeEvent::Rx(ev) => self.p.push_rx(ev),
            ProbeEvent::Drop(ev) => {
                self.p.stats.drop_events += 1;
                self.p.push_event(ev);
            }
            ProbeEvent::Tcp(ev) => {
                self.p.stats.tcp_events += 1;
                self.p.push_event(ev);
            }
        }
    }

    fn bad_record(&mut self, probe: &'static str, err: RecordError) {
        if self.p.stats.bad_records == 0 {
            tracing::warn!(probe, error = %err, "dropped a bad probe record (counted as lost)");
        }
        self.p.stats.bad_records += 1;
    }
}

/// Move every record the probes wrote into the pipeline; returns the
/// largest backlog one CPU of one probe had (None if no ring was read).
fn drain(
    probes: &mut [Box<dyn Probe + '_>],
    p: &mut Pipeline<UdpTransport>,
    stamper: &mut Stamper,
) -> Option<u64> {
    let mut backlog = None;
    for probe in probes.iter_mut() {
        match probe.drain(&mut ToPipeline { p, stamper }) {
            Ok(Drained {
                overruns,
                max_backlog,
                ..
            }) => {
                p.stats.ring_overruns += overruns;
                backlog = Some(backlog.unwrap_or(0).max(max_backlog));
            }
            Err(e) => {
                tracing::warn!(probe = probe.name(), error = %with_causes(e), "reading the probe's ring");
            }
        }
    }
    backlog
}

/// A probe error and its causes on one line, for a warning.
fn with_causes(e: ProbeError) -> String {
    format!("{:#}", anyhow::Error::from(e))
}

/// Refresh the BPF-side counters and run statistics (summed over probes)
/// and the loss total sent to the sink.
fn update_counters(probes: &[Box<dyn Probe + '_>], p: &mut Pipeline<UdpTransport>) {
    let mut sum = ProbeCounters::default();
    let mut ok = true;
    for probe in probes {
        match probe.counters() {
            Ok(c) => sum += c,
            Err(e) => {
                ok = false;
                tracing::warn!(probe = probe.name(), error = %with_causes(e), "reading BPF counters");
            }
        }
    }
    // A failed read keeps the last good totals rather than going back.
    if ok {
        p.stats.bpf = sum;
    }
    p.set_lost_events(p.stats.bpf.ringbuf_lost + p.stats.ring_overruns + p.stats.bad_records);
    let infos: Vec<_> = probes
        .iter()
        .flat_map(|probe| probe.programs())
        .filter_map(bpf_prog_info)
        .collect();
    p.stats.set_bpf_runs(&infos);
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

#[cfg(test)]
mod tests {

    #[test]
    fn the_drain_period_follows_the_fill_rate() {
        let poll = Duration::from_millis(100);
        let ms = Duration::from_millis;
        // Idle or slow: the configured period.
        assert_eq!(next_poll(0, ms(100), 32768, poll), poll);
        assert_eq!(next_poll(100, ms(100), 32768, poll), poll);
        // 8192 records (a quarter) in 100 ms: come back in 100 ms.
        assert_eq!(next_poll(8192, ms(100), 32768, poll), poll);
        // 32768 in 100 ms (327 k/s on one CPU): a quarter takes 25 ms.
        assert_eq!(next_poll(32768, ms(100), 32768, poll), ms(25));
        // 1 M/s: 8 ms; faster still: never below 1 ms.
        assert_eq!(
            next_poll(10_000, ms(10), 32768, poll),
            Duration::from_micros(8192)
        );
        assert_eq!(next_poll(1 << 20, ms(1), 32768, poll), MIN_POLL);
        // A --poll-ms under the floor is kept.
        assert_eq!(next_poll(1 << 20, ms(1), 64, ms(1) / 2), ms(1) / 2);
    }

    use super::*;
    use std::error::Error;

    /// No message in the chain repeats its cause's text: printed with
    /// `{:#}`, every cause appears once.
    fn assert_causes_once(e: &(dyn Error + 'static)) {
        let mut cur = e;
        while let Some(next) = cur.source() {
            let (msg, cause) = (cur.to_string(), next.to_string());
            assert!(
                !msg.contains(&cause),
                "{msg:?} repeats its source {cause:?}"
            );
            cur = next;
        }
    }

    fn io_err() -> std::io::Error {
        std::io::Error::from_raw_os_error(libc::ENOENT)
    }

    #[test]
    fn agent_errors_print_each_cause_once() {
        let errors: Vec<AgentError> = vec![
            AgentError::Netns {
                path: "/run/netns/x".into(),
                source: io_err(),
            },
            AgentError::Socket {
                sink: "127.0.0.1:9".parse().unwrap(),
                source: io_err(),
            },
            AgentError::Probe(ProbeError::Load {
                probe: "tx",
                source: libbpf_rs::Error::from(io_err()),
            }),
            AgentError::Probe(ProbeError::Cgroup {
                path: "/x".into(),
                source: io_err(),
            }),
            AgentError::Probe(ProbeError::Attach {
                probe: "tx",
                path: "/x".into(),
                source: libbpf_rs::Error::from(io_err()),
            }),
            AgentError::Probe(ProbeError::AttachTracepoint {
                probe: "rx",
                program: "rx_copy",
                source: libbpf_rs::Error::from(io_err()),
            }),
            AgentError::Probe(ProbeError::Map {
                probe: "tx",
                map: "slots",
                source: libbpf_rs::Error::from(io_err()),
            }),
            AgentError::Preflight(
                preflight::check_tx_timestamping("/nonexistent/btf".as_ref()).unwrap_err(),
            ),
            AgentError::Preflight(preflight::check_cgroup("/nonexistent/cg".as_ref()).unwrap_err()),
        ];
        for e in errors {
            assert_causes_once(&e);
            // The OS reason is shown exactly once, wherever it lives, in
            // the form main prints.
            let shown = format!("{:#}", anyhow::Error::from(e));
            assert_eq!(
                shown.matches("No such file or directory").count(),
                1,
                "{shown}"
            );
        }
    }
}
