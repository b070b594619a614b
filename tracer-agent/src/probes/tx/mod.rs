//! The TX timestamping probe (`ebpf/tx.bpf.c`): a sockops program
//! attached to a cgroup that turns on BPF TX timestamping and writes one
//! record per callback into its slot ring; here, its spec and the decoder
//! of its records into wire events (the probe core does the rest).
//!
//! Every number shared with the BPF side (record kind, stages, counter
//! indices, record layout) comes from the skeleton's `types`, generated from
//! the object's BTF, i.e. from `ebpf/include/tracer.h`. Where a value must
//! also match the wire codec, a compile-time assert below ties the two.

use tracer_codec::{TxEvent, TxStage};

use super::core::{self, Attach, Counters, OpenSkelOf, ProbeKind};
use super::interface::{ProbeConfig, ProbeCounters, ProbeSpec};
use super::slots::{self, PlainRecord, RecordError};
use crate::preflight::{self, PreflightError};

crate::bpf_skeleton!("tx");

use skel::types::{counter, record_hdr, record_kind, rodata, tx_flag, tx_record, tx_stage};

// SAFETY: tx_record is a skeleton copy of a C struct of integers and arrays
// of integers: every bit pattern is a valid value.
unsafe impl PlainRecord for tx_record {
    const KIND: u16 = record_kind::RECORD_TX.0 as u16;
    const COMMIT_OFFSET: usize = std::mem::offset_of!(tx_record, hdr.commit);
}
crate::shared_rodata!(rodata, sample_threshold);

/// Registry entry of this probe.
pub const SPEC: ProbeSpec = core::spec::<Tx>();

/// Length of the per-CPU counter array (`CTR_MAX`).
const N_COUNTERS: usize = counter::CTR_MAX.0 as usize;

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

/// The TX probe (no state of its own).
#[derive(Debug)]
pub struct Tx;

impl ProbeKind for Tx {
    const NAME: &'static str = "tx";
    const ABOUT: &'static str =
        "BPF TX timestamping of TCP sends: SENDMSG, SCHED, SND_SW, SND_HW, ACK (Linux >= 6.15)";
    const PROGRAMS: &'static [Attach] = &[Attach::Cgroup("tx_tstamp")];
    /// TCP only: it cannot see nettrace's UDP.
    const SEES_SELF_TRAFFIC: bool = false;
    type Builder = skel::TxSkelBuilder;
    type Rodata = rodata;
    type Record = tx_record;
    type Event = TxEvent;

    /// The kernel must have BPF TX timestamping.
    fn check(cfg: &ProbeConfig) -> Result<(), PreflightError> {
        preflight::check_tx_timestamping(&cfg.btf)
    }

    fn rodata<'a>(open: &'a mut OpenSkelOf<'_, Self>) -> Option<&'a mut rodata> {
        open.maps.rodata_data.as_deref_mut()
    }

    fn new(_cfg: &ProbeConfig) -> Self {
        Tx
    }

    /// Checks what the wire format relies on: kind, length, stage, family.
    fn decode(&self, data: &[u8]) -> Result<TxEvent, RecordError> {
        let r: tx_record = slots::read_record(data)?;
        if TxStage::from_u8(r.stage).is_none() {
            return Err(RecordError::UnknownStage(r.stage));
        }
        if !matches!(r.family, 4 | 6) {
            return Err(RecordError::BadFamily(r.family));
        }
        Ok(TxEvent {
            mono_ns: r.mono_ns,
            global_ns: 0,
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
            comm: r.comm.map(|c| c as u8),
            end_seq: r.end_seq,
            tx_flags: r.flags,
        })
    }

    fn counters(c: &Counters) -> ProbeCounters {
        ProbeCounters {
            ringbuf_lost: c.at(counter::CTR_RB_LOST.0),
            setsockopt_errors: c.at(counter::CTR_SETSOCKOPT_ERR.0),
            tag_errors: c.at(counter::CTR_TAG_ERR.0),
            sockets: c.at(counter::CTR_SOCKETS.0),
            sendmsg_seen: c.at(counter::CTR_SENDMSG_SEEN.0),
            ..ProbeCounters::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::slots::record_bytes as bytes;
    use crate::probes::testing::Seen;

    fn sample() -> tx_record {
        tx_record {
            hdr: record_hdr {
                kind: tx_record::KIND,
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

    #[test]
    fn decode_unaligned_with_raw_stamps() {
        let mut buf = vec![0u8];
        buf.extend(bytes(&sample()));
        let ev = Tx.decode(&buf[1..]).unwrap();
        assert_eq!(
            (ev.mono_ns, ev.global_ns, ev.cookie, ev.tskey, ev.stage),
            (5, 0, 9, 77, TxStage::SndSw as u8)
        );
        assert_eq!(&ev.comm, b"aaaaaaaaaaaaaaaa");
    }

    #[test]
    fn decode_rejects_short_and_unknown() {
        let b = bytes(&sample());
        assert_eq!(Tx.decode(&b[..50]).unwrap_err(), RecordError::Short(50));
        let mut s = sample();
        s.hdr.kind = 9;
        assert_eq!(
            Tx.decode(&bytes(&s)).unwrap_err(),
            RecordError::UnknownKind(9)
        );
    }

    #[test]
    fn decode_validates_length_stage_and_family() {
        let mut s = sample();
        s.hdr.len = 40;
        assert_eq!(
            Tx.decode(&bytes(&s)).unwrap_err(),
            RecordError::BadLen {
                got: 40,
                want: size_of::<tx_record>()
            }
        );
        let mut s = sample();
        s.stage = tx_stage::TX_STAGE_MAX.0 as u8;
        assert_eq!(
            Tx.decode(&bytes(&s)).unwrap_err(),
            RecordError::UnknownStage(s.stage)
        );
        for family in [0, 2, 5, 10, 255] {
            let mut s = sample();
            s.family = family;
            assert_eq!(
                Tx.decode(&bytes(&s)).unwrap_err(),
                RecordError::BadFamily(family)
            );
        }
        // Every stage the C header defines and both families pass.
        for stage in 0..tx_stage::TX_STAGE_MAX.0 as u8 {
            for family in [4, 6] {
                let mut s = sample();
                s.stage = stage;
                s.family = family;
                assert!(Tx.decode(&bytes(&s)).is_ok(), "{stage} {family}");
            }
        }
    }

    #[test]
    fn a_bad_record_is_dropped_alone_and_its_neighbours_delivered() {
        let mut bad_stage = sample();
        bad_stage.stage = 200;
        let mut bad_family = sample();
        bad_family.family = 7;
        let records = [sample(), bad_stage, sample(), bad_family, sample()];
        let seen = Seen::deliver(&Tx, &records.map(|r| bytes(&r)));
        assert_eq!(
            seen.errors(),
            [RecordError::UnknownStage(200), RecordError::BadFamily(7)]
        );
        assert!(seen.bad.iter().all(|(probe, _)| *probe == "tx"));
        assert_eq!(seen.tx.len(), 3);
        // Raw stamps: the collector stamps them.
        assert!(seen.tx.iter().all(|e| (e.mono_ns, e.global_ns) == (5, 0)));
        // Each delivered event encodes: none would make the sink reject
        // the datagram.
        let mut b = tracer_codec::DatagramBuilder::new("h", 65000);
        for e in &seen.tx {
            assert!(b.push_tx(e));
        }
    }
}
