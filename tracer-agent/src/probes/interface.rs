//! What every probe is, and what the agent hands it and gets back: the
//! [`Probe`] trait, the registry entry [`ProbeSpec`], the shared
//! [`ProbeConfig`], errors, counters and the events a drain yields. Below
//! the registry (`probes/mod.rs`) and the probes themselves, so that the
//! registry names the probes and the probes name only this.

use std::mem::MaybeUninit;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;

use libbpf_rs::OpenObject;
use tracer_codec::{DropEvent, RxEvent, TcpEvent, TxEvent};

use super::slots::{Drained, RecordError};
use crate::preflight::PreflightError;

/// Settings shared by every probe; each takes what it needs.
#[derive(Debug, Clone)]
pub struct ProbeConfig {
    /// cgroup v2 directory whose sockets are traced (and its descendants).
    pub cgroup: PathBuf,
    /// netns inode to trace; 0 traces every namespace.
    pub target_netns: u32,
    /// Tag one sendmsg in N.
    pub sample_every: u32,
    /// Record slots per CPU in each probe's ring (power of two).
    pub slots_per_cpu: u32,
    /// Kernel BTF, to check for the kernel features a probe needs.
    pub btf: PathBuf,
    /// `--filter`: flows to record (empty: all), written into every
    /// probe's `.rodata` (ebpf/include/filter.h) with
    /// [`crate::write_flow_filter!`].
    pub filter: crate::filter::FlowFilter,
    /// nettrace's own traffic, excluded in BPF (ebpf/include/self_traffic.h)
    /// by the probes that can see it, written with
    /// [`crate::write_self_traffic!`]; empty with `--trace-self`.
    pub self_traffic: crate::self_traffic::SelfTraffic,
}

/// Opens, configures and loads one probe (not attached yet). `object` holds
/// the BPF object for the probe's lifetime.
pub type OpenFn = for<'obj> fn(
    &'obj mut MaybeUninit<OpenObject>,
    &ProbeConfig,
) -> Result<Box<dyn Probe + 'obj>, ProbeError>;

/// A registry entry: how to check for, and open, one probe.
#[derive(Debug)]
pub struct ProbeSpec {
    /// Name on the command line (`--probes NAME`).
    pub name: &'static str,
    /// One line for `--help`.
    pub about: &'static str,
    /// Preflight: fails, with an operator-worded message, when this kernel
    /// cannot run the probe. Runs before anything is loaded.
    pub check: fn(&ProbeConfig) -> Result<(), PreflightError>,
    /// Open, configure and load.
    pub open: OpenFn,
}

/// Why a probe could not be set up or read.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Opening or loading the BPF object failed.
    #[error("loading the {probe} probe's BPF program failed")]
    Load {
        /// Probe name.
        probe: &'static str,
        /// The libbpf error.
        source: libbpf_rs::Error,
    },
    /// The cgroup directory could not be opened.
    #[error("cannot open cgroup directory {path}")]
    Cgroup {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Attaching to the cgroup failed.
    #[error("attaching the {probe} probe to cgroup {path} failed")]
    Attach {
        /// Probe name.
        probe: &'static str,
        /// The directory.
        path: PathBuf,
        /// The libbpf error.
        source: libbpf_rs::Error,
    },
    /// Attaching a tracepoint (tp_btf) program failed.
    #[error("attaching the {probe} probe's program {program} to its tracepoint failed")]
    AttachTracepoint {
        /// Probe name.
        probe: &'static str,
        /// Program name.
        program: &'static str,
        /// The libbpf error.
        source: libbpf_rs::Error,
    },
    /// The probe's BPF object lacks a map or program its Rust side names
    /// (the C and the Rust of one probe disagree).
    #[error("the {probe} probe's BPF object has no {what} named {name}")]
    Missing {
        /// Probe name.
        probe: &'static str,
        /// "map" or "program".
        what: &'static str,
        /// The name looked for.
        name: &'static str,
    },
    /// Reading or mapping a map failed.
    #[error("reading BPF map {map} of the {probe} probe")]
    Map {
        /// Probe name.
        probe: &'static str,
        /// Map name.
        map: &'static str,
        /// The libbpf error.
        source: libbpf_rs::Error,
    },
}

/// Counters kept by the probes' BPF programs, summed over CPUs and over
/// probes. A probe leaves the ones it does not keep at 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProbeCounters {
    /// Records a probe could not place (no slot): lost in the kernel.
    pub ringbuf_lost: u64,
    /// Sockets where enabling TX timestamping failed.
    pub setsockopt_errors: u64,
    /// sendmsg calls whose skb could not be tagged.
    pub tag_errors: u64,
    /// Sockets enabled for TX timestamping.
    pub sockets: u64,
    /// sendmsg calls of traced sockets seen while sampling
    /// (`--sample-every` > 1); those ending in a sampled granule were
    /// tagged (about one in N).
    pub sendmsg_seen: u64,
    /// RX skbs with an IP ethertype whose header did not read back as
    /// IPv4/IPv6 (at stack entry, or COPY of a socketless skb): counted,
    /// not recorded.
    pub rx_read_errors: u64,
    /// skbs freed with a drop reason, in any namespace (before the netns
    /// filter): the drops probe's work, not its output.
    pub drops_seen: u64,
    /// Drops with neither device nor socket, so no namespace: recorded
    /// only when every namespace is traced.
    pub drops_unattributed: u64,
}

impl std::ops::AddAssign for ProbeCounters {
    fn add_assign(&mut self, o: Self) {
        self.ringbuf_lost += o.ringbuf_lost;
        self.setsockopt_errors += o.setsockopt_errors;
        self.tag_errors += o.tag_errors;
        self.sockets += o.sockets;
        self.sendmsg_seen += o.sendmsg_seen;
        self.rx_read_errors += o.rx_read_errors;
        self.drops_seen += o.drops_seen;
        self.drops_unattributed += o.drops_unattributed;
    }
}

/// One event a probe read, decoded from its record: the raw kernel stamps,
/// and global stamps 0 until the collector stamps it. A new event kind is one
/// more variant here; collectors match what they expect.
#[derive(Debug)]
pub enum ProbeEvent<'a> {
    /// A TX timestamping event.
    Tx(&'a mut TxEvent),
    /// An RX stage event.
    Rx(&'a mut RxEvent),
    /// An skb drop event.
    Drop(&'a mut DropEvent),
    /// A TCP anomaly event.
    Tcp(&'a mut TcpEvent),
}

/// A codec event a probe's decoder produces, seen as a [`ProbeEvent`].
pub trait RawEvent {
    /// This event as the collector receives it.
    fn probe_event(&mut self) -> ProbeEvent<'_>;
}

macro_rules! raw_event {
    ($($ty:ty => $variant:ident),* $(,)?) => {$(
        impl RawEvent for $ty {
            fn probe_event(&mut self) -> ProbeEvent<'_> {
                ProbeEvent::$variant(self)
            }
        }
    )*};
}
raw_event!(TxEvent => Tx, RxEvent => Rx, DropEvent => Drop, TcpEvent => Tcp);

/// Where a probe's drain puts what it read: events with the raw stamps
/// the kernel wrote (the agent's collector stamps them, `crate::stamp`),
/// and the records it refused.
pub trait Collector {
    /// One event.
    fn event(&mut self, ev: ProbeEvent<'_>);
    /// A record that failed validation: counted as lost, not sent.
    fn bad_record(&mut self, probe: &'static str, err: RecordError);
}

/// A loaded probe. Dropping it detaches and unloads its programs.
pub trait Probe {
    /// Its registry name.
    fn name(&self) -> &'static str;
    /// Attach its programs; events start flowing.
    fn attach(&mut self) -> Result<(), ProbeError>;
    /// Hand every record written since the last drain to `out`.
    fn drain(&mut self, out: &mut dyn Collector) -> Result<Drained, ProbeError>;
    /// Current values of its BPF counters.
    fn counters(&self) -> Result<ProbeCounters, ProbeError>;
    /// Its loaded programs (for ids and bpf_stats run times).
    fn programs(&self) -> Vec<BorrowedFd<'_>>;
    /// Its `doorbell` ringbuf (ebpf/include/slot_ring.h), rung every
    /// quarter ring of records on a CPU: the agent waits on it between
    /// drains.
    fn doorbell(&self) -> Result<libbpf_rs::MapHandle, ProbeError>;
    /// Detach now (also done on drop); records already written stay readable.
    fn detach(&mut self);
}
