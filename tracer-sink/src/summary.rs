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
    out: String,
}

impl Summarizer {
    /// The summary of `ev`, valid until the next call.
    pub fn summarize(&mut self, ev: &Event) -> &str {
        self.out.clear();
        match ev {
            Event::Tx(e) => self.tx(e),
            other => self.out.push_str(&other.summary()),
        }
        &self.out
    }

    fn tx(&mut self, e: &TxEvent) {
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
        let o = &mut self.out;
        o.push_str(e.stage().map(TxStage::name).unwrap_or("?"));
        o.push(' ');
        o.push_str(&self.flow);
        let _ = write!(o, " cookie={} tskey={} cpu={}", e.cookie, e.tskey, e.cpu);
        if e.pid != 0 {
            let _ = write!(o, " pid={} comm=", e.pid);
            let end = e.comm.iter().position(|&b| b == 0).unwrap_or(16);
            match std::str::from_utf8(&e.comm[..end]) {
                Ok(s) => o.push_str(s),
                Err(_) => o.push_str(&String::from_utf8_lossy(&e.comm[..end])),
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
                cookie: i * 7919,
                tskey: (i * 31) as u32,
                cpu: (i % 3) as u32,
                pid: if i % 2 == 0 { 0 } else { 1000 + i as u32 },
                stage: (i % 5) as u8,
                comm: comms[(i % 3) as usize],
                ..TxEvent::default()
            };
            ev.set_flow(&flows[(i / 7 % 2) as usize]);
            let e = Event::Tx(ev);
            assert_eq!(s.summarize(&e), e.summary());
        }
        let u = Event::Unknown { kind: 9, len: 3 };
        assert_eq!(s.summarize(&u), u.summary());
    }
}
