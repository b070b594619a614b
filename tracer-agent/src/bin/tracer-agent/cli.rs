//! The agent's command line: every option, its help and its parser.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use clocksync::{MaxChange, OscillatorSpec, ServoKind, SourceSpec};
use tracer_agent::filter::FlowFilter;
use tracer_agent::metrics::MetricParts;
use tracer_agent::probes::{known_probe_names, probe_by_name, probes_help, ProbeSpec};
use tracer_agent::sender::BatchSend;

/// nettrace agent: capture kernel network events with eBPF probes and send
/// them to a tracer-sink (--sink), or write them to pcapng files itself
/// (--write: one host, one program), every stamp converted to the global
/// time axis.
///
/// The tx probe turns on BPF TX timestamping (Linux >= 6.15) for the
/// established TCP sockets of this network namespace under --cgroup and
/// reports, for every tagged skb, when sendmsg queued it (SENDMSG), when it
/// entered the qdisc (SCHED), when the driver sent it (SND_SW / SND_HW) and
/// when the peer acknowledged it (ACK).
///
/// The rx probe follows every received skb of this network namespace
/// through five tracepoints (STACK_ENTRY, TCP_INPUT, DATA_READY, COPY,
/// READ_DONE) with its TCP sequence range and its own RX stamp. The kernel
/// stamps received skbs only while some socket asks for it, so while the rx
/// probe runs the agent holds a socket with SO_TIMESTAMPING
/// SOF_TIMESTAMPING_RX_SOFTWARE (this turns software RX stamping on for the
/// whole host, as any timestamping application does).
#[derive(Debug, Parser)]
#[command(
    version,
    group = clap::ArgGroup::new("output").required(true).multiple(true)
        .args(["sink", "write", "live_iface", "metrics"]),
    after_help = "\
Examples:
  tracer-agent --write traces/ --probes tx,rx,drops,tcp   # one host, no sink
  tracer-agent --live-iface nettrace0    # then: wireshark -k -i nettrace0
  tracer-agent --metrics 0.0.0.0:9431    # always-on metrics for Prometheus, no trace
  tracer-agent --sink 10.0.0.2:7420 --probes tx
  tracer-agent --sink 10.0.0.2:7420 --probes tx --sample-every 100 --stats-interval 5
  tracer-agent --sink 10.0.0.2:7420 --probes tx,rx
  nsenter --net=/run/netns/client tracer-agent --sink 10.0.0.2:7420 --hostname client
  tracer-agent --sink 10.0.0.2:7420 --clock sink    # follow the sink's clock
  tracer-agent --sink 10.0.0.2:7420 --clock sink --simulate-oscillator 3000000,50
      # testing: this host's clock 3 ms ahead and 50 ppm fast; the sync must learn it

(`ip netns exec` remounts /sys and hides the cgroup v2 mount: use nsenter.)

Needs root (CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN). Ctrl-C detaches the probes,
sends what is queued and prints the final counters."
)]
pub(crate) struct Cli {
    /// Address of the tracer-sink (HOST:PORT, UDP, port 1 to 65535): an IP
    /// address (`[v6]:PORT` for IPv6) or a host name, resolved once at
    /// start (the first address it resolves to is used).
    #[arg(long, value_name = "HOST:PORT", value_parser = tracer_cli::host_port)]
    pub(crate) sink: Option<SocketAddr>,

    /// Write the trace to pcapng files in DIR (created if missing), alone
    /// or beside --sink: the agent runs tracer-sink's writer itself, on a
    /// loopback port of its network namespace (which needs its loopback
    /// interface up), with the same files, rotation, reorder window,
    /// statistics and loss accounting as a sink. Beside --sink it gets a
    /// copy of every datagram (unauthenticated: it is this namespace's
    /// loopback); the remote sink's acknowledgements and clock rule. The
    /// options under "Writing files" apply.
    #[arg(long, value_name = "DIR")]
    pub(crate) write: Option<PathBuf>,

    /// Show every event live on a network interface of this name (a TAP
    /// device, e.g. nettrace0), with or without --write and --sink (as
    /// --write does beside it): one Ethernet frame
    /// per event (EtherType 0x88B5) holding the capture record a file
    /// holds, in global-time order a reorder window after the event. Watch
    /// it with `wireshark -k -i nettrace0` (the tracer's dissector
    /// installed), `dumpcap` or `tcpdump`. The probes never trace its
    /// frames. Needs CAP_NET_ADMIN; the interface goes when the agent exits
    /// (also when killed). A reader that falls behind never slows the
    /// agent: frames are dropped and counted (`writer.live` in the stats).
    #[arg(long, value_name = "NAME", value_parser = tracer_cli::iface_name)]
    pub(crate) live_iface: Option<String>,

    /// Serve Prometheus metrics at http://ADDR:PORT/metrics, alone (no
    /// trace: nothing per event leaves the kernel) or beside --sink,
    /// --write or --live-iface. The kernel keeps log2 histograms of RX
    /// latency (since each skb's RX stamp, at netif_receive_skb,
    /// tcp_probe and skb_copy_datagram_iovec) and of TX stage latency
    /// (SENDMSG->SCHED->SND_SW->ACK, BPF TX timestamping), and counts drops
    /// by reason, TCP retransmissions and resets, receive queue full and
    /// socket memory limit events; the agent adds the network stack's CPU
    /// time, the clock's state and its own costs. Scrape it with a
    /// Prometheus job such as
    /// `- job_name: nettrace` / `static_configs: [{targets: ["HOST:9431"]}]`;
    /// docs/metrics.md lists every metric, with queries and alert rules.
    /// --netns/--all-netns and --filter apply as they do to tracing.
    #[arg(long, value_name = "ADDR:PORT", value_parser = tracer_cli::host_port)]
    pub(crate) metrics: Option<SocketAddr>,

    #[command(flatten, next_help_heading = "Metrics (with --metrics)")]
    pub(crate) metrics_opts: MetricsArgs,

    #[command(flatten, next_help_heading = "Writing files (with --write)")]
    pub(crate) writer: tracer_sink::WriterArgs,

    #[arg(
        long,
        help = format!("Probes to load, comma separated; known: {}", known_probe_names()),
        value_delimiter = ',',
        default_value = "tx,rx",
        value_name = "NAMES",
        value_parser = probe_by_name,
        long_help = probes_help()
    )]
    pub(crate) probes: Vec<&'static ProbeSpec>,

    /// cgroup v2 directory whose sockets are traced (with its descendants).
    /// Default: the cgroup v2 root (/sys/fs/cgroup, or /sys/fs/cgroup/unified
    /// on a hybrid layout).
    #[arg(long)]
    pub(crate) cgroup: Option<PathBuf>,

    /// Sample one TCP byte range in N, the same way on every host: the
    /// sequence space of each flow is cut into 64 KiB granules and a
    /// granule is sampled iff a hash of (flow, granule) falls under 1/N.
    /// The tx probe tags a sendmsg iff the byte its stamp reports lies in
    /// a sampled granule; the rx probe records a TCP skb iff its range
    /// touches a sampled granule (so a receiver at the same N keeps every
    /// skb that carries a sampled sender's bytes). UDP is not sampled.
    /// 1 traces everything. Stats show the sendmsg calls seen
    /// (`sendmsg_seen`). See docs/reading-a-trace.md#sampling.
    /// [range: 1..=1000000]
    #[arg(long, default_value = "1", value_name = "N", value_parser = tracer_cli::int(1u32, MAX_SAMPLE_EVERY))]
    pub(crate) sample_every: u32,

    #[arg(
        long,
        value_name = "EXPR",
        value_parser = tracer_agent::filter::parse,
        help = "Record only flows matching EXPR (e.g. 'port 5201 and host 10.0.0.2'), filtered in BPF",
        long_help = tracer_agent::filter::HELP
    )]
    pub(crate) filter: Option<FlowFilter>,

    /// Trace nettrace's own traffic too, to debug nettrace itself.
    ///
    /// By default every probe drops nettrace's UDP flows in BPF, before any
    /// output: those to and from the sink (--sink: datagrams and acks) and
    /// its clock responder (the sink's address at --clock-port, default the
    /// sink's port + 1, whatever --clock is; and the responder of `--clock
    /// sink:IP:PORT`), on this host and on the sink's. Where the sink's
    /// address belongs to the traced namespace (or is loopback), these
    /// ports are nettrace's at any of its addresses.
    #[arg(long)]
    pub(crate) trace_self: bool,

    /// Trace the network namespace of this file (e.g. /run/netns/NAME or
    /// /proc/PID/ns/net) instead of the agent's own. Any other file is
    /// refused (the kernel is asked what namespace it is).
    #[arg(long, value_name = "PATH", conflicts_with = "all_netns", value_parser = parse_netns)]
    pub(crate) netns: Option<PathBuf>,

    /// Trace sockets of every network namespace.
    #[arg(long)]
    pub(crate) all_netns: bool,

    /// Name of this host in the trace (pcapng interface name): 1 to 64
    /// bytes of UTF-8 without control characters or bidirectional
    /// formatting characters (U+202A..E, U+2066..9, U+200E/F, U+061C),
    /// which would reorder what Wireshark shows. Default: the kernel
    /// hostname.
    #[arg(long, value_name = "NAME", value_parser = tracer_cli::hostname(tracer_codec::MAX_HOSTNAME_LEN))]
    pub(crate) hostname: Option<String>,

    /// Agent id in the trace (decimal, or hex with 0x). Default: random per
    /// run. [range: 0..=0xffffffffffffffff]
    #[arg(long, value_name = "ID", value_parser = parse_agent_id)]
    pub(crate) agent_id: Option<u64>,

    /// Print counters every SECS seconds; 0 prints them only at exit.
    /// [range: 0 or 0.1..=86400 s]
    #[arg(long, default_value = "0", value_name = "SECS", value_parser = tracer_cli::secs_or_zero(0.1, 86400.0))]
    pub(crate) stats_interval: Duration,

    /// Print counters as JSON lines.
    #[arg(long)]
    pub(crate) json: bool,

    /// UDP payload bytes per datagram. Default: route MTU minus IP/UDP
    /// headers. [range: 256..=65507]
    #[arg(long, value_name = "BYTES", value_parser = tracer_cli::int(MIN_DATAGRAM, MAX_DATAGRAM))]
    pub(crate) max_datagram: Option<u32>,

    /// How datagrams reach the kernel. gso: up to 64 datagrams of
    /// --max-datagram bytes per system call as UDP GSO segments (each
    /// padded to that size; the device cuts them apart, so the wire still
    /// carries --max-datagram byte datagrams); falls back to mmsg where the
    /// kernel or the route refuses it. mmsg: sendmmsg, one system call,
    /// one pass down the stack per datagram. off: one send per datagram.
    #[arg(long, value_enum, default_value_t = BatchSend::Gso, value_name = "MODE")]
    pub(crate) batch_send: BatchSend,

    /// Longest time (ms) an event waits for its datagram to fill.
    /// [range: 1..=10000 ms]
    #[arg(long, default_value = "100", value_name = "MS", value_parser = tracer_cli::millis(1, 10_000))]
    pub(crate) flush_ms: Duration,

    /// Drain period of the probe's ring (ms). The probe never wakes the
    /// agent, to keep the traced path cheap; this bounds the delay of
    /// events. Each drain is a context switch on the traced host: keep it
    /// long (while a ring fills fast the agent drains sooner, often enough
    /// that the ring is no more than a quarter full at the rate it saw,
    /// down to every 1 ms).
    /// [range: 1..=10000 ms]
    #[arg(long, default_value = "100", value_name = "MS", value_parser = tracer_cli::millis(1, 10_000))]
    pub(crate) poll_ms: Duration,

    /// Record slots per CPU in each probe's ring, a power of two (120 bytes
    /// each for tx). The agent reads them every --poll-ms, sooner while they fill
    /// fast; records overwritten before that are counted as lost.
    /// [range: 64..=1048576]
    #[arg(long, default_value = "32768", value_name = "N", value_parser = tracer_cli::power_of_two(64, 1 << 20))]
    pub(crate) ring_slots: u32,

    /// Run the agent's drain loop as a SCHED_FIFO thread of this priority,
    /// as `perf record --realtime` does: on a host whose CPUs are busy, a
    /// doorbell from a filling ring is then answered at once instead of
    /// after the scheduler's other tasks, and a burst does not lap the ring.
    /// The loop sleeps between drains; needs CAP_SYS_NICE. [range: 1..=99]
    #[arg(long, value_name = "N", value_parser = tracer_cli::int(1u32, 99))]
    pub(crate) realtime: Option<u32>,

    /// Reference of the global clock every event is converted to:
    /// `system` (this host's CLOCK_TAI), `phc:/dev/ptpN` (a PTP hardware
    /// clock), `iface:NAME` (the PHC of a NIC), or `sink` (the sink's clock,
    /// through a two-way exchange stamped by the kernel; `sink:IP:PORT` names
    /// the responder). The global clock is a software clock: no system clock
    /// is ever adjusted.
    #[arg(long, default_value = "system", value_name = "CLOCK")]
    pub(crate) clock: ClockArg,

    /// UDP port of the sink's clock responder, for `--clock sink` (and
    /// whatever --clock is, to keep its exchanges out of the trace: see
    /// --trace-self). Default: the sink's port + 1. [range: 1..=65535]
    #[arg(long, value_name = "PORT", value_parser = tracer_cli::int(1u16, u16::MAX))]
    pub(crate) clock_port: Option<u16>,

    /// With `--clock sink`: stamp the exchange with the NIC hardware stamps of
    /// this interface (it needs a PHC, and hardware timestamping switched on,
    /// as ptp4l does) instead of kernel software stamps.
    #[arg(long, value_name = "IFACE", value_parser = tracer_cli::iface_name)]
    pub(crate) clock_hw_iface: Option<String>,

    /// Seconds between clock updates (each one is also sent as a clock
    /// event). [range: 0.01..=3600 s]
    #[arg(long, default_value = "1", value_name = "SECS", value_parser = tracer_cli::secs(0.01, 3600.0))]
    pub(crate) clock_interval: Duration,

    /// Wait up to SECS for the clock to lock before tracing starts (events
    /// before a lock are converted with this host's TAI and marked
    /// UNLOCKED); 0 starts at once. [range: 0..=3600 s]
    #[arg(long, default_value = "10", value_name = "SECS", value_parser = tracer_cli::secs(0.0, 3600.0))]
    pub(crate) clock_lock_timeout: Duration,

    /// Clock servo: `pi` (phc2sys's PI controller) or `linreg` (least squares
    /// over a sliding window).
    #[arg(long, default_value = "pi")]
    pub(crate) servo: ServoKind,

    /// The servo's sanity check against a reference that jumps (forged
    /// answers without --key-file, a broken clock): once locked, a sample
    /// beyond max(10 x the clock's recent residual, 20 µs) is not followed;
    /// the clock runs on its own frequency (state HOLDOVER in every event),
    /// a warning is logged and it is counted. A move that stays put for 4
    /// updates is followed (UNLOCKED, then JUMP) as long as the moves
    /// followed this way add up to at most NS; beyond that the clock keeps
    /// holding until restarted. `unlimited` follows any move that stays
    /// put; 0 follows none. See docs/clock-model.md.
    /// [range: 0..=1000000000000 ns; or `unlimited`]
    #[arg(long, default_value_t = MaxChange::default(), value_name = "NS")]
    pub(crate) servo_max_change: MaxChange,

    /// Once the servo has learned this clock's frequency (16 s after it
    /// locks), its correction stays within ± PPB of it: a reference that
    /// drifts away faster than a crystal does is not followed faster (state
    /// HOLDOVER, counted). It is also how fast a forged answer stream can
    /// drag the clock without being flagged: PPB ns per second. 0: only
    /// the clock's own frequency limit applies.
    /// [range: 0..=1000000]
    #[arg(long, default_value_t = clocksync::servo::sanity::MAX_FREQ_CHANGE_PPB, value_name = "PPB",
        value_parser = tracer_cli::real(0.0, clocksync::servo::sanity::MAX_FREQ_CHANGE_LIMIT_PPB))]
    pub(crate) servo_max_freq_change: f64,

    /// Follow the reference whatever it does, as phc2sys does (no HOLDOVER,
    /// no bound on forged answers). Only for a reference nobody on the
    /// network can forge.
    #[arg(long, conflicts_with_all = ["servo_max_change", "servo_max_freq_change"])]
    pub(crate) no_servo_sanity: bool,

    /// TESTING ONLY: behave as if this host's CLOCK_REALTIME/CLOCK_TAI were
    /// off by this many ns (every realtime/TAI reading and kernel realtime
    /// stamp the agent takes is shifted; monotonic stamps are not).
    /// [range: -86400000000000..=86400000000000] (one day either way)
    #[arg(
        long,
        default_value = "0",
        value_name = "NS",
        help_heading = "Testing options",
        allow_hyphen_values = true,
        value_parser = tracer_cli::int(-clocksync::MAX_INJECTED_OFFSET_NS, clocksync::MAX_INJECTED_OFFSET_NS)
    )]
    pub(crate) inject_clock_offset_ns: i64,

    /// TESTING ONLY: drift of the injected clock error, in ppm (the error
    /// grows by this much per second of elapsed time). [range: -1000..=1000]
    #[arg(
        long,
        default_value = "0",
        value_name = "PPM",
        help_heading = "Testing options",
        allow_hyphen_values = true,
        value_parser = tracer_cli::real(-clocksync::MAX_INJECTED_DRIFT_PPM, clocksync::MAX_INJECTED_DRIFT_PPM)
    )]
    pub(crate) inject_clock_drift_ppm: f64,

    /// TESTING / DEMO ONLY: behave as a separate machine whose clock is a
    /// simulated oscillator, so hosts that are namespaces of one kernel
    /// (sharing one clock) get clocks that really differ. SPEC is
    /// `offset_ns,drift_ppm[,wander_ppb_per_s[,noise_ns[,seed]]]`: the local
    /// clock reads `t + offset + drift·elapsed + ∫wander + noise` at true
    /// CLOCK_MONOTONIC t; the wander is a seeded random walk of the
    /// frequency (a Gaussian step of wander_ppb_per_s each second, bounded
    /// at 60 steps), the noise is white, drawn per reading (default seed 1).
    /// Every stamp the agent sees goes through it: the probes' raw stamps
    /// (sent on the wire as this clock read them), skb RX stamps, the clock
    /// exchange's kernel stamps and the clock sources' readings. So
    /// `--clock system` is off by the distortion and `--clock sink` must
    /// learn it. Unlike --inject-clock-*, it moves CLOCK_MONOTONIC too.
    /// See docs/clock-model.md.
    #[arg(
        long,
        value_name = "SPEC",
        help_heading = "Testing options",
        allow_hyphen_values = true
    )]
    pub(crate) simulate_oscillator: Option<OscillatorSpec>,

    /// TESTING ONLY, with --simulate-oscillator: write every event stamp's
    /// local (as sent) and true value to FILE, one `m|r LOCAL TRUE` line
    /// each (m: CLOCK_MONOTONIC, r: CLOCK_REALTIME), to measure the events'
    /// true error. The truth never goes on the wire.
    #[arg(
        long,
        value_name = "FILE",
        help_heading = "Testing options",
        requires = "simulate_oscillator"
    )]
    pub(crate) oscillator_truth: Option<PathBuf>,

    /// The deployment's shared key file (the same file on every agent and
    /// the sink; make one with `head -c 32 /dev/urandom > nettrace.key &&
    /// chmod 600 nettrace.key`). Every datagram then carries a 16-byte tag
    /// (HMAC-SHA256-128) that a sink with the same key checks, only tagged
    /// acknowledgements from the sink are taken, and with `--clock sink` the
    /// clock exchange is tagged too (a forged answer would shift this host's
    /// clock). The file must be private to its owner (mode 0600 or 0400);
    /// the key is never printed.
    #[arg(long, value_name = "PATH")]
    pub(crate) key_file: Option<PathBuf>,

    /// At exit, wait up to SECS for the sink to confirm that the last
    /// events reached its file (only if it acknowledged anything before);
    /// 0 does not wait. [range: 0..=60 s]
    #[arg(long, default_value = "2", value_name = "SECS", value_parser = tracer_cli::secs(0.0, 60.0))]
    pub(crate) ack_wait: Duration,

    /// Kernel BTF used to check for BPF TX timestamping support.
    #[arg(long, default_value = "/sys/kernel/btf/vmlinux", hide = true)]
    pub(crate) btf: PathBuf,
}

/// The options of `--metrics` (refused without it: `metrics_option_without_metrics`).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct MetricsArgs {
    /// Which parts to run, comma separated: rx (RX latency histograms),
    /// tx (TX stage histograms; a sockops program under --cgroup, Linux >=
    /// 6.15), drops (drops by reason), tcp (retransmissions, resets,
    /// socket queue and memory events), cpu (CPU time of NET_RX/NET_TX
    /// softirqs and socket calls), or all.
    #[arg(long, default_value = "all", value_name = "PARTS", value_parser = MetricParts::parse)]
    pub(crate) metrics_with: MetricParts,

    /// Label the histograms and counters by network namespace (`netns`,
    /// its inode number) and the RX histograms by interface (`iface`, its
    /// name in the agent's namespace, else its index), comma separated. Off
    /// by default: every label multiplies the series Prometheus stores.
    #[arg(long, value_name = "LABELS", value_delimiter = ',', value_parser = ["netns", "iface"])]
    pub(crate) metrics_by: Vec<String>,

    /// With --metrics-by: the most label sets the kernel keeps (each a
    /// histogram of 38 buckets per CPU); values of label sets beyond it go
    /// to the hook's unlabelled series and are counted
    /// (nettrace_metrics_unobserved_total{reason="series_full"}).
    /// [range: 1..=65536]
    #[arg(long, default_value = "1024", value_name = "N", value_parser = tracer_cli::int(1u32, 65536))]
    pub(crate) metrics_max_series: u32,
}

impl MetricsArgs {
    /// Their clap ids.
    pub(crate) const IDS: [&'static str; 3] = ["metrics_with", "metrics_by", "metrics_max_series"];
}

/// Smallest `--max-datagram`: a header with the longest host name and a
/// few records must fit.
pub(crate) const MIN_DATAGRAM: u32 = 256;
/// Largest `--max-datagram`: the largest UDP payload over IPv4.
pub(crate) const MAX_DATAGRAM: u32 = tracer_codec::MAX_DATAGRAM_LEN as u32;
/// Largest `--sample-every`: one 64 KiB granule in a million is already
/// one sampled byte range per 64 GB of a flow.
pub(crate) const MAX_SAMPLE_EVERY: u32 = 1_000_000;

/// `--agent-id`: any 64-bit value, decimal or hex with `0x`.
pub(crate) fn parse_agent_id(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("`{s}` is not a 64-bit id: give 0 to 18446744073709551615, or 0x and up to 16 hex digits"))
}

/// `--netns`: a network namespace file, checked now (see
/// [`tracer_agent::preflight::netns_inode`]).
pub(crate) fn parse_netns(s: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(s);
    tracer_agent::preflight::netns_inode(&p).map_err(|e| e.to_string())?;
    Ok(p)
}

/// `--clock`: any clocksync source, or `sink`, the responder beside the
/// sink given by `--sink` (resolved in `real_main`).
#[derive(Debug, Clone)]
pub(crate) enum ClockArg {
    /// The sink's clock responder, at `--clock-port`.
    Sink,
    /// A source named in full.
    Spec(SourceSpec),
}

impl std::str::FromStr for ClockArg {
    type Err = clocksync::ClockError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "sink" {
            Ok(ClockArg::Sink)
        } else {
            s.parse().map(ClockArg::Spec)
        }
    }
}
