//! The TCP anomalies probe (`ebpf/tcp.bpf.c`): tp_btf programs
//! on `tcp:tcp_retransmit_skb`, `tcp:tcp_send_reset`,
//! `tcp:tcp_receive_reset`, `sock:sock_rcvqueue_full` and
//! `sock:sock_exceed_buf_limit`, each writing one record per event of the
//! traced namespace; here, its spec and the decoder of its records into
//! TCP wire events (the probe core does the rest).
//!
//! A probe of its own rather than part of `drops`: its tracepoints are
//! rare and per socket, `skb:kfree_skb` fires for every drop of every
//! namespace; a user can take either without paying for the other, and
//! each ring holds one record kind of one size.

use tracer_codec::{TcpAnomaly, TcpEvent};

use super::core::{self, Attach, Counters, OpenSkelOf, ProbeKind};
use super::interface::{ProbeConfig, ProbeCounters, ProbeSpec};
use super::slots::{self, PlainRecord, RecordError};

crate::bpf_skeleton!("tcp");

use skel::types::{record_hdr, record_kind, rodata, tcp_anomaly, tcp_counter, tcp_record};

// SAFETY: tcp_record is a skeleton copy of a C struct of integers and arrays
// of integers: every bit pattern is a valid value.
unsafe impl PlainRecord for tcp_record {
    const KIND: u16 = record_kind::RECORD_TCP.0 as u16;
    const COMMIT_OFFSET: usize = std::mem::offset_of!(tcp_record, hdr.commit);
}
crate::shared_rodata!(rodata);

/// Registry entry of this probe.
pub const SPEC: ProbeSpec = core::spec::<Tcp>();

const N_COUNTERS: usize = tcp_counter::TCP_CTR_MAX.0 as usize;

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

/// The TCP anomalies probe (no state of its own).
#[derive(Debug)]
pub struct Tcp;

// No check of its own: tp_btf needs only the kernel BTF the agent already
// requires.
impl ProbeKind for Tcp {
    const NAME: &'static str = "tcp";
    const ABOUT: &'static str =
        "TCP anomalies: retransmissions, resets sent/received, receive queue full, memory limit";
    const PROGRAMS: &'static [Attach] = &[
        Attach::Tracepoint("tcp_retransmit"),
        Attach::Tracepoint("tcp_send_reset"),
        Attach::Tracepoint("tcp_receive_reset"),
        Attach::Tracepoint("sock_rcvqueue_full"),
        Attach::Tracepoint("sock_exceed_buf_limit"),
    ];
    type Builder = skel::TcpSkelBuilder;
    type Rodata = rodata;
    type Record = tcp_record;
    type Event = TcpEvent;

    fn rodata<'a>(open: &'a mut OpenSkelOf<'_, Self>) -> Option<&'a mut rodata> {
        open.maps.rodata_data.as_deref_mut()
    }

    fn new(_cfg: &ProbeConfig) -> Self {
        Tcp
    }

    /// Checks kind, length, anomaly and family.
    fn decode(&self, data: &[u8]) -> Result<TcpEvent, RecordError> {
        let r: tcp_record = slots::read_record(data)?;
        if TcpAnomaly::from_u8(r.anomaly).is_none() {
            return Err(RecordError::UnknownStage(r.anomaly));
        }
        if !tracer_codec::FLOW_FAMILY.contains(r.family.into()) {
            return Err(RecordError::BadFamily(r.family));
        }
        Ok(TcpEvent {
            mono_ns: r.mono_ns,
            global_ns: 0,
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
        })
    }

    fn counters(c: &Counters) -> ProbeCounters {
        ProbeCounters {
            ringbuf_lost: c.at(tcp_counter::TCP_CTR_LOST.0),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::slots::record_bytes as bytes;

    fn sample() -> tcp_record {
        tcp_record {
            hdr: record_hdr {
                kind: tcp_record::KIND,
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

    #[test]
    fn decode_with_raw_stamps() {
        let ev = Tcp.decode(&bytes(&sample())).unwrap();
        assert_eq!(
            (ev.mono_ns, ev.global_ns, ev.cookie, ev.seq, ev.end_seq),
            (5, 0, 7, 10, 20)
        );
        assert_eq!(ev.anomaly(), Some(TcpAnomaly::Retransmit));
    }

    #[test]
    fn decode_rejects_bad_records() {
        let mut s = sample();
        s.anomaly = tcp_anomaly::TCP_ANOMALY_MAX.0 as u8;
        assert_eq!(
            Tcp.decode(&bytes(&s)).unwrap_err(),
            RecordError::UnknownStage(s.anomaly)
        );
        let mut s = sample();
        s.family = 9;
        assert_eq!(
            Tcp.decode(&bytes(&s)).unwrap_err(),
            RecordError::BadFamily(9)
        );
        assert_eq!(
            Tcp.decode(&bytes(&sample())[..7]).unwrap_err(),
            RecordError::Short(7)
        );
    }
}
