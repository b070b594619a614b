//! The TCP anomalies probe (`ebpf/tcp.bpf.c`): tp_btf programs
//! on `tcp:tcp_retransmit_skb`, `tcp:tcp_send_reset`,
//! `tcp:tcp_receive_reset`, `sock:sock_rcvqueue_full` and
//! `sock:sock_exceed_buf_limit`, each writing one record per event of the
//! traced namespace; here they are loaded, attached, read and turned into
//! TCP wire events.
//!
//! A probe of its own rather than part of `drops`: its tracepoints are
//! rare and per socket, `skb:kfree_skb` fires for every drop of every
//! namespace; a user can take either without paying for the other, and
//! each ring holds one record kind of one size.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, OpenObject};
use tracer_codec::{TcpAnomaly, TcpEvent};

use super::interface::{
    Collector, Probe, ProbeConfig, ProbeCounters, ProbeError, ProbeEvent, ProbeSpec,
};
use super::slots::{self, Drained, RecordError, SlotRing};
use crate::preflight::PreflightError;

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
    include!(concat!(env!("OUT_DIR"), "/tcp.skel.rs"));
}

use skel::types::{record_hdr, record_kind, tcp_anomaly, tcp_counter, tcp_record};

// SAFETY: tcp_record is a skeleton copy of a C struct of integers and arrays
// of integers: every bit pattern is a valid value.
unsafe impl slots::PlainRecord for tcp_record {}
use skel::TcpSkel;

/// Registry entry of this probe.
pub const SPEC: ProbeSpec = ProbeSpec {
    name: NAME,
    about: "TCP anomalies: retransmissions, resets sent/received, receive queue full, memory limit",
    check,
    open,
};

const NAME: &str = "tcp";

const RECORD_TCP: u16 = record_kind::RECORD_TCP.0 as u16;
const N_COUNTERS: usize = tcp_counter::TCP_CTR_MAX.0 as usize;
const COMMIT_OFFSET: usize = std::mem::offset_of!(record_hdr, commit);

const _: () = assert!(record_kind::RECORD_TCP.0 <= u16::MAX as u32);
// C `enum tcp_anomaly` and the codec's TcpAnomaly carry the same values.
const _: () = {
    assert!(tcp_anomaly::TCP_ANOMALY_MAX.0 as usize == TcpAnomaly::ALL.len());
    assert!(tcp_anomaly::TCP_RETRANSMIT.0 == TcpAnomaly::Retransmit as u32);
    assert!(tcp_anomaly::TCP_RESET_SENT.0 == TcpAnomaly::ResetSent as u32);
    assert!(tcp_anomaly::TCP_RESET_RECEIVED.0 == TcpAnomaly::ResetReceived as u32);
    assert!(tcp_anomaly::TCP_RCVQUEUE_FULL.0 == TcpAnomaly::RcvqueueFull as u32);
    assert!(tcp_anomaly::TCP_EXCEED_BUF_LIMIT.0 == TcpAnomaly::ExceedBufLimit as u32);
};
// The wire body is the record without its ring header and padding, plus
// the global stamp.
const _: () = assert!(
    TcpEvent::BODY_LEN
        == std::mem::size_of::<tcp_record>() - std::mem::size_of::<record_hdr>()
            - std::mem::size_of::<u8>() // _pad
            - std::mem::size_of::<u32>() // _pad2
            + std::mem::size_of::<u64>() // global_ns
);
const _: () = assert!((tcp_counter::TCP_CTR_LOST.0 as usize) < N_COUNTERS);

/// Preflight: tp_btf needs only the kernel BTF the agent already requires.
fn check(_cfg: &ProbeConfig) -> Result<(), PreflightError> {
    Ok(())
}

fn open<'obj>(
    object: &'obj mut MaybeUninit<OpenObject>,
    cfg: &ProbeConfig,
) -> Result<Box<dyn Probe + 'obj>, ProbeError> {
    Ok(Box::new(TcpProbe::load(object, cfg)?))
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

/// A loaded TCP anomalies probe. Dropping it detaches the programs.
pub struct TcpProbe<'obj> {
    skel: TcpSkel<'obj>,
    links: Vec<Link>,
    ring: SlotRing,
}

impl<'obj> TcpProbe<'obj> {
    /// Open, configure and load the probe (not attached).
    pub fn load(
        object: &'obj mut MaybeUninit<OpenObject>,
        cfg: &ProbeConfig,
    ) -> Result<Self, ProbeError> {
        let mut open = skel::TcpSkelBuilder::default()
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
            std::mem::size_of::<tcp_record>(),
            COMMIT_OFFSET,
            cfg.slots_per_cpu,
            &heads,
        )
        .map_err(|e| map_err("slots")(libbpf_rs::Error::from(e)))?;
        Ok(TcpProbe {
            skel,
            links: Vec::new(),
            ring,
        })
    }
}

impl Probe for TcpProbe<'_> {
    fn name(&self) -> &'static str {
        NAME
    }

    fn attach(&mut self) -> Result<(), ProbeError> {
        let p = &self.skel.progs;
        let mut links = Vec::new();
        for prog in [
            &p.tcp_retransmit,
            &p.tcp_send_reset,
            &p.tcp_receive_reset,
            &p.sock_rcvqueue_full,
            &p.sock_exceed_buf_limit,
        ] {
            links.push(prog.attach().map_err(load_err)?);
        }
        self.links = links;
        Ok(())
    }

    fn drain(&mut self, out: &mut dyn Collector) -> Result<Drained, ProbeError> {
        let heads = read_heads(&self.skel)?;
        Ok(self.ring.drain(&heads, |data| deliver(data, out)))
    }

    fn counters(&self) -> Result<ProbeCounters, ProbeError> {
        let c = read_counters(&self.skel)?;
        Ok(ProbeCounters {
            ringbuf_lost: c[tcp_counter::TCP_CTR_LOST.0 as usize],
            ..Default::default()
        })
    }

    fn doorbell(&self) -> Result<libbpf_rs::MapHandle, ProbeError> {
        libbpf_rs::MapHandle::try_from(&self.skel.maps.doorbell).map_err(map_err("doorbell"))
    }

    fn programs(&self) -> Vec<BorrowedFd<'_>> {
        let p = &self.skel.progs;
        vec![
            p.tcp_retransmit.as_fd(),
            p.tcp_send_reset.as_fd(),
            p.tcp_receive_reset.as_fd(),
            p.sock_rcvqueue_full.as_fd(),
            p.sock_exceed_buf_limit.as_fd(),
        ]
    }

    fn detach(&mut self) {
        self.links.clear();
    }
}

fn deliver(data: &[u8], out: &mut dyn Collector) {
    match TcpRecord::decode(data) {
        Ok(rec) => {
            let mono_ns = out.local_mono(rec.0.mono_ns);
            let ev = TcpEvent {
                mono_ns,
                ..rec.to_event(out.global_ns(mono_ns))
            };
            out.event(ProbeEvent::Tcp(&ev))
        }
        Err(e) => out.bad_record(NAME, e),
    }
}

fn read_counters(skel: &TcpSkel<'_>) -> Result<[u64; N_COUNTERS], ProbeError> {
    slots::sum_percpu(&skel.maps.counters).map_err(map_err("counters"))
}

fn read_heads(skel: &TcpSkel<'_>) -> Result<Vec<u64>, ProbeError> {
    slots::read_heads(&skel.maps.heads).map_err(map_err("heads"))
}

/// A TCP anomaly record, decoded and validated.
#[derive(Debug, Clone, Copy)]
pub struct TcpRecord(tcp_record);

impl TcpRecord {
    /// Decode a probe record and check kind, length, anomaly and family;
    /// never panics on bad input.
    pub fn decode(data: &[u8]) -> Result<Self, RecordError> {
        let rec: tcp_record = slots::read_record(data, RECORD_TCP)?;
        if TcpAnomaly::from_u8(rec.anomaly).is_none() {
            return Err(RecordError::UnknownStage(rec.anomaly));
        }
        if !tracer_codec::FLOW_FAMILY.contains(rec.family.into()) {
            return Err(RecordError::BadFamily(rec.family));
        }
        Ok(TcpRecord(rec))
    }

    /// The wire event, with `global_ns` from the caller's clock.
    pub fn to_event(&self, global_ns: u64) -> TcpEvent {
        let r = &self.0;
        TcpEvent {
            mono_ns: r.mono_ns,
            global_ns,
            cookie: r.cookie,
            seq: r.seq,
            end_seq: r.end_seq,
            netns: r.netns,
            cpu: r.cpu,
            detail: r.detail,
            anomaly: r.anomaly,
            family: r.family,
            state: r.state,
            sport: r.sport,
            dport: r.dport,
            saddr: r.saddr,
            daddr: r.daddr,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> tcp_record {
        tcp_record {
            hdr: record_hdr {
                kind: RECORD_TCP,
                len: std::mem::size_of::<tcp_record>() as u16,
                commit: 1,
            },
            mono_ns: 5,
            cookie: 7,
            seq: 10,
            end_seq: 20,
            anomaly: tcp_anomaly::TCP_RETRANSMIT.0 as u8,
            family: 4,
            ..Default::default()
        }
    }

    fn bytes(r: &tcp_record) -> Vec<u8> {
        // SAFETY: tcp_record is repr(C) plain data; we view its bytes.
        unsafe {
            std::slice::from_raw_parts(
                (r as *const tcp_record).cast::<u8>(),
                size_of::<tcp_record>(),
            )
        }
        .to_vec()
    }

    #[test]
    fn decode_and_convert() {
        let ev = TcpRecord::decode(&bytes(&sample())).unwrap().to_event(3);
        assert_eq!(
            (ev.global_ns, ev.cookie, ev.seq, ev.end_seq),
            (3, 7, 10, 20)
        );
        assert_eq!(ev.anomaly(), Some(TcpAnomaly::Retransmit));
    }

    #[test]
    fn decode_rejects_bad_records() {
        let mut s = sample();
        s.anomaly = tcp_anomaly::TCP_ANOMALY_MAX.0 as u8;
        assert_eq!(
            TcpRecord::decode(&bytes(&s)).unwrap_err(),
            RecordError::UnknownStage(s.anomaly)
        );
        let mut s = sample();
        s.family = 9;
        assert_eq!(
            TcpRecord::decode(&bytes(&s)).unwrap_err(),
            RecordError::BadFamily(9)
        );
        assert_eq!(
            TcpRecord::decode(&bytes(&sample())[..7]).unwrap_err(),
            RecordError::Short(7)
        );
    }
}
