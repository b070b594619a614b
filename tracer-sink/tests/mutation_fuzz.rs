//! Mutated copies of real datagrams (fixed seed): the sink survives them,
//! counts every reject under its reason (exactly those the codec gives,
//! plus the sink's own sequence and admission reasons), writes every
//! accepted event, and the file stays valid for a pcapng reader and for
//! tshark with the dissector (no Lua error, no malformed frame).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use tracer_codec::{ClockEvent, DatagramBuilder, DatagramView, TxEvent};

/// xorshift64: the same mutations on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Real datagrams of a few agents: TX events, clock updates, an unknown
/// kind, and header-only ones.
fn originals(rng: &mut Rng) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut agents = [
        SimAgent::new(0xF0_0001, "fuzz-a"),
        SimAgent::new(0xF0_0002, "fuzz-b.example"),
    ];
    for i in 0..200u64 {
        let a = &mut agents[(i % 2) as usize];
        let d = match i % 10 {
            0 => {
                let mut b = DatagramBuilder::new(&a.host, a.max_len);
                let ev = ClockEvent {
                    mono_ns: 1_000 + i,
                    global_ns: BASE_NS + i * 1000,
                    ref_ns: BASE_NS + i * 1000,
                    offset_ns: -5,
                    freq_ppb: 1.5,
                    delay_ns: 20_000,
                    uncertainty_ns: 10_000,
                    error_estimate_ns: 12_000,
                    source: 0,
                    state: 3,
                };
                assert!(b.push_clock(&ev));
                let d = b.finish(&tracer_codec::DatagramHeader {
                    version: tracer_codec::WIRE_VERSION,
                    agent_id: a.agent_id,
                    boot_id: a.boot_id,
                    seq: a.seq,
                    lost_events: a.lost_events,
                    first_event_seq: a.event_seq,
                    clock_source: a.clock_source,
                    clock_state: a.clock_state,
                    event_count: 0,
                    flags: 0,
                    incarnation: a.incarnation,
                    sink_instance: 0,
                    sent_mono_ns: 0,
                    hostname: a.host.clone(),
                });
                a.seq += 1;
                a.event_seq += 1;
                d
            }
            1 => a.datagram_raw(&[(99, vec![0x5a; 1 + rng.below(40)])]),
            2 => a.datagram(&[]),
            _ => {
                let n = 1 + rng.below(a.per_datagram());
                let evs: Vec<TxEvent> = (0..n as u64)
                    .map(|k| tx_event(BASE_NS + i * 1000 + k, k, (k % 5) as u8))
                    .collect();
                a.datagram(&evs)
            }
        };
        out.push(d);
    }
    out
}

fn mutate(rng: &mut Rng, d: &[u8]) -> Vec<u8> {
    let mut m = d.to_vec();
    for _ in 0..1 + rng.below(3) {
        match rng.below(7) {
            // Flip a bit.
            0 | 1 => {
                let i = rng.below(m.len());
                if let Some(b) = m.get_mut(i) {
                    *b ^= 1 << rng.below(8);
                }
            }
            // Overwrite a byte with an edge value.
            2 => {
                let i = rng.below(m.len());
                let v = [0u8, 1, 0x7f, 0x80, 0xff][rng.below(5)];
                if let Some(b) = m.get_mut(i) {
                    *b = v;
                }
            }
            // Cut.
            3 => {
                let n = rng.below(m.len() + 1);
                m.truncate(n);
            }
            // Append garbage.
            4 => {
                for _ in 0..1 + rng.below(64) {
                    m.push(rng.next() as u8);
                }
            }
            // Overwrite a u16 or u64 (lengths, counts, sequence numbers).
            5 => {
                if m.len() >= 8 {
                    let i = rng.below(m.len() - 7);
                    let v = rng.next().to_le_bytes();
                    let w = if rng.below(2) == 0 { 2 } else { 8 };
                    m[i..i + w].copy_from_slice(&v[..w]);
                }
            }
            // Duplicate a slice inside.
            _ => {
                if m.len() > 4 {
                    let a = rng.below(m.len());
                    let b = (a + 1 + rng.below(32)).min(m.len());
                    let piece = m[a..b].to_vec();
                    let at = rng.below(m.len());
                    m.splice(at..at, piece);
                }
            }
        }
    }
    m.truncate(tracer_codec::MAX_DATAGRAM_LEN);
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutated_datagrams_are_counted_by_reason_and_the_file_stays_valid() {
    const MUTANTS: usize = 20_000;
    let sink = TestSink::start(|c| tracer_sink::SinkConfig {
        reorder_window: Duration::from_millis(20),
        ..c
    })
    .await;
    let tx = sender();
    let mut rng = Rng(0x00C0_FFEE_D00D_F00D);
    let orig = originals(&mut rng);
    // The originals first (all accepted), then the mutants.
    for d in &orig {
        tx.send_to(d, sink.addr).unwrap();
    }
    let mut decode_rejects: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut decodable = 0u64;
    for i in 0..MUTANTS {
        let k = rng.below(orig.len());
        let m = mutate(&mut rng, &orig[k]);
        match DatagramView::parse(&m) {
            Err(e) => *decode_rejects.entry(e.reason()).or_insert(0) += 1,
            Ok(_) => decodable += 1,
        }
        tx.send_to(&m, sink.addr).unwrap();
        if i % 1000 == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let (stats, dir) = sink.stop().await;
    eprintln!(
        "accepted {} rejected {}: {:?}",
        stats.datagrams_accepted,
        stats.datagrams_rejected,
        stats
            .rejects
            .iter()
            .filter(|(_, n)| **n > 0)
            .collect::<Vec<_>>()
    );
    let sent = (orig.len() + MUTANTS) as u64;
    assert_eq!(
        stats.datagrams_received, sent,
        "a datagram was lost on the way"
    );
    assert_eq!(
        stats.datagrams_accepted + stats.datagrams_rejected,
        stats.datagrams_received
    );
    assert_eq!(
        stats.rejects.values().sum::<u64>(),
        stats.datagrams_rejected
    );
    // Every reject the codec gives is counted under its reason, exactly.
    for (reason, n) in &decode_rejects {
        assert_eq!(stats.rejects[*reason], *n, "reason {reason}: {stats:?}");
    }
    // The rest (decodable mutants) were accepted or rejected by the sink's
    // own checks (sequence, duplicates, admission).
    let sink_rejects: u64 = tracer_sink::agents::SINK_REASONS
        .iter()
        .map(|r| stats.rejects[*r])
        .sum();
    assert_eq!(
        stats.datagrams_accepted + sink_rejects,
        orig.len() as u64 + decodable,
        "{stats:?}"
    );
    assert!(
        decode_rejects.len() >= 6,
        "too few kinds of rejects: {decode_rejects:?}"
    );
    assert!(decodable > 100, "too few decodable mutants: {decodable}");
    assert_eq!(stats.events_written, stats.events_accepted);
    assert_eq!(stats.sink_write_lost, 0);

    // The file: valid for a pcapng reader, one EPB per written event.
    let f = files(&dir.path().join("out"));
    assert_eq!(f.len(), 1);
    let epbs: usize = read_file(&f[0]).iter().map(|s| s.epbs.len()).sum();
    assert_eq!(epbs as u64, stats.events_written);
    // And for tshark with the dissector.
    let Some(tshark) = tracer_e2e::tshark::Tshark::or_skip("mutation fuzz") else {
        return;
    };
    let q = tracer_e2e::tshark::Query::default();
    if let Err(e) = tshark.check_clean(&f[0], &q) {
        panic!("{e}");
    }
}
