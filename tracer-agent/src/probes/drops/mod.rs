//! The drops probe (`ebpf/drops.bpf.c`): a tp_btf program on
//! `skb:kfree_skb` that records every skb the kernel frees as a drop in the
//! traced network namespace; here, its spec and the decoder of its records
//! into DROP wire events (the probe core does the rest), each carrying its
//! reason and location both as numbers and as names resolved on this host
//! (kernel BTF for reasons, /proc/kallsyms for locations, both read once at
//! load: see names.rs).
//!
//! Numbers shared with the BPF side come from the skeleton's `types`
//! (generated from `ebpf/include/tracer.h`), as in the TX probe.

use tracer_codec::drop::padded;
use tracer_codec::DropEvent;

use super::core::{self, Attach, Counters, OpenSkelOf, ProbeKind};
use super::interface::{ProbeConfig, ProbeCounters, ProbeSpec};
use super::slots::{self, PlainRecord, RecordError};

pub mod names;

use names::{LocationNames, Names};
use std::cell::RefCell;

crate::bpf_skeleton!("drops");

use skel::types::{drop_counter, drop_record, live_ethertype, record_hdr, record_kind, rodata};

// SAFETY: drop_record is a skeleton copy of a C struct of integers and arrays
// of integers: every bit pattern is a valid value.
unsafe impl PlainRecord for drop_record {
    const KIND: u16 = record_kind::RECORD_DROP.0 as u16;
    const COMMIT_OFFSET: usize = std::mem::offset_of!(drop_record, hdr.commit);
}
crate::shared_rodata!(rodata);

/// Registry entry of this probe.
pub const SPEC: ProbeSpec = core::spec::<Drops>();

/// Length of the per-CPU counter array.
const N_COUNTERS: usize = drop_counter::DROP_CTR_MAX.0 as usize;

const _: () = assert!(record_kind::RECORD_DROP.0 <= u16::MAX as u32);
// The probe ignores the frames of a live interface by this EtherType.
const _: () = assert!(live_ethertype::NT_LIVE_ETHERTYPE.0 == tracer_codec::LIVE_ETHERTYPE as u32);
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

/// The drops probe: the names it gives reasons and locations.
#[derive(Debug)]
pub struct Drops {
    names: Names,
    /// Locations already named (decode runs on the drain thread only).
    locations: RefCell<LocationNames>,
}

// No check of its own: tp_btf programs load on every kernel with BTF,
// which the agent's preflight already requires.
impl ProbeKind for Drops {
    const NAME: &'static str = "drops";
    const ABOUT: &'static str = "skb drops (skb:kfree_skb) with reason and location names";
    const PROGRAMS: &'static [Attach] = &[Attach::Tracepoint("drop_kfree_skb")];
    type Builder = skel::DropsSkelBuilder;
    type Rodata = rodata;
    type Record = drop_record;
    type Event = DropEvent;

    fn rodata<'a>(open: &'a mut OpenSkelOf<'_, Self>) -> Option<&'a mut rodata> {
        open.maps.rodata_data.as_deref_mut()
    }

    fn new(cfg: &ProbeConfig) -> Self {
        Drops {
            names: Names::load(&cfg.btf),
            locations: RefCell::default(),
        }
    }

    /// Checks what the wire format relies on (kind, length, family), and
    /// names reason and location from this host's tables.
    fn decode(&self, data: &[u8]) -> Result<DropEvent, RecordError> {
        let r: drop_record = slots::read_record(data)?;
        if !tracer_codec::FLOW_FAMILY.contains(r.family.into()) {
            return Err(RecordError::BadFamily(r.family));
        }
        let names = &self.names;
        Ok(DropEvent {
            mono_ns: r.mono_ns,
            global_ns: 0,
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
            location_sym: self
                .locations
                .borrow_mut()
                .name(&names.kallsyms, r.location),
        })
    }

    fn counters(c: &Counters) -> ProbeCounters {
        ProbeCounters {
            ringbuf_lost: c.at(drop_counter::DROP_CTR_LOST.0),
            drops_seen: c.at(drop_counter::DROP_CTR_SEEN.0),
            drops_unattributed: c.at(drop_counter::DROP_CTR_NO_NETNS.0),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::names::{DropReasons, Kallsyms};
    use super::*;
    use crate::probes::slots::record_bytes as bytes;

    fn sample() -> drop_record {
        drop_record {
            hdr: record_hdr {
                kind: drop_record::KIND,
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

    fn drops() -> Drops {
        Drops {
            names: Names {
                reasons: DropReasons::from_enumerators([("SKB_DROP_REASON_NO_SOCKET".into(), 3)]),
                kallsyms: Kallsyms::parse("ffffffff81000000 T udp_rcv\n"),
            },
            locations: RefCell::default(),
        }
    }

    #[test]
    fn decode_unaligned_and_name() {
        let mut buf = vec![0u8];
        buf.extend(bytes(&sample()));
        let ev = drops().decode(&buf[1..]).unwrap();
        assert_eq!((ev.mono_ns, ev.global_ns, ev.reason), (5, 0, 3));
        assert_eq!(ev.reason_str(), "NO_SOCKET");
        assert_eq!(ev.location_str(), "udp_rcv+0x10");
        let mut r = sample();
        r.reason = 77;
        let ev = drops().decode(&bytes(&r)).unwrap();
        assert_eq!(ev.reason_str(), "reason 77");
    }

    #[test]
    fn decode_rejects_bad_records() {
        let d = drops();
        let b = bytes(&sample());
        assert_eq!(d.decode(&b[..10]).unwrap_err(), RecordError::Short(10));
        let mut s = sample();
        s.hdr.kind = 1;
        assert_eq!(
            d.decode(&bytes(&s)).unwrap_err(),
            RecordError::UnknownKind(1)
        );
        let mut s = sample();
        s.hdr.len = 8;
        assert!(matches!(
            d.decode(&bytes(&s)),
            Err(RecordError::BadLen { got: 8, .. })
        ));
        for family in [0, 4, 6] {
            let mut s = sample();
            s.family = family;
            assert!(d.decode(&bytes(&s)).is_ok());
        }
        let mut s = sample();
        s.family = 2;
        assert_eq!(d.decode(&bytes(&s)).unwrap_err(), RecordError::BadFamily(2));
    }
}
