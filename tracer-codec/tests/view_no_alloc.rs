//! `DatagramView` validates and walks a datagram without allocating: a
//! counting global allocator proves it (this test binary holds only this
//! test, so no other thread allocates meanwhile).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use tracer_codec::*;

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn parse_and_walk_allocate_nothing() {
    let mut b = DatagramBuilder::new("host-a", 1472);
    for i in 0..8u64 {
        let ev = TxEvent {
            global_ns: 1000 + i,
            stage: (i % 5) as u8,
            ..TxEvent::default()
        };
        assert!(b.push_tx(&ev));
    }
    assert!(b.push_raw(999, &[1, 2, 3]));
    let header = DatagramHeader {
        version: WIRE_VERSION,
        agent_id: 1,
        boot_id: [0; 16],
        seq: 0,
        lost_events: 0,
        first_event_seq: 0,
        clock_source: 0,
        clock_state: 0,
        event_count: 0,
        flags: 0,
        incarnation: 1,
        sink_instance: 0,
        sent_mono_ns: 0,
        hostname: "host-a".to_owned(),
    };
    let bytes = b.finish(&header);
    let mut bad = bytes.clone();
    bad[HEADER_FIXED_LEN + 6 + RECORD_HEADER_LEN + 56] = 77; // first record's stage

    let before = ALLOCS.load(Ordering::Relaxed);
    let view = DatagramView::parse(&bytes).expect("valid");
    let mut sum = 0u64;
    let mut n = 0;
    for r in view.records() {
        sum += r.global_ns.unwrap_or(0);
        n += 1;
    }
    let host_ok = view.header().hostname == "host-a";
    let rejected = DatagramView::parse(&bad)
        .map(|_| ())
        .map_err(|e| e.reason());
    let after = ALLOCS.load(Ordering::Relaxed);

    assert_eq!(after - before, 0, "allocations while parsing");
    assert_eq!((n, sum, host_ok), (9, (1000..1008).sum(), true));
    assert_eq!(rejected, Err("bad_field"));
}
