//! What a run of the agent is given: [`AgentConfig`] and its parts.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::clock::ClockConfig;
use crate::filter::FlowFilter;
use crate::pipeline::AgentIdentity;
use crate::probes::ProbeSpec;
use crate::sender::BatchSend;

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

impl NetnsFilter {
    /// The inode of the namespace to trace; 0 for every namespace.
    pub fn inode(&self) -> Result<u32, crate::preflight::NetnsFileError> {
        let path = match self {
            NetnsFilter::All => return Ok(0),
            NetnsFilter::Own => PathBuf::from("/proc/self/ns/net"),
            NetnsFilter::Path(p) => p.clone(),
        };
        crate::preflight::netns_inode(&path)
    }
}

/// Everything `run` needs.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Sink address.
    pub sink: SocketAddr,
    /// A second sink on this host every datagram also goes to (the
    /// agent's own writer beside a remote `sink`), or None.
    pub copy_to: Option<SocketAddr>,
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
    /// `--metrics` beside the trace, or None.
    pub metrics: Option<crate::metrics::MetricsConfig>,
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
