//! The one probe core: everything every probe does alike, written once.
//! A probe is its BPF program (`ebpf/<name>.bpf.c`, whose skeleton build.rs
//! generates) and a [`ProbeKind`]: its name and kernel check, its programs
//! and how each attaches, its record and the decoder from record bytes to a
//! codec event with raw stamps, and its counter mapping. The core opens the
//! skeleton, writes the settings every probe shares into its `.rodata`,
//! sizes and loads it, maps its slot ring, attaches and detaches its
//! programs, drains it, sums its counters and hands out its doorbell: the
//! maps and `.rodata` names of `ebpf/include/slot_ring.h`, `filter.h` and
//! `self_traffic.h`, which every probe's object has (retis's `core/probe`).

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::PathBuf;

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapHandle, Object, OpenObject, ProgramMut};

use super::heads::Heads;
use super::interface::{
    Collector, Probe, ProbeConfig, ProbeCounters, ProbeError, ProbeSpec, RawEvent,
};
use super::slots::{Drained, PlainRecord, RecordError, SlotRing};
use crate::filter::FlowFilter;
use crate::preflight::PreflightError;
use crate::self_traffic::SelfTraffic;

/// How one of a probe's programs attaches, by its name in the C source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attach {
    /// A tp_btf program, attached to the tracepoint its section names.
    Tracepoint(&'static str),
    /// A cgroup program (sockops), attached to the `--cgroup` directory.
    Cgroup(&'static str),
}

impl Attach {
    /// The program's name.
    pub fn program(self) -> &'static str {
        match self {
            Attach::Tracepoint(p) | Attach::Cgroup(p) => p,
        }
    }
}

/// The opened (not yet loaded) skeleton of probe `K`.
pub type OpenSkelOf<'obj, K> = <<K as ProbeKind>::Builder as SkelBuilder<'obj>>::Output;
/// The loaded skeleton of probe `K`.
pub type SkelOf<'obj, K> = <OpenSkelOf<'obj, K> as OpenSkel<'obj>>::Output;

/// What makes one probe itself; [`Loaded`] does the rest. A value of it is
/// the probe's own state while loaded (the drops probe's name tables, the
/// rx probe's timestamping socket); most probes have none.
pub trait ProbeKind: Sized + 'static {
    /// Name on the command line (`--probes NAME`) and in messages.
    const NAME: &'static str;
    /// One line for `--help`.
    const ABOUT: &'static str;
    /// Its programs, in the order [`Probe::programs`] lists them.
    const PROGRAMS: &'static [Attach];
    /// Whether its hooks can see nettrace's own (UDP) traffic, which it
    /// must then exclude. A probe that cannot keeps the table empty, and
    /// the verifier prunes the check.
    const SEES_SELF_TRAFFIC: bool = true;
    /// The skeleton builder build.rs generates from `ebpf/<NAME>.bpf.c`.
    type Builder: for<'obj> SkelBuilder<'obj> + Default + 'static;
    /// Its `.rodata`, where the core writes the shared settings.
    type Rodata: SharedRodata;
    /// The record its programs write into each slot.
    type Record: PlainRecord;
    /// The event a record becomes.
    type Event: RawEvent;

    /// Preflight: fails, with an operator-worded message, when this kernel
    /// cannot run the probe. Runs before anything is loaded.
    fn check(_cfg: &ProbeConfig) -> Result<(), PreflightError> {
        Ok(())
    }
    /// The `.rodata` of its opened skeleton.
    fn rodata<'a>(open: &'a mut OpenSkelOf<'_, Self>) -> Option<&'a mut Self::Rodata>;
    /// Its own state, made once its object is loaded.
    fn new(cfg: &ProbeConfig) -> Self;
    /// Decode and validate one record: its event with the raw stamps the
    /// kernel wrote and no global stamp yet. Never panics on bad input.
    fn decode(&self, data: &[u8]) -> Result<Self::Event, RecordError>;
    /// Its counters as the agent reports them.
    fn counters(c: &Counters) -> ProbeCounters;
    /// Runs before its programs attach.
    fn before_attach(&mut self) {}
    /// Runs once its programs are detached.
    fn after_detach(&mut self) {}
}

/// The settings every probe's `.rodata` holds, written by [`SharedRodata`].
#[derive(Debug)]
pub struct SharedSettings<'a> {
    /// netns inode to trace; 0 traces every namespace.
    pub target_netns: u32,
    /// Record slots per CPU (slot_ring.h).
    pub slots_per_cpu: u32,
    /// `--sample-every` as a threshold (sample.h), for probes that sample.
    pub sample_threshold: u64,
    /// `--filter` (filter.h).
    pub filter: &'a FlowFilter,
    /// nettrace's own traffic (self_traffic.h); empty for a probe that
    /// cannot see it.
    pub self_traffic: &'a SelfTraffic,
}

/// A skeleton's `.rodata` type, which holds the shared settings: every
/// skeleton has its own Rust copy of the C globals, so each implements this
/// with [`crate::shared_rodata!`].
pub trait SharedRodata {
    /// Write the shared settings.
    fn write_shared(&mut self, s: &SharedSettings<'_>);
}

/// Implements [`SharedRodata`] for a skeleton's `.rodata` type: the fields
/// of slot_ring.h, filter.h and self_traffic.h, which every probe has, and
/// the optional ones named after the type (`sample_threshold`).
#[macro_export]
macro_rules! shared_rodata {
    ($rodata:ty $(, $optional:ident)*) => {
        impl $crate::probes::core::SharedRodata for $rodata {
            fn write_shared(&mut self, s: &$crate::probes::core::SharedSettings<'_>) {
                self.target_netns = s.target_netns;
                self.slots_per_cpu = s.slots_per_cpu;
                $crate::write_flow_filter!(self, s.filter);
                $crate::write_self_traffic!(self, s.self_traffic);
                $(self.$optional = s.$optional;)*
            }
        }
    };
}

/// Includes the skeleton build.rs generated for `ebpf/<name>.bpf.c` as a
/// module `skel` (generated code: lints off).
#[macro_export]
macro_rules! bpf_skeleton {
    ($name:literal) => {
        #[allow(
            clippy::all,
            clippy::pedantic,
            missing_docs,
            dead_code,
            non_camel_case_types,
            non_snake_case,
            unused
        )]
        mod skel {
            include!(concat!(env!("OUT_DIR"), "/", $name, ".skel.rs"));
        }
    };
}

/// A probe's counters (`struct slot_cpu` in slot_ring.h), each summed over CPUs.
#[derive(Debug, Clone, Default)]
pub struct Counters(pub Vec<u64>);

impl Counters {
    /// The counter at `idx` (its C enum value), 0 past the array.
    pub fn at(&self, idx: u32) -> u64 {
        self.0.get(idx as usize).copied().unwrap_or(0)
    }
}

/// The registry entry of probe `K`.
pub const fn spec<K: ProbeKind>() -> ProbeSpec {
    ProbeSpec {
        name: K::NAME,
        about: K::ABOUT,
        check: K::check,
        open: open::<K>,
    }
}

/// Open, configure and load probe `K` (not attached).
fn open<'obj, K: ProbeKind>(
    object: &'obj mut MaybeUninit<OpenObject>,
    cfg: &ProbeConfig,
) -> Result<Box<dyn Probe + 'obj>, ProbeError> {
    Ok(Box::new(Loaded::<K>::load(object, cfg)?))
}

/// Decode one ring record of probe `K` and hand its event or its error to
/// `out`.
pub fn deliver<K: ProbeKind>(kind: &K, data: &[u8], out: &mut dyn Collector) {
    match kind.decode(data) {
        Ok(mut ev) => out.event(ev.probe_event()),
        Err(e) => out.bad_record(K::NAME, e),
    }
}

/// A loaded probe of kind `K`. Dropping it detaches its programs, then
/// runs the kind's own cleanup, then unloads the object.
pub struct Loaded<'obj, K: ProbeKind> {
    /// First field: dropped first, so programs detach before the rest goes.
    links: Vec<Link>,
    kind: K,
    ring: SlotRing,
    heads: Heads,
    /// The last heads read (kept to reuse its allocation).
    head_buf: Vec<u64>,
    cgroup: PathBuf,
    skel: SkelOf<'obj, K>,
}

impl<'obj, K: ProbeKind> Loaded<'obj, K> {
    /// Open the skeleton into `object`, write the shared settings, size the
    /// slot ring, load, and map the ring.
    pub fn load(
        object: &'obj mut MaybeUninit<OpenObject>,
        cfg: &ProbeConfig,
    ) -> Result<Self, ProbeError> {
        let load_err = |source| ProbeError::Load {
            probe: K::NAME,
            source,
        };
        let mut open = K::Builder::default().open(object).map_err(load_err)?;
        let no_self = SelfTraffic::default();
        let settings = SharedSettings {
            target_netns: cfg.target_netns,
            slots_per_cpu: cfg.slots_per_cpu,
            sample_threshold: tracer_codec::sample::threshold(cfg.sample_every),
            filter: &cfg.filter,
            self_traffic: if K::SEES_SELF_TRAFFIC {
                &cfg.self_traffic
            } else {
                &no_self
            },
        };
        if let Some(ro) = K::rodata(&mut open) {
            ro.write_shared(&settings);
        }
        // slot_ring.h's maps, named alike in every probe's object; the
        // slot array holds slots_per_cpu records per possible CPU, `heads`
        // one entry per possible CPU.
        let ncpu = libbpf_rs::num_possible_cpus().map_err(load_err)?;
        let entries = (ncpu as u64 * u64::from(cfg.slots_per_cpu)).min(u64::from(u32::MAX)) as u32;
        for (name, n) in [("slots", entries), ("heads", ncpu as u32)] {
            open.open_object_mut()
                .maps_mut()
                .find(|m| m.name() == name)
                .ok_or_else(|| missing::<K>("map", name))?
                .set_max_entries(n)
                .map_err(load_err)?;
        }
        let skel = open.load().map_err(load_err)?;
        let obj = skel.object();
        // Every program the kind names is there before anything attaches.
        for p in K::PROGRAMS {
            program::<K>(obj, p.program())?;
        }
        // The mappings outlive the handles' fds: a mapping holds its map.
        let heads = handle::<K>(obj, "heads")?;
        let heads = Heads::new(heads.as_fd(), heads.value_size() as usize, ncpu)
            .map_err(|e| map_err::<K>("heads")(libbpf_rs::Error::from(e)))?;
        let now = heads.now();
        let slots = handle::<K>(obj, "slots")?;
        let ring = SlotRing::new(
            slots.as_fd(),
            size_of::<K::Record>(),
            K::Record::COMMIT_OFFSET,
            cfg.slots_per_cpu,
            &now,
        )
        .map_err(|e| map_err::<K>("slots")(libbpf_rs::Error::from(e)))?;
        Ok(Loaded {
            links: Vec::new(),
            kind: K::new(cfg),
            ring,
            heads,
            head_buf: now,
            cgroup: cfg.cgroup.clone(),
            skel,
        })
    }

    /// Attach one program as `how` says.
    fn attach_one(&self, how: Attach) -> Result<Link, ProbeError> {
        let prog = program::<K>(self.skel.object(), how.program())?;
        match how {
            Attach::Tracepoint(program) => {
                prog.attach()
                    .map_err(|source| ProbeError::AttachTracepoint {
                        probe: K::NAME,
                        program,
                        source,
                    })
            }
            Attach::Cgroup(_) => {
                let dir =
                    std::fs::File::open(&self.cgroup).map_err(|source| ProbeError::Cgroup {
                        path: self.cgroup.clone(),
                        source,
                    })?;
                prog.attach_cgroup(dir.as_raw_fd())
                    .map_err(|source| ProbeError::Attach {
                        probe: K::NAME,
                        path: self.cgroup.clone(),
                        source,
                    })
            }
        }
    }
}

impl<K: ProbeKind> Probe for Loaded<'_, K> {
    fn name(&self) -> &'static str {
        K::NAME
    }

    fn attach(&mut self) -> Result<(), ProbeError> {
        self.kind.before_attach();
        for &how in K::PROGRAMS {
            let link = self.attach_one(how)?;
            self.links.push(link);
        }
        Ok(())
    }

    fn drain(&mut self, out: &mut dyn Collector) -> Result<Drained, ProbeError> {
        self.heads.read(&mut self.head_buf);
        let kind = &self.kind;
        Ok(self
            .ring
            .drain(&self.head_buf, |data| deliver(kind, data, &mut *out)))
    }

    fn counters(&self) -> Result<ProbeCounters, ProbeError> {
        Ok(K::counters(&Counters(self.heads.counters())))
    }

    fn programs(&self) -> Vec<BorrowedFd<'_>> {
        let obj = self.skel.object();
        K::PROGRAMS
            .iter()
            .filter_map(|how| program::<K>(obj, how.program()).ok())
            .map(|p| {
                let fd = p.as_fd().as_raw_fd();
                // SAFETY: the fd is the program's, owned by the object
                // `self.skel` holds; it stays open until the skeleton is
                // dropped, which the borrow of `self` prevents.
                unsafe { BorrowedFd::borrow_raw(fd) }
            })
            .collect()
    }

    fn doorbell(&self) -> Result<MapHandle, ProbeError> {
        handle::<K>(self.skel.object(), "doorbell")
    }

    fn detach(&mut self) {
        self.links.clear();
        self.kind.after_detach();
    }
}

/// The error for a map or program of `K`'s object that is not there.
fn missing<K: ProbeKind>(what: &'static str, name: &'static str) -> ProbeError {
    ProbeError::Missing {
        probe: K::NAME,
        what,
        name,
    }
}

/// Maps a libbpf error on `map` of probe `K` to its [`ProbeError`].
fn map_err<K: ProbeKind>(map: &'static str) -> impl FnOnce(libbpf_rs::Error) -> ProbeError {
    move |source| ProbeError::Map {
        probe: K::NAME,
        map,
        source,
    }
}

/// The program `name` of `K`'s loaded object (`Mut`: attaching takes it).
fn program<'a, K: ProbeKind>(
    obj: &'a Object,
    name: &'static str,
) -> Result<ProgramMut<'a>, ProbeError> {
    obj.progs_mut()
        .find(|p| p.name() == name)
        .ok_or_else(|| missing::<K>("program", name))
}

/// A handle of the map `name` of `K`'s loaded object.
fn handle<K: ProbeKind>(obj: &Object, name: &'static str) -> Result<MapHandle, ProbeError> {
    let map = obj
        .maps()
        .find(|m| m.name() == name)
        .ok_or_else(|| missing::<K>("map", name))?;
    MapHandle::try_from(&map).map_err(map_err::<K>(name))
}
