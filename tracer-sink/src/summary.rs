//! Event summaries for the EPB comments, text-identical to
//! `tracer_codec::Event::summary()` but without an allocation per event:
//! the output buffer is reused and the flow text (the costly part:
//! address formatting) is cached while consecutive events share a flow.

use std::fmt::Write as _;

use tracer_codec::{Event, TxEvent, TxStage};

type FlowKey = ([u8; 16], [u8; 16], u16, u16, u8);

/// Reusable summary formatter.
#[derive(Default)]
pub(crate) struct Summarizer {
    flow_key: Option<FlowKey>,
    flow: String,
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

impl Summarizer {
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
        if self.flow_key != Some(key) {
            let f = e.flow();
            self.flow.clear();
            let _ = write!(
                self.flow,
                "{}:{} > {}:{}",
                f.saddr, f.sport, f.daddr, f.dport
            );
            self.flow_key = Some(key);
        }
        o.extend_from_slice(e.stage().map(TxStage::name).unwrap_or("?").as_bytes());
        o.push(b' ');
        o.extend_from_slice(self.flow.as_bytes());
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
            ev.set_flow(&flows[(i / 7 % 2) as usize]);
            let e = Event::Tx(ev);
            assert_eq!(s.summarize(&e), e.summary());
            let mut v = b"prefix".to_vec();
            s.summarize_into(&e, &mut v);
            assert_eq!(v, format!("prefix{}", e.summary()).into_bytes());
        }
        let u = Event::Unknown { kind: 9, len: 3 };
        assert_eq!(s.summarize(&u), u.summary());
    }
}
