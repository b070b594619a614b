//! End to end with the real kernel: `--sample-every 10` on both ends of a
//! TCP flow (sender agent `--probes tx`, receiver agent `--probes rx`, one
//! sink) must keep them comparable: nearly every sampled TX skb has an RX
//! skb carrying its bytes in the receiver's trace, while the receiver
//! records clearly fewer skbs than it received.

use std::time::Duration;

use tracer_codec::{Event, RxStage, TxStage};
use tracer_e2e::bins::bin;
use tracer_e2e::netns::NetnsPair;
use tracer_e2e::procs::Proc;
use tracer_e2e::scenario::{spawn_agent, spawn_sink, stop_json, tcp_flow, SINK_PORT};
use tracer_e2e::skip::require_root;

const PORT: u16 = 5401;
/// 20 MiB: 320 granules of 64 KiB, ~32 of them sampled at 1 in 10.
const WRITES: usize = 1280;
const SIZE: usize = 16 << 10;

/// The receiver's agent: rx only, sampling like the sender.
fn spawn_receiver_agent(pair: &NetnsPair) -> Proc {
    let mut cmd = NetnsPair::exec(&pair.b, &bin("tracer-agent"));
    cmd.args(["--sink", &format!("{}:{SINK_PORT}", pair.addr_b)])
        .args(["--probes", "rx", "--hostname", "receiver", "--json"])
        .args(["--sample-every", "10"]);
    let mut agent = Proc::spawn("receiver agent", cmd);
    agent.wait_stderr("rx probe attached", Duration::from_secs(30));
    agent
}

#[test]
fn sampled_tx_skbs_have_their_rx_counterpart() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrsam", 247).expect("creating namespaces");
    let out = tempfile::tempdir().unwrap();
    let mut sink = spawn_sink(&pair, out.path(), &[]);
    let mut sender = spawn_agent(&pair, &["--sample-every", "10"]);
    let mut receiver = spawn_receiver_agent(&pair);
    let (client, server) = tcp_flow(&pair, PORT, WRITES, SIZE);
    std::thread::sleep(Duration::from_millis(300));
    let sender_final = stop_json(&mut sender, libc::SIGINT);
    let receiver_final = stop_json(&mut receiver, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(200));
    let sink_final = stop_json(&mut sink, libc::SIGTERM);
    assert_eq!(sink_final["datagrams_rejected"], 0);
    for (who, f) in [("sender", &sender_final), ("receiver", &receiver_final)] {
        assert_eq!(f["stats"]["bpf"]["ringbuf_lost"], 0, "{who}: {f}");
        assert_eq!(f["stats"]["ring_overruns"], 0, "{who}: {f}");
    }
    let trace = tracer_e2e::pcap::read_dir(out.path());

    // Sequence numbers relative to a base well before the flow's first
    // byte, so ranges compare without wrap-around.
    let mut tx: Vec<(u32, u32)> = Vec::new(); // [seq, tskey + 1) of SENDMSGs
    let mut rx: Vec<(RxStage, u32, u32)> = Vec::new();
    for f in &trace.frames {
        match &f.event {
            Event::Tx(e) if f.host == "sender" => {
                let fl = e.flow();
                if fl.sport == client.port()
                    && fl.dport == server.port()
                    && e.stage() == Some(TxStage::Sendmsg)
                {
                    tx.push((e.seq, e.tskey.wrapping_add(1)));
                }
            }
            Event::Rx(e) if f.host == "receiver" => {
                let fl = e.flow();
                let stage = e.stage().expect("known stage");
                if fl.sport == client.port()
                    && fl.dport == server.port()
                    && matches!(stage, RxStage::StackEntry | RxStage::TcpInput)
                    && e.end_seq != e.seq
                {
                    rx.push((stage, e.seq, e.end_seq));
                }
            }
            _ => {}
        }
    }
    assert!(
        tx.len() >= WRITES / 10 / 3,
        "{} sampled SENDMSGs for {WRITES} writes at 1 in 10",
        tx.len()
    );
    let base = tx.iter().map(|t| t.0).min().unwrap().wrapping_sub(1 << 30);
    let rel = |s: u32| u64::from(s.wrapping_sub(base));
    let overlaps = |a: (u32, u32), b: (u32, u32)| rel(a.0) < rel(b.1) && rel(b.0) < rel(a.1);
    let matched = tx
        .iter()
        .filter(|t| rx.iter().any(|(_, s, e)| overlaps(**t, (*s, *e))))
        .count();
    assert!(
        matched * 10 >= tx.len() * 9,
        "only {matched} of {} sampled TX skbs have an RX skb carrying their bytes",
        tx.len()
    );

    // Sampling happened on the receiver: its STACK_ENTRY ranges cover a
    // small part of the stream (about 1/N to 2/N of it), not all of it.
    let stream = (WRITES * SIZE) as u64;
    let covered: u64 = rx
        .iter()
        .filter(|(st, _, _)| *st == RxStage::StackEntry)
        .map(|(_, s, e)| u64::from(e.wrapping_sub(*s)))
        .sum();
    assert!(
        covered > 0 && covered * 2 < stream,
        "receiver recorded {covered} of {stream} bytes at 1 in 10"
    );
    eprintln!(
        "sampled TX skbs {}, with RX counterpart {matched}; RX STACK_ENTRY covered {covered} of {stream} bytes",
        tx.len()
    );
}
