//! The global clock end to end: agent and sink in two namespaces of one
//! kernel, so the true offset between their clocks is exactly 0. The agent
//! pretends its realtime/TAI clock is off by 3 ms + 50 ppm. With
//! `--clock sink` the kernel-stamped exchange must remove that error from
//! every event; with `--clock system` the events must show it. And a
//! bridge without the key that forges the sink's answers must be flagged,
//! counted and not followed (issue 16).

use clocksync::harness::{ExchangeBridge, Tamper};
use clocksync::{measure_offset, ClockId};
use tracer_codec::{ClockState, Event};
use tracer_e2e::netns::{in_netns, NetnsPair};
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

/// Issue 16 end to end: the agent follows the sink through a bridge in its
/// own namespace that has no key. The bridge adds junk and answers to other
/// requests before every answer from the start, and once the agent is
/// locked it moves every t2/t3 by +5 ms. The agent must count the refused
/// and unmatched answers and the samples it held in its final `--json`,
/// mark the clock HOLDOVER in the trace with an estimate showing the 5 ms,
/// and keep its events on the true axis.
#[test]
fn a_keyless_bridge_forging_the_sinks_answers_is_flagged_counted_and_not_followed() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrfrg", 235).expect("creating namespaces");
    let responder = std::net::SocketAddr::new(pair.addr_b.into(), e2e_tx::SINK_PORT + 1);
    let bridge = in_netns(NetnsPair::path(&pair.a), "bridge", move || {
        ExchangeBridge::bind("127.0.0.1:0".parse().unwrap(), responder)
    })
    .expect("a thread in the agent's namespace")
    .join()
    .expect("bridge thread")
    .expect("binding the bridge");
    let honest = Tamper {
        junk: true,
        unmatched: true,
        shift_ns: 0,
    };
    bridge.tamper(honest);
    let clock = format!("sink:{}", bridge.addr());
    let args = ["--clock", clock.as_str(), "--clock-interval", "0.2"];
    let (o, ()) = e2e_tx::traced_run_with(
        &pair,
        &args,
        &["--clock-interval", "0.2"],
        Some("state=LOCKED"),
        || {
            // Ten honest updates first: the servo's frequency estimate is
            // two samples old at the first lock, and the clock holds on it.
            std::thread::sleep(std::time::Duration::from_secs(2));
            bridge.tamper(Tamper {
                shift_ns: 5_000_000,
                ..honest
            });
            // Traffic once a few forged samples are in (0.2 s updates),
            // then at least 10 forged samples, whatever the flow took.
            std::thread::sleep(std::time::Duration::from_secs(1));
            e2e_tx::tcp_flow(&pair, 5205, chunks(), 2000);
            std::thread::sleep(std::time::Duration::from_secs(1));
        },
    );
    let stats = &o.agent_final["stats"]["clock"];
    println!("agent's clock counters: {stats}");
    let sanity = &stats["sanity"];
    assert!(sanity["rejected"].as_u64() >= Some(10), "{stats}");
    assert!(sanity["beyond_max_change"].as_u64() >= Some(1), "{stats}");
    assert_eq!(sanity["reacquired"], 0, "{stats}");
    // Junk and answers to other requests, refused by the exchange's socket
    // filter before they are queued, and counted.
    let exchange = &stats["exchange"];
    assert!(
        exchange["dropped_by_kernel"].as_u64() >= Some(20),
        "junk and unmatched: {stats}"
    );

    // The forged episode: the last run of HOLDOVER updates (a delay spike
    // may have held an honest sample before), and the update before it.
    let holdover = ClockState::Holdover as u8;
    let clocks = clock_events(&o);
    let held = clocks
        .iter()
        .rev()
        .take_while(|c| c.state == holdover)
        .count();
    assert!(
        held >= 10 && held < clocks.len(),
        "{held} HOLDOVER clock events last: {clocks:?}"
    );
    let episode = &clocks[clocks.len() - held - 1..];
    assert!(
        episode[1..]
            .iter()
            .all(|c| c.error_estimate_ns >= 4_900_000),
        "the estimate shows the 5 ms disagreement: {episode:?}"
    );
    // Held: one frequency, which no forged sample steered.
    assert!(
        episode[1..]
            .iter()
            .all(|c| c.freq_ppb == episode[1].freq_ppb),
        "{:?}",
        episode.iter().map(|c| c.freq_ppb).collect::<Vec<_>>()
    );
    // Events stamped while holding: how far each is from where the clock's
    // own frequencies took it (nowhere, unless the forgery moved it), and
    // from the truth (that, plus how well the frequency was learned).
    let off = tai_minus_mono_ns();
    let (moved, errs): (Vec<i64>, Vec<i64>) = o
        .trace
        .frames
        .iter()
        .filter(|f| f.clock_state == holdover)
        .filter_map(|f| match &f.event {
            Event::Tx(e) if e.mono_ns > episode[0].mono_ns => Some((
                e.global_ns as i64 - along(episode, e.mono_ns),
                e.global_ns as i64 - (e.mono_ns as i64 + off),
            )),
            _ => None,
        })
        .unzip();
    assert!(
        errs.len() > 100,
        "too few events in HOLDOVER: {}",
        errs.len()
    );
    report("HOLDOVER under a forged +5 ms", &errs);
    let abs = report("  off the held clock's own course", &moved);
    let max = abs[abs.len() - 1];
    assert!(
        max < 50_000,
        "max |moved| {max} ns: the forgery moved the clock"
    );
}

/// The global time at `mono` on the course the clock's updates set from
/// `updates[0]` on: each update's frequency in force from its instant.
fn along(updates: &[tracer_codec::ClockEvent], mono: u64) -> i64 {
    let (mut at, mut global) = (updates[0].mono_ns, updates[0].global_ns as f64);
    let mut freq = updates[0].freq_ppb;
    for u in updates[1..].iter().take_while(|u| u.mono_ns < mono) {
        global += (u.mono_ns - at) as f64 * (1.0 + freq * 1e-9);
        (at, freq) = (u.mono_ns, u.freq_ppb);
    }
    (global + (mono - at) as f64 * (1.0 + freq * 1e-9)).round() as i64
}
