//! The drops probe (`ebpf/drops.bpf.c`): a tp_btf program on
//! `skb:kfree_skb` that records every skb the kernel frees as a drop in the
//! traced network namespace; here it is loaded, attached, read, and each
//! record becomes a DROP wire event carrying its reason and location both
//! as numbers and as names resolved on this host (kernel BTF for reasons,
//! /proc/kallsyms for locations, both read once at load: see names.rs).
//!
//! Numbers shared with the BPF side come from the skeleton's `types`
//! (generated from `ebpf/include/tracer.h`), as in the TX probe.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, OpenObject};
use tracer_codec::drop::padded;
use tracer_codec::DropEvent;

use super::interface::{
    Collector, Probe, ProbeConfig, ProbeCounters, ProbeError, ProbeEvent, ProbeSpec,
};
use super::slots::{self, Drained, RecordError, SlotRing};
use crate::preflight::PreflightError;

pub mod names;

use names::{DropReasons, Kallsyms};

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
    include!(concat!(env!("OUT_DIR"), "/drops.skel.rs"));
}

use skel::types::{drop_counter, drop_record, record_hdr, record_kind};

// SAFETY: drop_record is a skeleton copy of a C struct of integers and arrays
// of integers: every bit pattern is a valid value.
unsafe impl slots::PlainRecord for drop_record {}
use skel::DropsSkel;

/// Registry entry of this probe.
pub const SPEC: ProbeSpec = ProbeSpec {
    name: NAME,
    about: "skb drops (skb:kfree_skb) with reason and location names",
    check,
    open,
};

const NAME: &str = "drops";

/// `enum record_kind` value of drop records.
const RECORD_DROP: u16 = record_kind::RECORD_DROP.0 as u16;
/// Length of the per-CPU counter array.
const N_COUNTERS: usize = drop_counter::DROP_CTR_MAX.0 as usize;
/// Byte offset of the commit word every slot's header ends with.
const COMMIT_OFFSET: usize = std::mem::offset_of!(record_hdr, commit);

const _: () = assert!(record_kind::RECORD_DROP.0 <= u16::MAX as u32);
// The wire body is the BPF record without its ring header and padding,
// plus the global stamp and the two names the agent adds: a field added on
// one side only stops the build.
const _: () = assert!(
    DropEvent::BODY_LEN
        == std::mem::size_of::<drop_record>() - std::mem::size_of::<record_hdr>()
            - std::mem::size_of::<u32>() // _pad
            + std::mem::size_of::<u64>() // global_ns
            + tracer_codec::drop::DROP_REASON_NAME_LEN
            + tracer_codec::drop::DROP_LOCATION_SYM_LEN
);
const _: () = {
    let used = [
        drop_counter::DROP_CTR_LOST,
        drop_counter::DROP_CTR_SEEN,
        drop_counter::DROP_CTR_NO_NETNS,
    ];
    let mut i = 0;
    while i < used.len() {
        assert!((used[i].0 as usize) < N_COUNTERS);
        i += 1;
    }
};

/// Preflight: tp_btf programs load on every kernel with BTF, which the
/// agent's preflight already requires; nothing more to check here.
fn check(_cfg: &ProbeConfig) -> Result<(), PreflightError> {
    Ok(())
}

fn open<'obj>(
    object: &'obj mut MaybeUninit<OpenObject>,
    cfg: &ProbeConfig,
) -> Result<Box<dyn Probe + 'obj>, ProbeError> {
    Ok(Box::new(DropsProbe::load(object, cfg)?))
}

fn load_err(source: libbpf_rs::Error) -> ProbeError {
    ProbeError::Load {
        probe: NAME,
        source,
    }
}

fn map_err(map: &'static str) -> impl FnOnce(libbpf_rs::Error) -> ProbeError {
    move |source| ProbeError::Map {
        probe: NAME,
        map,
        source,
    }
}

/// Reason and location names of this host, resolved once per run.
#[derive(Debug, Clone, Default)]
pub struct Names {
    /// `enum skb_drop_reason` of the running kernel.
    pub reasons: DropReasons,
    /// /proc/kallsyms.
    pub kallsyms: Kallsyms,
}

impl Names {
    /// Read both; either one missing leaves its names empty (events then
    /// carry numbers only), with a warning: drops are still worth seeing.
    pub fn load(btf: &std::path::Path) -> Self {
        let reasons = DropReasons::from_btf(btf).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "drop reasons will have no names");
            DropReasons::default()
        });
        let kallsyms = Kallsyms::load().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot read /proc/kallsyms: drop locations stay addresses");
            Kallsyms::default()
        });
        if kallsyms.is_empty() {
            tracing::warn!(
                "/proc/kallsyms shows no addresses (not root?): drop locations stay addresses"
            );
        }
        Names { reasons, kallsyms }
    }
}

/// A loaded drops probe. Dropping it detaches the program.
pub struct DropsProbe<'obj> {
    skel: DropsSkel<'obj>,
    link: Option<Link>,
    ring: SlotRing,
    names: Names,
}

impl<'obj> DropsProbe<'obj> {
    /// Open, configure and load the probe (not attached).
    pub fn load(
        object: &'obj mut MaybeUninit<OpenObject>,
        cfg: &ProbeConfig,
    ) -> Result<Self, ProbeError> {
        let mut open = skel::DropsSkelBuilder::default()
            .open(object)
            .map_err(load_err)?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.target_netns = cfg.target_netns;
            crate::write_flow_filter!(ro, &cfg.filter);
            crate::write_self_traffic!(ro, &cfg.self_traffic);
            ro.slots_per_cpu = cfg.slots_per_cpu;
        }
        let ncpu = libbpf_rs::num_possible_cpus().map_err(load_err)?;
        let entries = (ncpu as u64 * u64::from(cfg.slots_per_cpu)).min(u64::from(u32::MAX)) as u32;
        open.maps.slots.set_max_entries(entries).map_err(load_err)?;
        let skel = open.load().map_err(load_err)?;
        let heads = read_heads(&skel)?;
        let ring = SlotRing::new(
            skel.maps.slots.as_fd(),
            std::mem::size_of::<drop_record>(),
            COMMIT_OFFSET,
            cfg.slots_per_cpu,
            &heads,
        )
        .map_err(|e| map_err("slots")(libbpf_rs::Error::from(e)))?;
        Ok(DropsProbe {
            skel,
            link: None,
            ring,
            names: Names::load(&cfg.btf),
        })
    }
}

impl Probe for DropsProbe<'_> {
    fn name(&self) -> &'static str {
        NAME
    }

    fn attach(&mut self) -> Result<(), ProbeError> {
        let link = self
            .skel
            .progs
            .drop_kfree_skb
            .attach()
            .map_err(|source| ProbeError::Load {
                probe: NAME,
                source,
            })?;
        self.link = Some(link);
        Ok(())
    }

    fn drain(&mut self, out: &mut dyn Collector) -> Result<Drained, ProbeError> {
        let heads = read_heads(&self.skel)?;
        let names = &self.names;
        Ok(self.ring.drain(&heads, |data| deliver(data, names, out)))
    }

    fn counters(&self) -> Result<ProbeCounters, ProbeError> {
        let c = read_counters(&self.skel)?;
        let at = |i: drop_counter| c[i.0 as usize];
        Ok(ProbeCounters {
            ringbuf_lost: at(drop_counter::DROP_CTR_LOST),
            drops_seen: at(drop_counter::DROP_CTR_SEEN),
            drops_unattributed: at(drop_counter::DROP_CTR_NO_NETNS),
            ..Default::default()
        })
    }

    fn doorbell(&self) -> Result<libbpf_rs::MapHandle, ProbeError> {
        libbpf_rs::MapHandle::try_from(&self.skel.maps.doorbell).map_err(map_err("doorbell"))
    }

    fn programs(&self) -> Vec<BorrowedFd<'_>> {
        vec![self.skel.progs.drop_kfree_skb.as_fd()]
    }

    fn detach(&mut self) {
        self.link.take();
    }
}

/// Decode and validate one ring record, and hand its event (or its error)
/// to `out`.
fn deliver(data: &[u8], names: &Names, out: &mut dyn Collector) {
    match DropRecord::decode(data) {
        Ok(rec) => {
            let mono_ns = out.local_mono(rec.0.mono_ns);
            let ev = DropEvent {
                mono_ns,
                ..rec.to_event(out.global_ns(mono_ns), names)
            };
            out.event(ProbeEvent::Drop(&ev))
        }
        Err(e) => out.bad_record(NAME, e),
    }
}

fn read_counters(skel: &DropsSkel<'_>) -> Result<[u64; N_COUNTERS], ProbeError> {
    slots::sum_percpu(&skel.maps.counters).map_err(map_err("counters"))
}

fn read_heads(skel: &DropsSkel<'_>) -> Result<Vec<u64>, ProbeError> {
    slots::read_heads(&skel.maps.heads).map_err(map_err("heads"))
}

/// A drop record, decoded and validated.
#[derive(Debug, Clone, Copy)]
pub struct DropRecord(drop_record);

impl DropRecord {
    /// Decode a probe record and check what the wire format relies on
    /// (kind, length, family); never panics on bad input.
    pub fn decode(data: &[u8]) -> Result<Self, RecordError> {
        let rec: drop_record = slots::read_record(data, RECORD_DROP)?;
        if !tracer_codec::FLOW_FAMILY.contains(rec.family.into()) {
            return Err(RecordError::BadFamily(rec.family));
        }
        Ok(DropRecord(rec))
    }

    /// The wire event, with `global_ns` from the caller's clock and the
    /// names from this host's tables.
    pub fn to_event(&self, global_ns: u64, names: &Names) -> DropEvent {
        let r = &self.0;
        DropEvent {
            mono_ns: r.mono_ns,
            global_ns,
            location: r.location,
            reason: r.reason,
            netns: r.netns,
            ifindex: r.ifindex,
            cpu: r.cpu,
            len: r.len,
            protocol: r.protocol,
            family: r.family,
            l4proto: r.l4proto,
            sport: r.sport,
            dport: r.dport,
            saddr: r.saddr,
            daddr: r.daddr,
            reason_name: padded(names.reasons.name(r.reason).unwrap_or("")),
            location_sym: padded(&names.kallsyms.symbolize(r.location).unwrap_or_default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> drop_record {
        drop_record {
            hdr: record_hdr {
                kind: RECORD_DROP,
                len: std::mem::size_of::<drop_record>() as u16,
                commit: 1,
            },
            mono_ns: 5,
            location: 0xffff_ffff_8100_0010,
            reason: 3,
            family: 4,
            l4proto: 17,
            sport: 1,
            dport: 2,
            ..Default::default()
        }
    }

    fn bytes(r: &drop_record) -> Vec<u8> {
        // SAFETY: drop_record is repr(C) plain data; we view its bytes.
        unsafe {
            std::slice::from_raw_parts(
                (r as *const drop_record).cast::<u8>(),
                size_of::<drop_record>(),
            )
        }
        .to_vec()
    }

    fn names() -> Names {
        Names {
            reasons: DropReasons::from_enumerators([("SKB_DROP_REASON_NO_SOCKET".into(), 3)]),
            kallsyms: Kallsyms::parse("ffffffff81000000 T udp_rcv\n"),
        }
    }

    #[test]
    fn decode_unaligned_and_name() {
        let mut buf = vec![0u8];
        buf.extend(bytes(&sample()));
        let ev = DropRecord::decode(&buf[1..]).unwrap().to_event(9, &names());
        assert_eq!((ev.mono_ns, ev.global_ns, ev.reason), (5, 9, 3));
        assert_eq!(ev.reason_str(), "NO_SOCKET");
        assert_eq!(ev.location_str(), "udp_rcv+0x10");
        let mut r = sample();
        r.reason = 77;
        let ev = DropRecord::decode(&bytes(&r))
            .unwrap()
            .to_event(9, &names());
        assert_eq!(ev.reason_str(), "reason 77");
    }

    #[test]
    fn decode_rejects_bad_records() {
        let b = bytes(&sample());
        assert_eq!(
            DropRecord::decode(&b[..10]).unwrap_err(),
            RecordError::Short(10)
        );
        let mut s = sample();
        s.hdr.kind = 1;
        assert_eq!(
            DropRecord::decode(&bytes(&s)).unwrap_err(),
            RecordError::UnknownKind(1)
        );
        let mut s = sample();
        s.hdr.len = 8;
        assert!(matches!(
            DropRecord::decode(&bytes(&s)),
            Err(RecordError::BadLen { got: 8, .. })
        ));
        for family in [0, 4, 6] {
            let mut s = sample();
            s.family = family;
            assert!(DropRecord::decode(&bytes(&s)).is_ok());
        }
        let mut s = sample();
        s.family = 2;
        assert_eq!(
            DropRecord::decode(&bytes(&s)).unwrap_err(),
            RecordError::BadFamily(2)
        );
    }
}
