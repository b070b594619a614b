//! The metrics program (`ebpf/metrics.bpf.c`): loaded with the parts the
//! operator chose, attached, and read. [`KernelMetrics`] owns the object
//! and its links (the main thread keeps it); [`MetricMaps`] holds handles
//! of its maps only, so the `/metrics` thread reads them at each scrape
//! without touching the object.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::PathBuf;

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, MapHandle, OpenObject};

use super::error::MetricsError;
use super::hist::{Hist, COUNTS_AT, HIST_BYTES};
use super::parts::MetricParts;
use crate::filter::FlowFilter;
use crate::self_traffic::SelfTraffic;

crate::bpf_skeleton!("metrics");

use skel::types::{
    nt_count_key, nt_count_kind, nt_drops, nt_hist, nt_hist_key, nt_metric_error, nt_metric_hook,
};

/// Drop reasons counted in the array (NT_DROP_REASONS in metrics.h).
const DROP_REASONS: usize = std::mem::size_of::<nt_drops>() / 8;

// The Rust reader's sizes are the C side's.
// A line of the sum and the program's own words, then the counts; whole
// cache lines, so that the rows of `hists` start on a line.
const _: () = assert!(std::mem::size_of::<nt_hist>() == HIST_BYTES);
const _: () = assert!(std::mem::size_of::<nt_hist>() % 64 == 0);
const _: () = assert!(std::mem::offset_of!(nt_hist, count) == COUNTS_AT);
const _: () = assert!(std::mem::offset_of!(nt_hist, sum_ns) == 0);
const _: () = assert!(nt_metric_hook::NT_HOOK_MAX.0 as usize == super::names::HOOKS.len());
const _: () = assert!(nt_metric_error::NT_MERR_MAX.0 as usize == super::names::ERRORS.len());
const _: () = assert!(std::mem::size_of::<nt_hist_key>() == 16);
const _: () = assert!(std::mem::size_of::<nt_count_key>() == 16);
const _: () = assert!(
    skel::types::nt_count_kind::NT_COUNT_KIND_MAX.0 as usize == super::names::COUNT_KINDS.len()
);

/// What the program is set up with.
#[derive(Debug, Clone)]
pub struct KernelConfig {
    /// Which hooks to attach.
    pub parts: MetricParts,
    /// netns inode to observe; 0: every namespace.
    pub target_netns: u32,
    /// `--sample-every` as a threshold (TX stages only).
    pub sample_threshold: u64,
    /// Label series by network namespace.
    pub by_netns: bool,
    /// Label RX series by interface.
    pub by_iface: bool,
    /// Most label sets when grouping.
    pub max_series: u32,
    /// `--filter`.
    pub filter: FlowFilter,
    /// nettrace's own traffic, kept out.
    pub self_traffic: SelfTraffic,
    /// cgroup the TX program attaches to.
    pub cgroup: PathBuf,
}

/// One histogram series read from the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Series {
    /// `enum nt_metric_hook`.
    pub hook: u32,
    /// netns inode, 0 when not grouped by it.
    pub netns: u32,
    /// ifindex, 0 when not grouped by it (or none).
    pub ifindex: u32,
    /// The histogram summed over CPUs.
    pub hist: Hist,
}

/// One counter read from the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Count {
    /// `enum nt_count_kind`.
    pub kind: u32,
    /// The kind's detail (drop reason, direction).
    pub detail: u32,
    /// netns inode, 0 when not grouped by it.
    pub netns: u32,
    /// Summed over CPUs.
    pub value: u64,
}

/// Everything the program holds at one read.
#[derive(Debug, Clone, Default)]
pub struct KernelReading {
    /// Histograms with at least one value.
    pub series: Vec<Series>,
    /// Counters.
    pub counts: Vec<Count>,
    /// `enum nt_metric_error` counts.
    pub errors: Vec<u64>,
}

/// Handles of the program's maps, for the reader on another thread.
#[derive(Debug)]
pub struct MetricMaps {
    /// One histogram per CPU and hook (key cpu * hooks + hook).
    hists: MapHandle,
    /// CPUs `hists` has rows for.
    cpus: u32,
    hists_by: MapHandle,
    counts: MapHandle,
    drops: MapHandle,
    errors: MapHandle,
}

fn map_err(map: &'static str) -> impl FnOnce(libbpf_rs::Error) -> MetricsError {
    move |source| MetricsError::Map { map, source }
}

fn sum_words(per_cpu: &[Vec<u8>]) -> u64 {
    per_cpu
        .iter()
        .filter_map(|b| b.get(..8))
        .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")))
        .fold(0, u64::wrapping_add)
}

fn sum_hist(per_cpu: &[Vec<u8>]) -> Hist {
    let mut h = Hist::default();
    for cpu in per_cpu {
        h.add_row(cpu);
    }
    h
}

fn key_words(key: &[u8]) -> [u32; 4] {
    let mut w = [0u32; 4];
    for (d, c) in w.iter_mut().zip(key.chunks_exact(4)) {
        *d = u32::from_ne_bytes(c.try_into().expect("4 bytes"));
    }
    w
}

impl MetricMaps {
    /// Read every map once (a few syscalls per series).
    pub fn read(&self) -> Result<KernelReading, MetricsError> {
        let mut out = KernelReading::default();
        let hooks = super::names::HOOKS.len() as u32;
        for hook in 0..hooks {
            let mut hist = Hist::default();
            for cpu in 0..self.cpus {
                let key = cpu * hooks + hook;
                if let Some(row) = self
                    .hists
                    .lookup(&key.to_ne_bytes(), MapFlags::ANY)
                    .map_err(map_err("hists"))?
                {
                    hist.add_row(&row);
                }
            }
            if hist.count() > 0 {
                out.series.push(Series {
                    hook,
                    netns: 0,
                    ifindex: 0,
                    hist,
                });
            }
        }
        for key in self.hists_by.keys() {
            // A key deleted between listing and lookup is simply gone.
            let Some(per_cpu) = self
                .hists_by
                .lookup_percpu(&key, MapFlags::ANY)
                .map_err(map_err("hists_by"))?
            else {
                continue;
            };
            let [hook, netns, ifindex, _] = key_words(&key);
            out.series.push(Series {
                hook,
                netns,
                ifindex,
                hist: sum_hist(&per_cpu),
            });
        }
        for key in self.counts.keys() {
            let Some(per_cpu) = self
                .counts
                .lookup_percpu(&key, MapFlags::ANY)
                .map_err(map_err("counts"))?
            else {
                continue;
            };
            let [kind, detail, netns, _] = key_words(&key);
            out.counts.push(Count {
                kind,
                detail,
                netns,
                value: sum_words(&per_cpu),
            });
        }
        // Drops by reason below NT_DROP_REASONS: one array of counters.
        let per_cpu = self
            .drops
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
            .map_err(map_err("drops"))?
            .unwrap_or_default();
        let mut by_reason = [0u64; DROP_REASONS];
        for cpu in &per_cpu {
            for (n, w) in by_reason.iter_mut().zip(cpu.chunks_exact(8)) {
                *n = n.wrapping_add(u64::from_ne_bytes(w.try_into().expect("8 bytes")));
            }
        }
        for (reason, &value) in by_reason.iter().enumerate() {
            if value > 0 {
                out.counts.push(Count {
                    kind: nt_count_kind::NT_COUNT_DROP.0,
                    detail: reason as u32,
                    netns: 0,
                    value,
                });
            }
        }
        for idx in 0..super::names::ERRORS.len() as u32 {
            let per_cpu = self
                .errors
                .lookup_percpu(&idx.to_ne_bytes(), MapFlags::ANY)
                .map_err(map_err("errors"))?
                .unwrap_or_default();
            out.errors.push(sum_words(&per_cpu));
        }
        Ok(out)
    }
}

/// The loaded metrics program; dropping it detaches every hook.
pub struct KernelMetrics<'obj> {
    /// First: dropped (detached) before the object.
    links: Vec<Link>,
    skel: skel::MetricsSkel<'obj>,
    /// Keeps RX software stamping on while the RX hooks need skb->tstamp.
    _stamping: Option<std::os::fd::OwnedFd>,
    /// The TAI - REALTIME offset (s) the program has.
    tai_written: u32,
}

/// The programs of each part, by name in metrics.bpf.c.
fn programs_of(parts: &MetricParts) -> Vec<&'static str> {
    let mut p = Vec::new();
    if parts.rx {
        p.extend(["metrics_stack_entry", "metrics_tcp_input", "metrics_copy"]);
    }
    if parts.tx {
        p.push("metrics_tx");
    }
    if parts.drops {
        p.push("metrics_kfree_skb");
    }
    if parts.tcp {
        p.extend([
            "metrics_retransmit",
            "metrics_send_reset",
            "metrics_receive_reset",
            "metrics_rcvqueue_full",
            "metrics_mem_limit",
        ]);
    }
    p
}

impl<'obj> KernelMetrics<'obj> {
    /// Open, configure, load (only the chosen parts' programs) and attach.
    pub fn start(
        object: &'obj mut MaybeUninit<OpenObject>,
        cfg: &KernelConfig,
    ) -> Result<(Self, MetricMaps), MetricsError> {
        let wanted = programs_of(&cfg.parts);
        let mut open = skel::MetricsSkelBuilder::default()
            .open(object)
            .map_err(MetricsError::Load)?;
        let tai_written = tai_minus_realtime_s();
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.target_netns = cfg.target_netns;
            ro.sample_threshold = cfg.sample_threshold;
            ro.by_netns = u8::from(cfg.by_netns);
            ro.by_iface = u8::from(cfg.by_iface);
            crate::write_flow_filter!(ro, &cfg.filter);
            crate::write_self_traffic!(ro, &cfg.self_traffic);
        }
        for mut prog in open.open_object_mut().progs_mut() {
            let name = prog.name().to_string_lossy().into_owned();
            prog.set_autoload(wanted.iter().any(|w| *w == name));
        }
        let cpus = libbpf_rs::num_possible_cpus().map_err(MetricsError::Load)? as u32;
        open.maps
            .hists
            .set_max_entries(cpus * super::names::HOOKS.len() as u32)
            .map_err(MetricsError::Load)?;
        let grouped = cfg.by_netns || cfg.by_iface;
        open.maps
            .hists_by
            .set_max_entries(if grouped { cfg.max_series.max(1) } else { 1 })
            .map_err(MetricsError::Load)?;
        let skel = open.load().map_err(MetricsError::Load)?;
        set_tai_offset(&skel, tai_written)?;
        let maps = MetricMaps {
            hists: MapHandle::try_from(&skel.maps.hists).map_err(map_err("hists"))?,
            cpus,
            hists_by: MapHandle::try_from(&skel.maps.hists_by).map_err(map_err("hists_by"))?,
            counts: MapHandle::try_from(&skel.maps.counts).map_err(map_err("counts"))?,
            drops: MapHandle::try_from(&skel.maps.drops).map_err(map_err("drops"))?,
            errors: MapHandle::try_from(&skel.maps.errors).map_err(map_err("errors"))?,
        };
        let stamping = if cfg.parts.rx {
            crate::probes::rx::stamping::hold()
        } else {
            None
        };
        let mut me = KernelMetrics {
            links: Vec::new(),
            skel,
            _stamping: stamping,
            tai_written,
        };
        me.attach(cfg, &wanted)?;
        Ok((me, maps))
    }

    fn attach(&mut self, cfg: &KernelConfig, wanted: &[&'static str]) -> Result<(), MetricsError> {
        for name in wanted {
            let prog = self
                .skel
                .object()
                .progs_mut()
                .find(|p| p.name() == *name)
                .ok_or(MetricsError::MissingProgram(name))?;
            let link = if *name == "metrics_tx" {
                let dir =
                    std::fs::File::open(&cfg.cgroup).map_err(|source| MetricsError::Cgroup {
                        path: cfg.cgroup.clone(),
                        source,
                    })?;
                prog.attach_cgroup(dir.as_raw_fd())
            } else {
                prog.attach()
            }
            .map_err(|source| MetricsError::Attach {
                program: name,
                source,
            })?;
            self.links.push(link);
        }
        Ok(())
    }

    /// Keep the TAI - REALTIME offset current (leap seconds, an operator
    /// or ptp4l setting the TAI offset): two clock reads, and a map write
    /// when it changed; called about once a second.
    pub fn refresh(&mut self) {
        let off = tai_minus_realtime_s();
        if off == self.tai_written {
            return;
        }
        match set_tai_offset(&self.skel, off) {
            Ok(()) => {
                tracing::info!(
                    from_s = self.tai_written,
                    to_s = off,
                    "TAI - UTC offset changed: RX latencies follow it"
                );
                self.tai_written = off;
            }
            // Tried again at the next refresh.
            Err(e) => tracing::warn!("cannot update the TAI offset: {e}"),
        }
    }

    /// The attached programs, for bpf_stats.
    pub fn programs(&self) -> Vec<BorrowedFd<'_>> {
        self.skel
            .object()
            .progs()
            .filter(|p| p.autoload())
            .map(|p| {
                let fd = p.as_fd().as_raw_fd();
                // SAFETY: the fd is the program's, owned by the object
                // `self.skel` holds, open as long as `self` is borrowed.
                unsafe { BorrowedFd::borrow_raw(fd) }
            })
            .collect()
    }
}

/// Write CLOCK_TAI - CLOCK_REALTIME (s) into the program's `tai_offset`
/// map, which each RX hook rereads every 134 ms.
fn set_tai_offset(skel: &skel::MetricsSkel<'_>, secs: u32) -> Result<(), MetricsError> {
    skel.maps
        .tai_offset
        .update(&0u32.to_ne_bytes(), &secs.to_ne_bytes(), MapFlags::ANY)
        .map_err(map_err("tai_offset"))
}

/// CLOCK_TAI - CLOCK_REALTIME, s: the kernel keeps it a whole number of
/// seconds within 0..100000, so the two reads' gap rounds away.
fn tai_minus_realtime_s() -> u32 {
    use clocksync::bracket::now_ns;
    use clocksync::ClockId;
    let (Ok(real), Ok(tai)) = (now_ns(ClockId::Realtime), now_ns(ClockId::Tai)) else {
        return 0;
    };
    ((tai as f64 - real as f64) / 1e9)
        .round()
        .clamp(0.0, f64::from(u32::MAX)) as u32
}
