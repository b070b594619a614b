//! The TX timestamping probe (`ebpf/tx.bpf.c`): a sockops program
//! attached to a cgroup that turns on BPF TX timestamping and writes one
//! record per callback into its slot ring; here it is loaded, attached,
//! read, validated and turned into wire events.
//!
//! Every number shared with the BPF side (record kind, stages, counter
//! indices, record layout) comes from the skeleton's `types`, generated from
//! the object's BTF, i.e. from `ebpf/include/tracer.h`. Where a value must
//! also match the wire codec, a compile-time assert below ties the two.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, OpenObject};
use tracer_codec::{TxEvent, TxStage};

use super::interface::{
    Collector, Probe, ProbeConfig, ProbeCounters, ProbeError, ProbeEvent, ProbeSpec,
};
use super::slots::{self, Drained, RecordError, SlotRing};
use crate::preflight::{self, PreflightError};

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
    include!(concat!(env!("OUT_DIR"), "/tx.skel.rs"));
}

use skel::types::{counter, record_hdr, record_kind, tx_flag, tx_record, tx_stage};

// SAFETY: tx_record is a skeleton copy of a C struct of integers and arrays
// of integers: every bit pattern is a valid value.
unsafe impl slots::PlainRecord for tx_record {}
use skel::TxSkel;

/// Registry entry of this probe.
pub const SPEC: ProbeSpec = ProbeSpec {
    name: NAME,
    about: "BPF TX timestamping of TCP sends: SENDMSG, SCHED, SND_SW, SND_HW, ACK (Linux >= 6.15)",
    check,
    open,
};

const NAME: &str = "tx";

/// `enum record_kind` value of TX records.
const RECORD_TX: u16 = record_kind::RECORD_TX.0 as u16;
/// Length of the per-CPU counter array (`CTR_MAX`).
const N_COUNTERS: usize = counter::CTR_MAX.0 as usize;
/// Byte offset of the commit word every slot's header ends with.
const COMMIT_OFFSET: usize = std::mem::offset_of!(record_hdr, commit);

// The kind must fit record_hdr.kind.
const _: () = assert!(record_kind::RECORD_TX.0 <= u16::MAX as u32);

// C `enum tx_stage` and the codec's TxStage carry the same wire values: a
// stage added, removed or renumbered on one side only stops the build.
const _: () = {
    assert!(tx_stage::TX_STAGE_MAX.0 as usize == TxStage::ALL.len());
    assert!(tx_stage::TX_SENDMSG.0 == TxStage::Sendmsg as u32);
    assert!(tx_stage::TX_SCHED.0 == TxStage::Sched as u32);
    assert!(tx_stage::TX_SND_SW.0 == TxStage::SndSw as u32);
    assert!(tx_stage::TX_SND_HW.0 == TxStage::SndHw as u32);
    assert!(tx_stage::TX_ACK.0 == TxStage::Ack as u32);
};

// tx_record.flags is the wire's tx_flags, bit for bit.
const _: () = {
    assert!(tx_flag::TX_F_RANGE.0 == tracer_codec::TX_FLAG_RANGE as u32);
    assert!(tx_flag::TX_F_SENT.0 == tracer_codec::TX_FLAG_SENT as u32);
};

// The wire body is the BPF record without its ring header and padding,
// plus the global stamp the agent adds: a field added to tx_record without
// its place in the codec's TxEvent (or the reverse) stops the build.
const _: () = assert!(
    TxEvent::BODY_LEN
        == std::mem::size_of::<tx_record>() - std::mem::size_of::<record_hdr>()
            - std::mem::size_of::<u8>() // _pad
            - std::mem::size_of::<u32>() // _pad2
            + std::mem::size_of::<u64>() // global_ns
);
// Every counter read below lies inside the counter array.
const _: () = {
    let used = [
        counter::CTR_RB_LOST,
        counter::CTR_SETSOCKOPT_ERR,
        counter::CTR_TAG_ERR,
        counter::CTR_SOCKETS,
        counter::CTR_SENDMSG_SEEN,
    ];
    let mut i = 0;
    while i < used.len() {
        assert!((used[i].0 as usize) < N_COUNTERS);
        i += 1;
    }
};
// `--ring-slots`'s help quotes the slot size.
const _: () = assert!(std::mem::size_of::<tx_record>() == 120);

/// Preflight: the kernel must have BPF TX timestamping.
fn check(cfg: &ProbeConfig) -> Result<(), PreflightError> {
    preflight::check_tx_timestamping(&cfg.btf)
}

/// [`SPEC`]'s open: open, configure and load (not attached).
fn open<'obj>(
    object: &'obj mut MaybeUninit<OpenObject>,
    cfg: &ProbeConfig,
) -> Result<Box<dyn Probe + 'obj>, ProbeError> {
    Ok(Box::new(TxProbe::load(object, cfg)?))
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

/// A loaded TX probe. Dropping it detaches the program.
pub struct TxProbe<'obj> {
    skel: TxSkel<'obj>,
    cgroup: std::path::PathBuf,
    link: Option<Link>,
    ring: SlotRing,
}

impl<'obj> TxProbe<'obj> {
    /// Open, configure and load the probe. `object` holds the BPF object
    /// for the probe's lifetime.
    pub fn load(
        object: &'obj mut MaybeUninit<OpenObject>,
        cfg: &ProbeConfig,
    ) -> Result<Self, ProbeError> {
        let builder = skel::TxSkelBuilder::default();
        let mut open = builder.open(object).map_err(load_err)?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.target_netns = cfg.target_netns;
            crate::write_flow_filter!(ro, &cfg.filter);
            ro.sample_threshold = tracer_codec::sample::threshold(cfg.sample_every);
            ro.slots_per_cpu = cfg.slots_per_cpu;
        }
        let ncpu = libbpf_rs::num_possible_cpus().map_err(load_err)?;
        let entries = (ncpu as u64 * u64::from(cfg.slots_per_cpu)).min(u64::from(u32::MAX)) as u32;
        open.maps.slots.set_max_entries(entries).map_err(load_err)?;
        let skel = open.load().map_err(load_err)?;
        let heads = read_heads(&skel)?;
        let ring = SlotRing::new(
            skel.maps.slots.as_fd(),
            std::mem::size_of::<tx_record>(),
            COMMIT_OFFSET,
            cfg.slots_per_cpu,
            &heads,
        )
        .map_err(|e| map_err("slots")(libbpf_rs::Error::from(e)))?;
        Ok(TxProbe {
            skel,
            cgroup: cfg.cgroup.clone(),
            link: None,
            ring,
        })
    }
}

impl Probe for TxProbe<'_> {
    fn name(&self) -> &'static str {
        NAME
    }

    fn attach(&mut self) -> Result<(), ProbeError> {
        let dir = std::fs::File::open(&self.cgroup).map_err(|source| ProbeError::Cgroup {
            path: self.cgroup.clone(),
            source,
        })?;
        let link = self
            .skel
            .progs
            .tx_tstamp
            .attach_cgroup(dir.as_raw_fd())
            .map_err(|source| ProbeError::Attach {
                probe: NAME,
                path: self.cgroup.clone(),
                source,
            })?;
        self.link = Some(link);
        Ok(())
    }

    fn drain(&mut self, out: &mut dyn Collector) -> Result<Drained, ProbeError> {
        let heads = read_heads(&self.skel)?;
        Ok(self.ring.drain(&heads, |data| deliver(data, out)))
    }

    fn counters(&self) -> Result<ProbeCounters, ProbeError> {
        let c = read_counters(&self.skel)?;
        let at = |i: counter| c[i.0 as usize];
        Ok(ProbeCounters {
            ringbuf_lost: at(counter::CTR_RB_LOST),
            setsockopt_errors: at(counter::CTR_SETSOCKOPT_ERR),
            tag_errors: at(counter::CTR_TAG_ERR),
            sockets: at(counter::CTR_SOCKETS),
            sendmsg_seen: at(counter::CTR_SENDMSG_SEEN),
            ..ProbeCounters::default()
        })
    }

    fn doorbell(&self) -> Result<libbpf_rs::MapHandle, ProbeError> {
        libbpf_rs::MapHandle::try_from(&self.skel.maps.doorbell).map_err(map_err("doorbell"))
    }

    fn programs(&self) -> Vec<BorrowedFd<'_>> {
        vec![self.skel.progs.tx_tstamp.as_fd()]
    }

    fn detach(&mut self) {
        self.link.take();
    }
}

/// Decode and validate one ring record, and hand its event (or its error)
/// to `out`.
fn deliver(data: &[u8], out: &mut dyn Collector) {
    match TxRecord::decode(data) {
        Ok(rec) => {
            let mono_ns = out.local_mono(rec.mono_ns());
            let ev = TxEvent {
                mono_ns,
                ..rec.to_event(out.global_ns(mono_ns))
            };
            out.event(ProbeEvent::Tx(&ev))
        }
        Err(e) => out.bad_record(NAME, e),
    }
}

/// Every counter of the per-CPU `counters` array, summed over CPUs.
fn read_counters(skel: &TxSkel<'_>) -> Result<[u64; N_COUNTERS], ProbeError> {
    slots::sum_percpu(&skel.maps.counters).map_err(map_err("counters"))
}

/// The per-CPU producer counters.
fn read_heads(skel: &TxSkel<'_>) -> Result<Vec<u64>, ProbeError> {
    slots::read_heads(&skel.maps.heads).map_err(map_err("heads"))
}

/// A record the probe wrote, decoded and validated.
#[derive(Debug, Clone, Copy)]
pub struct TxRecord(tx_record);

impl TxRecord {
    /// Decode a probe record and check what the wire format relies on
    /// (kind, length, stage, family); never panics on bad input.
    pub fn decode(data: &[u8]) -> Result<Self, RecordError> {
        let rec: tx_record = slots::read_record(data, RECORD_TX)?;
        if TxStage::from_u8(rec.stage).is_none() {
            return Err(RecordError::UnknownStage(rec.stage));
        }
        if !matches!(rec.family, 4 | 6) {
            return Err(RecordError::BadFamily(rec.family));
        }
        Ok(TxRecord(rec))
    }

    /// Raw monotonic stamp.
    pub fn mono_ns(&self) -> u64 {
        self.0.mono_ns
    }

    /// The stage (validated by [`TxRecord::decode`]).
    pub fn stage(&self) -> u8 {
        self.0.stage
    }

    /// The wire event, with `global_ns` filled in by the caller's clock.
    pub fn to_event(&self, global_ns: u64) -> TxEvent {
        let r = &self.0;
        let mut comm = [0u8; 16];
        for (d, s) in comm.iter_mut().zip(r.comm.iter()) {
            *d = *s as u8;
        }
        TxEvent {
            mono_ns: r.mono_ns,
            global_ns,
            hw_ns: r.hw_ns,
            cookie: r.cookie,
            tskey: r.tskey,
            seq: r.seq,
            netns: r.netns,
            cpu: r.cpu,
            pid: r.pid,
            tid: r.tid,
            stage: r.stage,
            family: r.family,
            sport: r.sport,
            dport: r.dport,
            saddr: r.saddr,
            daddr: r.daddr,
            comm,
            end_seq: r.end_seq,
            tx_flags: r.flags,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> tx_record {
        tx_record {
            hdr: record_hdr {
                kind: RECORD_TX,
                len: std::mem::size_of::<tx_record>() as u16,
                commit: 1,
            },
            mono_ns: 5,
            cookie: 9,
            tskey: 77,
            stage: tx_stage::TX_SND_SW.0 as u8,
            family: 4,
            sport: 1,
            dport: 2,
            comm: [b'a' as i8; 16],
            ..Default::default()
        }
    }

    fn bytes(r: &tx_record) -> Vec<u8> {
        // SAFETY: tx_record is repr(C) plain data; we view its bytes.
        unsafe {
            std::slice::from_raw_parts((r as *const tx_record).cast::<u8>(), size_of::<tx_record>())
        }
        .to_vec()
    }

    #[test]
    fn decode_unaligned_and_convert() {
        let mut buf = vec![0u8];
        buf.extend(bytes(&sample()));
        let rec = TxRecord::decode(&buf[1..]).unwrap();
        let ev = rec.to_event(123);
        assert_eq!(
            (ev.mono_ns, ev.global_ns, ev.cookie, ev.tskey, ev.stage),
            (5, 123, 9, 77, TxStage::SndSw as u8)
        );
        assert_eq!(&ev.comm, b"aaaaaaaaaaaaaaaa");
    }

    #[test]
    fn decode_rejects_short_and_unknown() {
        let b = bytes(&sample());
        assert_eq!(
            TxRecord::decode(&b[..50]).unwrap_err(),
            RecordError::Short(50)
        );
        let mut s = sample();
        s.hdr.kind = 9;
        assert_eq!(
            TxRecord::decode(&bytes(&s)).unwrap_err(),
            RecordError::UnknownKind(9)
        );
    }

    #[test]
    fn decode_validates_length_stage_and_family() {
        let mut s = sample();
        s.hdr.len = 40;
        assert_eq!(
            TxRecord::decode(&bytes(&s)).unwrap_err(),
            RecordError::BadLen {
                got: 40,
                want: size_of::<tx_record>()
            }
        );
        let mut s = sample();
        s.stage = tx_stage::TX_STAGE_MAX.0 as u8;
        assert_eq!(
            TxRecord::decode(&bytes(&s)).unwrap_err(),
            RecordError::UnknownStage(s.stage)
        );
        for family in [0, 2, 5, 10, 255] {
            let mut s = sample();
            s.family = family;
            assert_eq!(
                TxRecord::decode(&bytes(&s)).unwrap_err(),
                RecordError::BadFamily(family)
            );
        }
        // Every stage the C header defines and both families pass.
        for stage in 0..tx_stage::TX_STAGE_MAX.0 as u8 {
            for family in [4, 6] {
                let mut s = sample();
                s.stage = stage;
                s.family = family;
                assert!(TxRecord::decode(&bytes(&s)).is_ok(), "{stage} {family}");
            }
        }
    }

    /// Collects what a drain delivers.
    #[derive(Default)]
    struct Seen {
        events: Vec<TxEvent>,
        bad: Vec<RecordError>,
    }

    impl Collector for Seen {
        fn global_ns(&self, mono_ns: u64) -> u64 {
            mono_ns + 1000
        }
        fn realtime_to_global_ns(&self, _realtime_ns: u64) -> u64 {
            unreachable!("TX records carry no REALTIME stamp")
        }
        fn event(&mut self, ev: ProbeEvent<'_>) {
            match ev {
                ProbeEvent::Tx(ev) => self.events.push(*ev),
                other => panic!("the tx probe delivered {other:?}"),
            }
        }
        fn bad_record(&mut self, probe: &'static str, err: RecordError) {
            assert_eq!(probe, "tx");
            self.bad.push(err);
        }
    }

    #[test]
    fn a_bad_record_is_dropped_alone_and_its_neighbours_delivered() {
        let mut bad_stage = sample();
        bad_stage.stage = 200;
        let mut bad_family = sample();
        bad_family.family = 7;
        let mut seen = Seen::default();
        for r in [sample(), bad_stage, sample(), bad_family, sample()] {
            deliver(&bytes(&r), &mut seen);
        }
        assert_eq!(
            seen.bad,
            [RecordError::UnknownStage(200), RecordError::BadFamily(7)]
        );
        assert_eq!(seen.events.len(), 3);
        assert!(seen.events.iter().all(|e| e.global_ns == 1005));
        // Each delivered event encodes: none would make the sink reject
        // the datagram.
        let mut b = tracer_codec::DatagramBuilder::new("h", 65000);
        for e in &seen.events {
            assert!(b.push_tx(e));
        }
    }

    #[test]
    fn the_event_carries_and_converts_the_stamp_as_the_host_clock_reads_it() {
        /// A host whose clock reads 7 ns ahead of the kernel's.
        struct Ahead(Seen);
        impl Collector for Ahead {
            fn local_mono(&mut self, raw_ns: u64) -> u64 {
                raw_ns + 7
            }
            fn global_ns(&self, mono_ns: u64) -> u64 {
                self.0.global_ns(mono_ns)
            }
            fn realtime_to_global_ns(&self, realtime_ns: u64) -> u64 {
                self.0.realtime_to_global_ns(realtime_ns)
            }
            fn event(&mut self, ev: ProbeEvent<'_>) {
                self.0.event(ev)
            }
            fn bad_record(&mut self, probe: &'static str, err: RecordError) {
                self.0.bad_record(probe, err)
            }
        }
        let mut seen = Ahead(Seen::default());
        deliver(&bytes(&sample()), &mut seen);
        let e = &seen.0.events[0];
        assert_eq!((e.mono_ns, e.global_ns), (12, 1012));
    }
}
