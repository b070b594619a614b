//! What authentication adds to the sink's receive path, per event: the
//! validation every datagram gets (`DatagramView::parse`) against the same
//! plus the tag check a keyed sink does first, on one core, alternating
//! the two in rounds and printing medians. The ingest benchmark
//! (bench/sink-ingest.sh) measures whole-sink rates; this isolates the one
//! step a key adds, which a busy shared machine blurs there.
//!
//! ```text
//! cargo run --release -p tracer-sink --example auth_cost
//! ```

use std::hint::black_box;
use std::time::Instant;

use tracer_auth::{Purpose, SharedKey};
use tracer_codec::{
    mac_trailer, DatagramBuilder, DatagramHeader, DatagramHeaderRef, DatagramView, TxEvent,
    WIRE_VERSION,
};

fn datagram(size: usize, key: Option<&tracer_auth::MacKey>) -> (Vec<u8>, u64) {
    let mut b = DatagramBuilder::new("bench-host", size);
    if key.is_some() {
        b = b.with_mac_room();
    }
    let mut n = 0;
    while b.push_tx(&TxEvent {
        global_ns: 1_700_000_000_000_000_000 + n,
        stage: 2,
        family: 4,
        ..TxEvent::default()
    }) {
        n += 1;
    }
    let h = DatagramHeader {
        version: WIRE_VERSION,
        agent_id: 1,
        boot_id: [1; 16],
        seq: 0,
        lost_events: 0,
        first_event_seq: 0,
        clock_source: 0,
        clock_state: 2,
        event_count: 0,
        flags: 0,
        incarnation: 7,
        sink_instance: 0,
        sent_mono_ns: 0,
        hostname: "bench-host".into(),
    };
    let d = match key {
        Some(k) => b.finish_with_mac(&h, |d| k.tag(d)),
        None => b.finish(&h),
    };
    (d, n)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let key = SharedKey::from_bytes(&[7; 32])
        .expect("32 bytes")
        .mac_key(Purpose::Datagram);
    println!("size events/datagram  parse_ns/event  parse+tag_ns/event  added_ns/event  tag_share");
    for size in [1472usize, 9000, 65000] {
        let (plain, n) = datagram(size, None);
        let (tagged, _) = datagram(size, Some(&key));
        let iters = (50_000_000 / size).max(1000);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..9 {
            let t = Instant::now();
            for _ in 0..iters {
                let v = DatagramView::parse(black_box(&plain)).expect("valid");
                black_box(v.header().seq);
            }
            a.push(t.elapsed().as_nanos() as f64 / (iters as f64 * n as f64));
            let t = Instant::now();
            for _ in 0..iters {
                let bytes = black_box(&tagged);
                let (h, _) = DatagramHeaderRef::parse(bytes).expect("valid");
                let (signed, tag) = mac_trailer(bytes, &h).expect("tagged");
                assert!(key.verify(signed, tag));
                let v = DatagramView::parse(bytes).expect("valid");
                black_box(v.header().seq);
            }
            b.push(t.elapsed().as_nanos() as f64 / (iters as f64 * n as f64));
        }
        let (pa, pb) = (median(a), median(b));
        println!(
            "{size:>5} {n:>17} {pa:>15.1} {pb:>19.1} {:>15.1} {:>9.0}%",
            pb - pa,
            100.0 * (pb - pa) / pb
        );
    }
}
