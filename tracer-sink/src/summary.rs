//! Event summaries for the EPB comments, text-identical to
//! `tracer_codec::Event::summary()` but without an allocation per event:
//! records are decoded by the codec's own (fixed-offset) decoder, the text
//! goes straight into the caller's buffer, numbers are formatted by hand,
//! and the flow text (the costly part: address formatting) is kept in a
//! small direct-mapped cache, since many flows interleave.

use std::fmt::Write as _;

use tracer_codec::{Event, EventKind, RawRecord, TxEvent, TxStage, RECORD_HEADER_LEN};

type FlowKey = ([u8; 16], [u8; 16], u16, u16, u8);

/// Reusable summary formatter.
pub(crate) struct Summarizer {
    /// Direct-mapped cache of flow texts: many flows interleave in time.
    flows: Vec<Option<(FlowKey, String)>>,
    #[cfg(test)]
    out: Vec<u8>,
}

/// Append the decimal digits of `v` (what `Display` prints).
fn push_u64(o: &mut Vec<u8>, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    o.extend_from_slice(&buf[i..]);
}

/// Flow texts cached (a power of two).
const FLOW_CACHE: usize = 256;

impl Default for Summarizer {
    fn default() -> Self {
        Summarizer {
            flows: vec![None; FLOW_CACHE],
            #[cfg(test)]
            out: Vec::new(),
        }
    }
}

fn slot(k: &FlowKey) -> usize {
    let w = |a: &[u8; 16], o: usize| {
        u64::from(u32::from_le_bytes([a[o], a[o + 1], a[o + 2], a[o + 3]]))
    };
    let mut h =
        w(&k.0, 0) ^ (w(&k.0, 12) << 32) ^ w(&k.1, 0).rotate_left(17) ^ w(&k.1, 12).rotate_left(41);
    h ^= (u64::from(k.2) << 16 | u64::from(k.3)) << 8 | u64::from(k.4);
    h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> 56) as usize & (FLOW_CACHE - 1)
}

impl Summarizer {
    /// Append the summary of the wire record `rec` (kind, length, body)
    /// to `o`; nothing if the record does not decode.
    pub fn summarize_record(&mut self, rec: &[u8], o: &mut Vec<u8>) {
        if rec.len() < RECORD_HEADER_LEN {
            return;
        }
        let kind = u16::from_le_bytes([rec[0], rec[1]]);
        let body = &rec[RECORD_HEADER_LEN..];
        if kind == EventKind::TX {
            // The common kind, without going through `Event`.
            if let Ok(e) = TxEvent::decode_body(body) {
                self.tx(&e, o);
            }
            return;
        }
        let raw = RawRecord {
            kind,
            body,
            bytes: rec,
        };
        if let Ok(ev) = raw.decode() {
            self.summarize_into(&ev, o);
        }
    }

    /// The summary of `ev`, valid until the next call.
    #[cfg(test)]
    pub fn summarize(&mut self, ev: &Event) -> &str {
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        self.summarize_into(ev, &mut out);
        self.out = out;
        std::str::from_utf8(&self.out).expect("summaries are UTF-8")
    }

    /// Append the summary of `ev` (valid UTF-8) to `o`.
    pub fn summarize_into(&mut self, ev: &Event, o: &mut Vec<u8>) {
        match ev {
            Event::Tx(e) => self.tx(e, o),
            other => o.extend_from_slice(other.summary().as_bytes()),
        }
    }

    fn tx(&mut self, e: &TxEvent, o: &mut Vec<u8>) {
        let key = (e.saddr, e.daddr, e.sport, e.dport, e.family);
        let entry = &mut self.flows[slot(&key)];
        let flow = match entry {
            Some((k, text)) if *k == key => text,
            _ => {
                let f = e.flow();
                let mut text = match entry.take() {
                    Some((_, t)) => t,
                    None => String::with_capacity(64),
                };
                text.clear();
                let _ = write!(text, "{}:{} > {}:{}", f.saddr, f.sport, f.daddr, f.dport);
                &mut entry.insert((key, text)).1
            }
        };
        o.extend_from_slice(e.stage().map(TxStage::name).unwrap_or("?").as_bytes());
        o.push(b' ');
        o.extend_from_slice(flow.as_bytes());
        o.extend_from_slice(b" cookie=");
        push_u64(o, e.cookie);
        o.extend_from_slice(b" tskey=");
        push_u64(o, u64::from(e.tskey));
        o.extend_from_slice(b" cpu=");
        push_u64(o, u64::from(e.cpu));
        if e.pid != 0 {
            o.extend_from_slice(b" pid=");
            push_u64(o, u64::from(e.pid));
            o.extend_from_slice(b" comm=");
            let end = e.comm.iter().position(|&b| b == 0).unwrap_or(16);
            match std::str::from_utf8(&e.comm[..end]) {
                Ok(s) => o.extend_from_slice(s.as_bytes()),
                Err(_) => o.extend_from_slice(String::from_utf8_lossy(&e.comm[..end]).as_bytes()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracer_codec::Flow;

    #[test]
    fn identical_to_the_codec_summary() {
        let mut s = Summarizer::default();
        let flows = [
            Flow {
                saddr: "10.0.0.1".parse().unwrap(),
                daddr: "10.0.0.2".parse().unwrap(),
                sport: 40000,
                dport: 5201,
            },
            Flow {
                saddr: "fd00::1".parse().unwrap(),
                daddr: "2001:db8::ff".parse().unwrap(),
                sport: 1,
                dport: 65535,
            },
        ];
        let comms: [[u8; 16]; 3] = [
            *b"iperf3\0\0\0\0\0\0\0\0\0\0",
            *b"0123456789abcdef",
            [0xff, 0xfe, b'x', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        ];
        for i in 0..60u64 {
            let mut ev = TxEvent {
                cookie: if i == 59 {
                    u64::MAX
                } else {
                    (i * 7919).wrapping_mul(10u64.pow((i % 15) as u32))
                },
                tskey: if i == 58 { u32::MAX } else { (i * 31) as u32 },
                cpu: (i % 3) as u32,
                pid: if i % 2 == 0 { 0 } else { 1000 + i as u32 },
                stage: (i % 5) as u8,
                comm: comms[(i % 3) as usize],
                ..TxEvent::default()
            };
            ev.set_flow(&flows[((i / 7 + i) % 2) as usize]);
            let e = Event::Tx(ev);
            assert_eq!(s.summarize(&e), e.summary());
            let mut v = b"prefix".to_vec();
            s.summarize_into(&e, &mut v);
            assert_eq!(v, format!("prefix{}", e.summary()).into_bytes());
        }
        // Many interleaved flows: evictions and collisions keep the text right.
        for round in 0..2u16 {
            for i in 0..600u16 {
                let mut ev = TxEvent::default();
                ev.set_flow(&Flow {
                    sport: i.wrapping_mul(13).wrapping_add(round),
                    ..flows[usize::from(i % 2)]
                });
                let e = Event::Tx(ev);
                assert_eq!(s.summarize(&e), e.summary());
            }
        }
        let u = Event::Unknown { kind: 9, len: 3 };
        assert_eq!(s.summarize(&u), u.summary());
    }

    #[test]
    fn an_rx_record_gets_its_summary_line() {
        let mut s = Summarizer::default();
        let ev = tracer_codec::RxEvent {
            global_ns: 5_000,
            rx_stamp_global_ns: 2_000,
            seq: 100,
            end_seq: 1548,
            len: 1500,
            stage: tracer_codec::RxStage::TcpInput as u8,
            family: 4,
            sport: 40000,
            dport: 5201,
            saddr: [10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            daddr: [10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            ..Default::default()
        };
        let mut rec = Vec::new();
        rec.extend_from_slice(&EventKind::RX.to_le_bytes());
        rec.extend_from_slice(&(tracer_codec::RxEvent::BODY_LEN as u16).to_le_bytes());
        ev.encode_body(&mut rec);
        let mut out = Vec::new();
        s.summarize_record(&rec, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "RX TCP_INPUT 10.0.0.1:40000 > 10.0.0.2:5201 len=1500 cpu=0 seq=100..1548 since_rx_stamp=3000ns"
        );
    }

    #[test]
    fn record_summary_goes_through_the_codec_decoder() {
        let mut s = Summarizer::default();
        let mut ev = TxEvent {
            mono_ns: 1,
            global_ns: 2,
            hw_ns: 3,
            cookie: 4,
            tskey: 5,
            seq: 6,
            netns: 7,
            cpu: 8,
            pid: 9,
            tid: 10,
            stage: 4,
            comm: *b"abcdefghijklmnop",
            ..TxEvent::default()
        };
        ev.set_flow(&Flow {
            saddr: "fd00::1".parse().unwrap(),
            daddr: "fd00::2".parse().unwrap(),
            sport: 11,
            dport: 12,
        });
        let mut rec = Vec::new();
        rec.extend_from_slice(&EventKind::TX.to_le_bytes());
        rec.extend_from_slice(&(TxEvent::BODY_LEN as u16).to_le_bytes());
        ev.encode_body(&mut rec);
        let mut out = Vec::new();
        s.summarize_record(&rec, &mut out);
        assert_eq!(out, ev.summary().into_bytes());
        // A bad stage: no comment, like a failed decode.
        let stage = TxEvent::LAYOUT.field("stage").expect("described").offset;
        rec[RECORD_HEADER_LEN + stage] = 99;
        out.clear();
        s.summarize_record(&rec, &mut out);
        assert!(out.is_empty());
        // A clock record: the codec's summary.
        let ck = tracer_codec::ClockEvent {
            mono_ns: 1,
            global_ns: 2,
            ref_ns: 3,
            offset_ns: -4,
            freq_ppb: 1.5,
            delay_ns: 6,
            uncertainty_ns: 7,
            error_estimate_ns: 8,
            source: 1,
            state: 2,
        };
        let mut rec = Vec::new();
        rec.extend_from_slice(&EventKind::CLOCK.to_le_bytes());
        rec.extend_from_slice(&(tracer_codec::ClockEvent::BODY_LEN as u16).to_le_bytes());
        ck.encode_body(&mut rec);
        out.clear();
        s.summarize_record(&rec, &mut out);
        assert_eq!(out, ck.summary().into_bytes());
        // A drop record: the codec's summary, reason and location by name.
        let dr = tracer_codec::DropEvent {
            reason: 3,
            family: 4,
            l4proto: 17,
            dport: 9,
            reason_name: tracer_codec::drop::padded("NO_SOCKET"),
            location_sym: tracer_codec::drop::padded("__udp4_lib_rcv+0x5c1"),
            ..Default::default()
        };
        let mut rec = Vec::new();
        rec.extend_from_slice(&EventKind::DROP.to_le_bytes());
        rec.extend_from_slice(&(tracer_codec::DropEvent::BODY_LEN as u16).to_le_bytes());
        dr.encode_body(&mut rec);
        out.clear();
        s.summarize_record(&rec, &mut out);
        let text = String::from_utf8(out.clone()).unwrap();
        assert_eq!(text, dr.summary());
        assert!(
            text.starts_with("DROP NO_SOCKET at __udp4_lib_rcv+0x5c1 UDP"),
            "{text}"
        );
    }
}
