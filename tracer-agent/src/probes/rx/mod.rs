//! The RX probe (`ebpf/rx.bpf.c`): tp_btf programs on five
//! receive-path tracepoints, one record per hit; here, its spec and the
//! decoder of its records into wire events (the probe core does the rest).
//!
//! The kernel stamps received skbs (`skb->tstamp`, CLOCK_REALTIME) only
//! while some socket asks for RX software timestamps, so while attached
//! the probe holds a socket of its own (stamping.rs).
//!
//! Every number shared with the BPF side comes from the skeleton's `types`
//! (from `ebpf/include/tracer.h`); compile-time asserts tie them to the codec.

use std::os::fd::OwnedFd;

use tracer_codec::{RxEvent, RxStage};

use super::core::{self, Attach, Counters, OpenSkelOf, ProbeKind};
use super::interface::{ProbeConfig, ProbeCounters, ProbeSpec};
use super::slots::{self, PlainRecord, RecordError};
use crate::preflight::PreflightError;

pub mod stamping;

crate::bpf_skeleton!("rx");

use skel::types::{record_hdr, record_kind, rodata, rx_counter, rx_record, rx_stage};

// SAFETY: rx_record is a skeleton copy of a C struct of integers and arrays
// of integers: every bit pattern is a valid value.
unsafe impl PlainRecord for rx_record {
    const KIND: u16 = record_kind::RECORD_RX.0 as u16;
    const COMMIT_OFFSET: usize = std::mem::offset_of!(rx_record, hdr.commit);
}
crate::shared_rodata!(rodata, sample_threshold);

/// Registry entry of this probe.
pub const SPEC: ProbeSpec = core::spec::<Rx>();

const N_COUNTERS: usize = rx_counter::RX_CTR_MAX.0 as usize;

const _: () = assert!(record_kind::RECORD_RX.0 <= u16::MAX as u32);

// C `enum rx_stage` and the codec's RxStage carry the same wire values.
const _: () = {
    assert!(rx_stage::RX_STAGE_MAX.0 as usize == RxStage::ALL.len());
    assert!(rx_stage::RX_STACK_ENTRY.0 == RxStage::StackEntry as u32);
    assert!(rx_stage::RX_TCP_INPUT.0 == RxStage::TcpInput as u32);
    assert!(rx_stage::RX_DATA_READY.0 == RxStage::DataReady as u32);
    assert!(rx_stage::RX_COPY.0 == RxStage::Copy as u32);
    assert!(rx_stage::RX_READ_DONE.0 == RxStage::ReadDone as u32);
};

// The wire body is the BPF record without its ring header, plus the two
// global stamps the agent adds.
const _: () = assert!(
    RxEvent::BODY_LEN
        == std::mem::size_of::<rx_record>() - std::mem::size_of::<record_hdr>()
            + 2 * std::mem::size_of::<u64>() // global_ns, rx_stamp_global_ns
);
const _: () = {
    assert!((rx_counter::RX_CTR_LOST.0 as usize) < N_COUNTERS);
    assert!((rx_counter::RX_CTR_READ_ERR.0 as usize) < N_COUNTERS);
};

/// The tracepoints the programs attach to (tp_btf), in stage order.
pub const TRACEPOINTS: [&str; 5] = [
    "netif_receive_skb",
    "tcp_probe",
    "sk_data_ready",
    "skb_copy_datagram_iovec",
    "sock_recv_length",
];

/// The RX probe: while attached, it holds the socket that keeps the
/// kernel's RX software stamping on.
#[derive(Debug, Default)]
pub struct Rx {
    stamp_socket: Option<OwnedFd>,
}

impl ProbeKind for Rx {
    const NAME: &'static str = "rx";
    const ABOUT: &'static str =
        "receive path per skb: STACK_ENTRY, TCP_INPUT, DATA_READY, COPY, READ_DONE \
            (tracepoints); holds a SOF_TIMESTAMPING_RX_SOFTWARE socket so skbs get RX stamps";
    /// One per stage, in stage order ([`TRACEPOINTS`]).
    const PROGRAMS: &'static [Attach] = &[
        Attach::Tracepoint("rx_stack_entry"),
        Attach::Tracepoint("rx_tcp_input"),
        Attach::Tracepoint("rx_data_ready"),
        Attach::Tracepoint("rx_copy"),
        Attach::Tracepoint("rx_read_done"),
    ];
    type Builder = skel::RxSkelBuilder;
    type Rodata = rodata;
    type Record = rx_record;
    type Event = RxEvent;

    /// Every tracepoint must exist in the kernel's BTF (as the
    /// `btf_trace_<name>` type tp_btf attaches through), so an older kernel
    /// gets a message naming what it lacks instead of a libbpf attach error.
    fn check(cfg: &ProbeConfig) -> Result<(), PreflightError> {
        match btf_missing_tracepoints(&cfg.btf) {
            Ok(missing) if missing.is_empty() => Ok(()),
            Ok(missing) => Err(PreflightError::NoRxTracepoints {
                release: crate::preflight::kernel_release(),
                btf: cfg.btf.clone(),
                missing,
            }),
            Err(error) => Err(PreflightError::NoBtf {
                btf: cfg.btf.clone(),
                error,
            }),
        }
    }

    fn rodata<'a>(open: &'a mut OpenSkelOf<'_, Self>) -> Option<&'a mut rodata> {
        open.maps.rodata_data.as_deref_mut()
    }

    fn new(_cfg: &ProbeConfig) -> Self {
        Rx::default()
    }

    /// Checks kind, length, stage and family.
    fn decode(&self, data: &[u8]) -> Result<RxEvent, RecordError> {
        let r: rx_record = slots::read_record(data)?;
        if RxStage::from_u8(r.stage).is_none() {
            return Err(RecordError::UnknownStage(r.stage));
        }
        if !matches!(r.family, 4 | 6) {
            return Err(RecordError::BadFamily(r.family));
        }
        Ok(RxEvent {
            mono_ns: r.mono_ns,
            global_ns: 0,
            rx_stamp_ns: r.rx_stamp_ns,
            rx_stamp_global_ns: 0,
            hw_ns: r.hw_ns,
            cookie: r.cookie,
            seq: r.seq,
            end_seq: r.end_seq,
            len: r.len,
            netns: r.netns,
            ifindex: r.ifindex,
            cpu: r.cpu,
            pid: r.pid,
            tid: r.tid,
            stage: r.stage,
            family: r.family,
            protocol: r.protocol,
            tstamp_type: r.tstamp_type,
            sport: r.sport,
            dport: r.dport,
            saddr: r.saddr,
            daddr: r.daddr,
            comm: r.comm.map(|c| c as u8),
        })
    }

    fn counters(c: &Counters) -> ProbeCounters {
        ProbeCounters {
            ringbuf_lost: c.at(rx_counter::RX_CTR_LOST.0),
            rx_read_errors: c.at(rx_counter::RX_CTR_READ_ERR.0),
            ..ProbeCounters::default()
        }
    }

    /// Stamping first, so the first skbs traced already carry a stamp.
    fn before_attach(&mut self) {
        self.stamp_socket = stamping::hold();
    }

    fn after_detach(&mut self) {
        self.stamp_socket = None;
    }
}

/// The [`TRACEPOINTS`] whose `btf_trace_<name>` type `btf` (a kernel BTF
/// blob) does not name.
pub fn btf_missing_tracepoints(btf: &std::path::Path) -> std::io::Result<Vec<&'static str>> {
    crate::preflight::btf_missing_tracepoints(btf, &TRACEPOINTS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::slots::record_bytes as bytes;
    use crate::probes::testing::Seen;

    fn sample() -> rx_record {
        rx_record {
            hdr: record_hdr {
                kind: rx_record::KIND,
                len: std::mem::size_of::<rx_record>() as u16,
                commit: 1,
            },
            mono_ns: 100_000,
            rx_stamp_ns: 50_000,
            stage: rx_stage::RX_COPY.0 as u8,
            family: 4,
            seq: 10,
            end_seq: 20,
            ..Default::default()
        }
    }

    #[test]
    fn decode_keeps_the_raw_stamps_and_their_clock() {
        let mut s = sample();
        s.tstamp_type = 1;
        let ev = Rx::default().decode(&bytes(&s)).unwrap();
        assert_eq!(
            (
                ev.mono_ns,
                ev.global_ns,
                ev.rx_stamp_ns,
                ev.rx_stamp_global_ns
            ),
            (100_000, 0, 50_000, 0)
        );
        assert_eq!(
            (ev.tstamp_type, ev.seq, ev.end_seq, ev.stage),
            (1, 10, 20, RxStage::Copy as u8)
        );
    }

    #[test]
    fn bad_records_are_dropped_alone_and_stamps_left_raw() {
        let mut tai = sample();
        tai.tstamp_type = 2;
        let mut mono = sample();
        mono.tstamp_type = 1;
        let mut none = sample();
        none.rx_stamp_ns = 0;
        let mut bad = sample();
        bad.stage = rx_stage::RX_STAGE_MAX.0 as u8;
        let mut bad_family = sample();
        bad_family.family = 2;
        let records = [sample(), bad, tai, bad_family, none, mono];
        let seen = Seen::deliver(&Rx::default(), &records.map(|r| bytes(&r)));
        assert_eq!(
            seen.errors(),
            [
                RecordError::UnknownStage(RxStage::ALL.len() as u8),
                RecordError::BadFamily(2)
            ]
        );
        assert!(seen.bad.iter().all(|(probe, _)| *probe == "rx"));
        let e = &seen.rx;
        // The collector stamps them (crate::stamp), by tstamp_type.
        let stamps: Vec<_> = e
            .iter()
            .map(|e| {
                (
                    e.rx_stamp_ns,
                    e.tstamp_type,
                    e.global_ns,
                    e.rx_stamp_global_ns,
                )
            })
            .collect();
        assert_eq!(
            stamps,
            [
                (50_000, 0, 0, 0),
                (50_000, 2, 0, 0),
                (0, 0, 0, 0),
                (50_000, 1, 0, 0)
            ]
        );
        let mut b = tracer_codec::DatagramBuilder::new("h", 65000);
        for ev in e {
            assert!(b.push(ev));
        }
    }

    #[test]
    fn short_wrong_kind_and_length_are_refused() {
        let rx = Rx::default();
        let b = bytes(&sample());
        assert_eq!(rx.decode(&b[..9]).unwrap_err(), RecordError::Short(9));
        let mut s = sample();
        s.hdr.kind = 1;
        assert_eq!(
            rx.decode(&bytes(&s)).unwrap_err(),
            RecordError::UnknownKind(1)
        );
        let mut s = sample();
        s.hdr.len = 8;
        assert!(matches!(
            rx.decode(&bytes(&s)),
            Err(RecordError::BadLen { got: 8, .. })
        ));
    }

    #[test]
    fn preflight_names_missing_tracepoints() {
        let dir = tempfile::tempdir().unwrap();
        let btf = dir.path().join("btf");
        std::fs::write(
            &btf,
            b"\0btf_trace_netif_receive_skb\0btf_trace_tcp_probe\0btf_trace_sock_recv_length\0",
        )
        .unwrap();
        assert_eq!(
            btf_missing_tracepoints(&btf).unwrap(),
            ["sk_data_ready", "skb_copy_datagram_iovec"]
        );
        let cfg = ProbeConfig {
            cgroup: "/x".into(),
            target_netns: 0,
            sample_every: 1,
            slots_per_cpu: 8,
            btf,
            filter: Default::default(),
            self_traffic: Default::default(),
        };
        let msg = Rx::check(&cfg).unwrap_err().to_string();
        assert!(
            msg.contains("sk_data_ready, skb_copy_datagram_iovec"),
            "{msg}"
        );
        // This kernel has them all.
        let real = std::path::Path::new("/sys/kernel/btf/vmlinux");
        if real.exists() {
            assert_eq!(btf_missing_tracepoints(real).unwrap(), Vec::<&str>::new());
        }
    }
}
