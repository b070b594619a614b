//! The global clock end to end: agent and sink in two namespaces of one
//! kernel, so the true offset between their clocks is exactly 0. The agent
//! pretends its realtime/TAI clock is off by 3 ms + 50 ppm. With
//! `--clock sink` the kernel-stamped exchange must remove that error from
//! every event; with `--clock system` the events must show it.

use clocksync::{measure_offset, ClockId};
use tracer_codec::{ClockState, Event};
use tracer_e2e::netns::NetnsPair;
use tracer_e2e::scenario as e2e_tx;
use tracer_e2e::skip::require_root;

const INJECT: [&str; 4] = [
    "--inject-clock-offset-ns",
    "3000000",
    "--inject-clock-drift-ppm",
    "50",
];

/// Truth for a raw monotonic stamp: the same instant read on this kernel's
/// CLOCK_TAI (both namespaces share it).
fn tai_minus_mono_ns() -> i64 {
    measure_offset(ClockId::Monotonic, ClockId::Tai, 64)
        .unwrap()
        .offset_ns()
}

/// |global - truth| of every TX event sent while the agent's clock was locked.
fn errors_after_lock(o: &e2e_tx::Outcome) -> Vec<i64> {
    let off = tai_minus_mono_ns();
    let locked = [ClockState::Locked as u8, ClockState::LockedStable as u8];
    o.trace
        .frames
        .iter()
        .filter(|f| locked.contains(&f.clock_state))
        .filter_map(|f| match &f.event {
            Event::Tx(e) => Some(e.global_ns as i64 - (e.mono_ns as i64 + off)),
            _ => None,
        })
        .collect()
}

/// Writes in the traced flow (bench/clock-e2e.sh asks for a longer run).
fn chunks() -> usize {
    std::env::var("E2E_CLOCK_CHUNKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn report(name: &str, errs: &[i64]) -> Vec<i64> {
    let mut abs: Vec<i64> = errs.iter().map(|e| e.abs()).collect();
    abs.sort_unstable();
    println!(
        "{name}: {} events after lock, |error| p50 {} ns, p99 {} ns, max {} ns",
        abs.len(),
        percentile(&abs, 0.5),
        percentile(&abs, 0.99),
        abs[abs.len() - 1]
    );
    abs
}

fn clock_events(o: &e2e_tx::Outcome) -> Vec<tracer_codec::ClockEvent> {
    o.trace
        .frames
        .iter()
        .filter_map(|f| match &f.event {
            Event::Clock(c) => Some(*c),
            _ => None,
        })
        .collect()
}

#[test]
fn clock_sink_removes_an_injected_clock_error() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrclk", 233).expect("creating namespaces");
    let mut args = vec!["--clock", "sink", "--clock-interval", "0.2"];
    args.extend(INJECT);
    let (o, _) = e2e_tx::traced_run_with(
        &pair,
        &args,
        &["--clock-interval", "0.2"],
        Some("state=LOCKED"),
        || e2e_tx::tcp_flow(&pair, 5203, chunks(), 2000),
    );
    let clocks = clock_events(&o);
    assert!(clocks.len() >= 3, "too few clock events: {}", clocks.len());
    assert!(clocks.iter().all(|c| c.source == 2), "clock source is sink");
    let errs = errors_after_lock(&o);
    assert!(errs.len() > 100, "too few locked events: {}", errs.len());
    let abs = report("--clock sink", &errs);
    // Bounds: the exchange's own error over veth (kernel stamps, warmed
    // path, min-delay of 16: p99 < 0.1 µs idle and < 0.5 µs under load in
    // bench/clock-exchange.sh), the sink's own tracking of CLOCK_TAI (tens
    // of ns), and the agent servo's residual between 0.2 s updates (the
    // injected 50 ppm drift cancels in the exchange, so it is not tracked).
    // The target is p99 <= 1 µs; the max gets 5 µs of headroom for
    // a loaded CI machine. Without the exchange the error would be >= 3 ms.
    let (p99, max) = (percentile(&abs, 0.99), abs[abs.len() - 1]);
    assert!(p99 < 1_000, "--clock sink: p99 |error| {p99} ns >= 1 µs");
    assert!(max < 5_000, "--clock sink: max |error| {max} ns >= 5 µs");
}

#[test]
fn clock_system_shows_the_injected_clock_error() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrcls", 234).expect("creating namespaces");
    let mut args = vec!["--clock", "system", "--clock-interval", "0.2"];
    args.extend(INJECT);
    let (o, _) = e2e_tx::traced_run_with(&pair, &args, &[], Some("state=LOCKED"), || {
        e2e_tx::tcp_flow(&pair, 5204, chunks(), 2000)
    });
    assert!(clock_events(&o).iter().all(|c| c.source == 0));
    let errs = errors_after_lock(&o);
    assert!(errs.len() > 100, "too few locked events: {}", errs.len());
    report("--clock system", &errs);
    // 3 ms at start, + 50 µs per second the run lasts (well under 10 s).
    for e in errs {
        assert!(
            (2_990_000..3_600_000).contains(&e),
            "--clock system should be off by the injected 3 ms + 50 ppm, got {e} ns"
        );
    }
}
