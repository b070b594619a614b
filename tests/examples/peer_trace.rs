//! Writes a large synthetic two-host trace for the dissector benchmark
//! (bench/dissector-peer.sh): FLOWS interleaved TCP flows from host-a to
//! host-b; per sender skb SENDMSG, SCHED, SND_SW and ACK on host-a (TX
//! body version 2: each with the skb's byte range); per three skbs one
//! GRO-merged received skb on host-b with its five RX stages; one skb in a
//! hundred sent twice (two sends, one copy: ambiguous). Frames in global
//! time order, written by the sink's own writer (`TraceWriter`).
//!
//! ```text
//! cargo run --release -p tracer-e2e --example peer_trace -- OUT.pcapng [SKBS] [FLOWS]
//! ```

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use tracer_codec::{EventKind, Flow, RxEvent, RxStage, TxEvent, TxStage, TX_FLAG_RANGE};
use tracer_sink::{Compression, TraceAgent, TraceWriter};

/// Bytes per sender skb and sender skbs per received (GRO) skb.
const SKB: u32 = 16_384;
const GRO: u32 = 3;
const HOSTS: [(&str, u64); 2] = [("host-a", 0xa), ("host-b", 0xb)];
const T0: u64 = 1_763_000_000_000_000_000;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(out) = args.first() else {
        eprintln!("usage: peer_trace OUT.pcapng [SKBS (60000)] [FLOWS (8)]");
        std::process::exit(2);
    };
    let number = |i: usize, default: u32| -> u32 {
        args.get(i).map_or(default, |v| {
            v.parse().unwrap_or_else(|_| {
                eprintln!("peer_trace: {v:?} is not a number");
                std::process::exit(2)
            })
        })
    };
    let skbs = number(1, 60_000);
    let flows = number(2, 8).max(1);

    // (global_ns, host index, kind, body)
    let mut events: Vec<(u64, usize, u16, Vec<u8>)> = Vec::new();
    for fl in 0..flows {
        let flow = Flow {
            saddr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            daddr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            sport: 40_000 + fl as u16,
            dport: 5201,
        };
        let isn = 1_000_000u32.wrapping_mul(fl + 1);
        let per_flow = skbs / flows;
        // Flows interleave: each starts a little later.
        let start = T0 + u64::from(fl) * 1_700;
        for k in 0..per_flow {
            let t = start + u64::from(k) * 10_000;
            let seq = isn.wrapping_add(k * SKB);
            let tskey = seq.wrapping_add(SKB - 1);
            let mut push_tx = |stage: TxStage, ns: u64| {
                let mut ev = TxEvent {
                    mono_ns: ns - T0,
                    global_ns: ns,
                    cookie: u64::from(fl) + 1,
                    tskey,
                    // Version 2: every callback carries the skb's bytes.
                    seq,
                    end_seq: seq.wrapping_add(SKB),
                    tx_flags: TX_FLAG_RANGE,
                    stage: stage as u8,
                    ..TxEvent::default()
                };
                ev.set_flow(&flow);
                let mut body = Vec::new();
                ev.encode_body(&mut body);
                events.push((ns, 0, EventKind::TX, body));
            };
            push_tx(TxStage::Sendmsg, t);
            push_tx(TxStage::Sched, t + 1_100);
            push_tx(TxStage::SndSw, t + 3_300);
            if k % 100 == 99 {
                push_tx(TxStage::SndSw, t + 9_000); // a resend
            }
            push_tx(TxStage::Ack, t + 40_000);
            if k % GRO == GRO - 1 {
                let first = seq.wrapping_sub((GRO - 1) * SKB);
                let rx_t = t + 25_000;
                for (i, stage) in [
                    RxStage::StackEntry,
                    RxStage::TcpInput,
                    RxStage::DataReady,
                    RxStage::Copy,
                    RxStage::ReadDone,
                ]
                .into_iter()
                .enumerate()
                {
                    let ns = rx_t + i as u64 * 2_300;
                    let socket_only = matches!(stage, RxStage::DataReady | RxStage::ReadDone);
                    let ev = RxEvent {
                        mono_ns: ns - T0,
                        global_ns: ns,
                        seq: if socket_only { 0 } else { first },
                        end_seq: seq.wrapping_add(SKB),
                        len: GRO * SKB,
                        stage: stage as u8,
                        family: 4,
                        protocol: 6,
                        sport: flow.sport,
                        dport: flow.dport,
                        saddr: [10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                        daddr: [10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                        ..RxEvent::default()
                    };
                    let mut body = Vec::new();
                    ev.encode_body(&mut body);
                    events.push((ns, 1, EventKind::RX, body));
                }
            }
        }
    }
    events.sort_by_key(|e| (e.0, e.1));

    // The sink's own writer: the bytes the dissector meets in a real file.
    let mut w = TraceWriter::create(Path::new(out), Compression::None).unwrap_or_else(|e| {
        eprintln!("peer_trace: cannot create {out}: {e}");
        std::process::exit(1)
    });
    let mut ifaces = [0u32; 2];
    for (iface, (name, agent)) in ifaces.iter_mut().zip(HOSTS) {
        let agent = TraceAgent {
            clock_source: 0,
            ..TraceAgent::new(agent, name)
        };
        *iface = w.add_agent(&agent).expect("IDB");
    }
    let mut event_seq = [0u64; 2];
    let mut rec = Vec::new();
    for (ns, host, kind, body) in &events {
        rec.clear();
        rec.extend_from_slice(&kind.to_le_bytes());
        rec.extend_from_slice(&(body.len() as u16).to_le_bytes());
        rec.extend_from_slice(body);
        w.write_event(ifaces[*host], *ns, event_seq[*host], 0, 3, &rec)
            .expect("EPB");
        event_seq[*host] += 1;
    }
    w.finish(&[]).expect("close the trace");
    println!("{} frames", events.len());
}
