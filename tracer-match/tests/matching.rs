//! The matcher on synthetic event streams with known truth: GRO, losses
//! and retransmissions, both directions of one connection, clock offsets
//! (violations and the offset interval), sampling, lost events, and the
//! same trace cut into files in different ways.

use std::collections::HashMap;
use std::path::PathBuf;

use tracer_codec::{RxEvent, RxStage, TxEvent, TxStage};
use tracer_match::input::{Ev, HostTable, Input};
use tracer_match::report::{DirectionReport, Report};
use tracer_match::{MatchConfig, Matcher, MergeConfig};
use tracer_testdata::synth::{write_trace, FileLayout, Synth, SynthConfig};

/// Run the matcher over a simulation, in memory.
fn simulate(cfg: &SynthConfig, mc: MatchConfig) -> Report {
    let mut hosts = HostTable::default();
    let ids = [
        hosts.intern(cfg.agent_ids[0], &cfg.names[0]),
        hosts.intern(cfg.agent_ids[1], &cfg.names[1]),
    ];
    let mut m = Matcher::new(mc);
    let mut sim = Synth::new(cfg.clone());
    for e in sim.by_ref() {
        m.push(&Input {
            ts_ns: e.ts_ns,
            host: ids[e.host],
            agent_id: cfg.agent_ids[e.host],
            event_seq: e.event_seq,
            clock_source: 2,
            clock_locked: e.locked,
            ev: e.ev,
        });
    }
    m.finish_input();
    tracer_match::report::build(m, &hosts, Default::default(), &HashMap::new(), 0).0
}

fn dir<'a>(r: &'a Report, from: &str, to: &str) -> &'a DirectionReport {
    r.directions
        .iter()
        .find(|d| d.sender == from && d.receiver.as_deref() == Some(to))
        .unwrap_or_else(|| panic!("no direction {from} → {to} in {:#?}", r.directions))
}

#[test]
fn gro_skbs_match_every_tx_skb_they_carry() {
    let cfg = SynthConfig {
        skbs: 400,
        gro: 4,
        jitter_ns: 1,
        ..SynthConfig::default()
    };
    let r = simulate(&cfg, MatchConfig::default());
    let d = dir(&r, "alpha", "beta");
    assert_eq!((d.sent, d.matched, d.retransmits), (400, 400, 0));
    assert_eq!(d.unmatched.total(), 0);
    let ow = d.one_way.unwrap();
    // The last TX skb of a GRO group waits for nothing; the first waits
    // for the three after it (interval 20 µs each).
    assert_eq!(ow.min_ns, 15_000);
    assert_eq!(ow.max_ns, 15_000 + 3 * 20_000);
    // Every stage of the life was found.
    for s in &d.stages {
        assert_eq!(s.dist.map(|x| x.count), Some(400), "{}", s.gap);
    }
    assert_eq!(d.violations.count, 0);
    assert!(r.directions.iter().all(|d| d.sender == "alpha"));
}

#[test]
fn a_lost_copy_leaves_both_sends_of_its_bytes_ambiguous() {
    let cfg = SynthConfig {
        skbs: 1000,
        gro: 2,
        lose_one_in: 10,
        ..SynthConfig::default()
    };
    let r = simulate(&cfg, MatchConfig::default());
    let d = dir(&r, "alpha", "beta");
    // 50 groups of 2 lost: 100 TX skbs sent twice, each byte received
    // once. Which send the one copy came from is not in the data (a
    // delayed original looks like a prompt retransmission): both sends
    // are ambiguous, none is guessed.
    assert_eq!(d.sent, 1100);
    assert_eq!(d.retransmits, 100);
    assert_eq!(d.matched, 900);
    assert_eq!(d.matched_retransmits, 0);
    assert_eq!(d.ambiguous.lost_copy, 200);
    assert_eq!(d.ambiguous.unrecorded_send, 0);
    assert_eq!(d.unmatched.total(), 0);
    let ow = d.one_way.unwrap();
    assert!(
        ow.min_ns >= 15_000 && ow.max_ns < 15_000 + 20_000 + 4_000,
        "{ow:?}"
    );
    // Bytes after a hole became readable once the retransmission filled it.
    let ready = d
        .stages
        .iter()
        .find(|s| s.gap == "TCP_INPUT→DATA_READY")
        .unwrap();
    assert!(ready.dist.unwrap().max_ns > 200_000, "{ready:?}");
    assert_eq!(r.hosts[0].retransmit_events, 100);
}

#[test]
fn a_lost_copy_soon_retransmitted_is_never_paired_with_the_wrong_send() {
    // The retransmission leaves 30 µs after the original, well inside
    // the window; only its copy arrives. No send gets a wrong one-way.
    let cfg = SynthConfig {
        skbs: 300,
        gro: 1,
        lose_one_in: 7,
        rto_ns: 30_000,
        jitter_ns: 1,
        ..SynthConfig::default()
    };
    let r = simulate(&cfg, MatchConfig::default());
    let d = dir(&r, "alpha", "beta");
    let ow = d.one_way.unwrap();
    assert_eq!((ow.min_ns, ow.max_ns), (15_000, 15_000), "{ow:?}");
    assert_eq!(d.matched + d.ambiguous.lost_copy, d.sent);
    assert_eq!(d.ambiguous.lost_copy, 2 * d.retransmits);
    assert_eq!(d.violations.count, 0);
}

#[test]
fn both_directions_of_one_connection_stay_apart() {
    let cfg = SynthConfig {
        skbs: 500,
        both_ways: true,
        ..SynthConfig::default()
    };
    let r = simulate(&cfg, MatchConfig::default());
    for (a, b) in [("alpha", "beta"), ("beta", "alpha")] {
        let d = dir(&r, a, b);
        assert_eq!((d.sent, d.matched), (500, 500), "{a} → {b}");
        assert_eq!(d.flows, 1);
    }
    assert_eq!(r.directions.len(), 2);
    let p = &r.pairs[0];
    assert_eq!((p.a.as_str(), p.b.as_str()), ("alpha", "beta"));
    assert_eq!(p.contains_zero, Some(true));
}

#[test]
fn clock_offset_shows_as_violations_and_bounds_the_interval() {
    // beta's clock 50 µs behind alpha's; true one-way 15..19 µs.
    let cfg = SynthConfig {
        skbs: 500,
        both_ways: true,
        gro: 1,
        jitter_ns: 1,
        clock_offset_ns: [0, -50_000],
        ..SynthConfig::default()
    };
    let r = simulate(&cfg, MatchConfig::default());
    let ab = dir(&r, "alpha", "beta");
    let ba = dir(&r, "beta", "alpha");
    // alpha → beta arrives "before" it left: every packet violates.
    assert_eq!(ab.matched, 500);
    assert_eq!(ab.violations.count, 500);
    let worst = ab.violations.worst_ns.unwrap();
    assert_eq!(worst, -35_000);
    assert_eq!(ab.violations.worst.as_ref().unwrap().sender, "alpha");
    assert_eq!(ba.violations.count, 0);
    // θ = clock(beta) - clock(alpha) = -50 µs lies in the interval, which
    // excludes 0 and is twice the minimum true one-way wide.
    let p = &r.pairs[0];
    let (lo, hi) = (p.lo_ns.unwrap(), p.hi_ns.unwrap());
    assert!(lo <= -50_000 && -50_000 <= hi, "[{lo}, {hi}]");
    assert_eq!(p.contains_zero, Some(false));
    assert_eq!(p.self_consistent, Some(true));
    assert_eq!(hi - lo, 2 * 15_000, "[{lo}, {hi}]");
    // The agents claimed 100 ns each: the data contradict them, and the
    // report names the packet that proves it: the fastest alpha → beta,
    // received 35 µs before it was sent.
    assert_eq!(p.claimed_bound_ns, Some(200));
    assert_eq!(p.claim_consistent, Some(false));
    assert_eq!(p.contradicting.len(), 1, "{:?}", p.contradicting);
    let proof = &p.contradicting[0];
    assert_eq!(
        (proof.sender.as_str(), proof.receiver.as_str()),
        ("alpha", "beta")
    );
    assert_eq!(proof.one_way_ns, Some(hi));
    assert_eq!(p.data_bound_ns, None);
    let text = tracer_match::text::render(&r);
    assert!(text.contains("proof: alpha → beta"), "{text}");
}

#[test]
fn data_tighter_than_the_agents_claim_is_said() {
    // Clocks agree; the agents claim 100 µs each; true one-way 15 µs: the
    // data prove |θ| ≤ 15 µs, far tighter than the 200 µs claimed.
    let cfg = SynthConfig {
        skbs: 200,
        both_ways: true,
        gro: 1,
        jitter_ns: 1,
        clock_claim_ns: [100_000, 100_000],
        ..SynthConfig::default()
    };
    let r = simulate(&cfg, MatchConfig::default());
    let p = &r.pairs[0];
    assert_eq!(p.claim_consistent, Some(true));
    assert_eq!(p.data_bound_ns, Some(15_000));
    assert_eq!(p.data_tighter_than_claim, Some(true));
    assert!(p.contradicting.is_empty());
    let text = tracer_match::text::render(&r);
    assert!(
        text.contains("the data prove more: |θ| ≤ 15.0 µs"),
        "{text}"
    );
}

#[test]
fn violations_before_a_clock_locked_are_told_apart() {
    // beta's servo takes 2 ms to lock and is 100 µs behind meanwhile;
    // afterwards both clocks agree.
    let cfg = SynthConfig {
        skbs: 500,
        both_ways: true,
        gro: 1,
        jitter_ns: 1,
        unlocked: [(0, 0), (2_000_000, -100_000)],
        ..SynthConfig::default()
    };
    let r = simulate(&cfg, MatchConfig::default());
    let ab = dir(&r, "alpha", "beta");
    // alpha -> beta packets received while beta was unlocked violate.
    assert!(ab.violations.count > 50, "{:?}", ab.violations);
    assert_eq!(ab.violations.while_unlocked, ab.violations.count);
    // The interval comes from packets on locked clocks only: it holds
    // the true offset 0, not the unlocked -100 µs.
    let p = &r.pairs[0];
    assert_eq!((p.lo_ns, p.hi_ns), (Some(-15_000), Some(15_000)), "{p:?}");
    assert!(!p.includes_unlocked);
    assert!(p.packets_a_to_b < ab.matched);
}

#[test]
fn sampling_on_both_ends_keeps_every_tagged_skb_matched() {
    let cfg = SynthConfig {
        skbs: 3000,
        sample_every: [10, 10],
        ..SynthConfig::default()
    };
    let r = simulate(
        &cfg,
        MatchConfig {
            sample_every: 10,
            ..MatchConfig::default()
        },
    );
    let d = dir(&r, "alpha", "beta");
    assert!(d.sent > 100 && d.sent < 1000, "{} of 3000 tagged", d.sent);
    assert_eq!(d.matched, d.sent);
}

#[test]
fn skbs_the_receiver_did_not_sample_are_sampled_out_not_lost() {
    // The sender records everything, the receiver one granule in 10.
    let cfg = SynthConfig {
        skbs: 3000,
        sample_every: [1, 10],
        ..SynthConfig::default()
    };
    let with_rate = simulate(
        &cfg,
        MatchConfig {
            sample_every: 10,
            ..MatchConfig::default()
        },
    );
    let d = dir(&with_rate, "alpha", "beta");
    assert_eq!(d.sent, 3000);
    assert!(d.unmatched.sampled_out > 2000, "{:?}", d.unmatched);
    assert_eq!(
        d.matched + d.unmatched.sampled_out,
        3000,
        "{:?}",
        d.unmatched
    );
    assert_eq!(d.unmatched.no_rx, 0);
    // Without the rate the matcher cannot tell: they are "no RX seen".
    let without = simulate(&cfg, MatchConfig::default());
    let d = dir(&without, "alpha", "beta");
    assert_eq!(d.unmatched.sampled_out, 0);
    assert!(d.unmatched.no_rx > 2000);
}

#[test]
fn lost_events_of_the_receiver_explain_its_missing_receptions() {
    let cfg = SynthConfig {
        skbs: 2000,
        gro: 1,
        // Bursts of 12 lost events (a lost datagram) every 300.
        drop_events: [(0, 0), (300, 12)],
        ..SynthConfig::default()
    };
    let r = simulate(&cfg, MatchConfig::default());
    let d = dir(&r, "alpha", "beta");
    // An RX skb is unmatched only when both STACK_ENTRY and TCP_INPUT
    // were lost; those are charged to lost events, none to "no RX".
    assert!(d.unmatched.lost_events > 0, "{:?}", d.unmatched);
    assert_eq!(d.unmatched.no_rx, 0, "{:?}", d.unmatched);
    assert_eq!(d.matched + d.unmatched.lost_events, 2000);
    let beta = r.hosts.iter().find(|h| h.name == "beta").unwrap();
    let lost = 12 * (beta.events["rx"] + beta.lost_events.placed) / 300;
    assert!(
        beta.lost_events.placed >= lost - 24,
        "{:?}",
        beta.lost_events
    );
}

#[test]
fn losses_only_the_files_statistics_report_are_charged_too() {
    // The receiver's agent overran its ring: events lost before they were
    // numbered, so only the ISB's total knows of them.
    let cfg = SynthConfig {
        skbs: 2000,
        gro: 1,
        ring_losses: [(0, 0), (500, 20)],
        ..SynthConfig::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let (files, _) = write_trace(dir.path(), &cfg, FileLayout::default()).unwrap();
    let (r, _) = tracer_match::run(&files, MergeConfig::default(), MatchConfig::default()).unwrap();
    let beta = r.hosts.iter().find(|h| h.name == "beta").unwrap();
    assert_eq!(beta.lost_events.placed, 0);
    assert!(beta.lost_events.reported > 100, "{:?}", beta.lost_events);
    assert_eq!(beta.lost_events.unplaced, beta.lost_events.reported);
    let d = dir_of(&r);
    assert!(d.unmatched.lost_events > 0, "{:?}", d.unmatched);
    assert_eq!(d.unmatched.no_rx, 0, "{:?}", d.unmatched);
    assert_eq!(d.matched + d.unmatched.lost_events, 2000);
}

fn v4(a: [u8; 4]) -> [u8; 16] {
    let mut r = [0u8; 16];
    r[..4].copy_from_slice(&a);
    r
}

fn mapped(a: [u8; 4]) -> [u8; 16] {
    let mut r = [0u8; 16];
    r[10] = 0xff;
    r[11] = 0xff;
    r[12..].copy_from_slice(&a);
    r
}

/// A hand-written stream: (host, ts, event).
fn run_events(events: Vec<(&str, u64, Ev)>) -> Report {
    let mut hosts = HostTable::default();
    let mut m = Matcher::new(MatchConfig {
        window_ns: 1_000_000,
        ..MatchConfig::default()
    });
    let mut seq: HashMap<String, u64> = HashMap::new();
    for (h, ts, ev) in events {
        let agent = h.bytes().map(u64::from).sum::<u64>();
        let n = seq.entry(h.to_owned()).or_default();
        m.push(&Input {
            ts_ns: ts,
            host: hosts.intern(agent, h),
            agent_id: agent,
            event_seq: *n,
            clock_source: 0,
            clock_locked: true,
            ev,
        });
        *n += 1;
    }
    m.finish_input();
    tracer_match::report::build(m, &hosts, Default::default(), &HashMap::new(), 0).0
}

fn snd(family: u8, s: [u8; 16], d: [u8; 16], tskey: u32) -> Ev {
    Ev::Tx(TxEvent {
        stage: TxStage::SndSw as u8,
        family,
        cookie: 7,
        tskey,
        sport: 40000,
        dport: 80,
        saddr: s,
        daddr: d,
        ..TxEvent::default()
    })
}

fn stack(s: [u8; 16], sp: u16, d: [u8; 16], dp: u16, seq: u32, end: u32) -> Ev {
    Ev::Rx(RxEvent {
        stage: RxStage::StackEntry as u8,
        family: 4,
        protocol: 6,
        seq,
        end_seq: end,
        sport: sp,
        dport: dp,
        saddr: s,
        daddr: d,
        ..RxEvent::default()
    })
}

#[test]
fn tuples_direction_and_mapped_addresses() {
    let (a, b) = ([10, 1, 0, 1], [10, 1, 0, 2]);
    let t = 1_000_000_000_000;
    let r = run_events(vec![
        // A dual-stack sender socket (::ffff:10.1.0.1) and the receiver's
        // IPv4 headers: one flow.
        ("a", t, snd(6, mapped(a), mapped(b), 1999)),
        ("b", t + 10_000, stack(v4(a), 40000, v4(b), 80, 1000, 2000)),
        // Bytes of the other direction with the same numbers must not
        // match: the RX skb is b → a, the send a → b.
        ("a", t + 20_000, snd(4, v4(a), v4(b), 5999)),
        ("a", t + 30_000, stack(v4(b), 80, v4(a), 40000, 5000, 6000)),
        ("b", t + 40_000, stack(v4(a), 40000, v4(b), 80, 9000, 9100)),
        // To an address nobody traced receives on.
        ("a", t + 50_000, snd(4, v4(a), v4([192, 0, 2, 9]), 100)),
    ]);
    let d = dir(&r, "a", "b");
    assert_eq!((d.sent, d.matched, d.unmatched.no_rx), (2, 1, 1));
    assert_eq!(d.one_way.unwrap().min_ns, 10_000);
    let untraced = r
        .directions
        .iter()
        .find(|d| d.receiver.is_none())
        .expect("the untraced peer's direction");
    assert_eq!(untraced.unmatched.peer_not_traced, 1);
}

#[test]
fn sends_outside_the_receivers_trace_are_counted_so() {
    let (a, b) = ([10, 1, 0, 1], [10, 1, 0, 2]);
    let t = 1_000_000_000_000;
    let r = run_events(vec![
        ("a", t, snd(4, v4(a), v4(b), 1999)), // before b's first RX event
        (
            "b",
            t + 5_000_000,
            stack(v4(a), 40000, v4(b), 80, 3000, 4000),
        ),
        ("a", t + 5_000_000 - 10_000, snd(4, v4(a), v4(b), 3999)),
        ("a", t + 9_000_000, snd(4, v4(a), v4(b), 7999)), // after its last
    ]);
    let d = dir(&r, "a", "b");
    assert_eq!(d.matched, 1);
    assert_eq!(d.unmatched.outside_window, 2, "{:?}", d.unmatched);
}

/// The report without what names the input files.
fn canonical(r: &Report) -> serde_json::Value {
    let mut v = serde_json::to_value(r).unwrap();
    v["input"]["files"] = serde_json::Value::Null;
    v["input"]["peak_held"] = serde_json::Value::Null;
    v
}

#[test]
fn one_file_rotated_files_and_per_host_files_give_one_result() {
    let cfg = SynthConfig {
        skbs: 3000,
        both_ways: true,
        lose_one_in: 25,
        clock_offset_ns: [0, 4_000],
        ..SynthConfig::default()
    };
    let merge = MergeConfig::default();
    let layouts = [
        FileLayout::default(),
        FileLayout {
            events_per_file: Some(997),
            per_host: false,
        },
        FileLayout {
            events_per_file: None,
            per_host: true,
        },
        FileLayout {
            events_per_file: Some(1500),
            per_host: true,
        },
    ];
    let mut reference = None;
    for (k, layout) in layouts.into_iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let (mut files, events) = write_trace(dir.path(), &cfg, layout.clone()).unwrap();
        assert!(events > 30_000);
        // Given in any order.
        files.reverse();
        if k > 0 {
            assert!(files.len() > 1, "{layout:?}");
        }
        let (r, _) = tracer_match::run(&files, merge, MatchConfig::default()).unwrap();
        assert_eq!(r.input.events, events);
        assert_eq!(r.input.late, 0, "{layout:?}");
        let d = dir_of(&r);
        // Lost copies leave both sends of their bytes ambiguous.
        assert!(d.matched > 2800, "{layout:?}: {}", d.matched);
        assert_eq!(d.matched + d.ambiguous.total(), d.sent, "{layout:?}");
        let c = canonical(&r);
        match &reference {
            None => reference = Some(c),
            Some(want) => assert_eq!(&c, want, "{layout:?} differs from one file"),
        }
    }
}

fn dir_of(r: &Report) -> &DirectionReport {
    dir(r, "alpha", "beta")
}

#[test]
fn memory_is_bounded_by_the_window_not_the_trace() {
    let peak = |skbs| {
        let cfg = SynthConfig {
            skbs,
            both_ways: true,
            ..SynthConfig::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let (files, _) = write_trace(dir.path(), &cfg, FileLayout::default()).unwrap();
        let (r, _) = tracer_match::run(
            &files,
            MergeConfig {
                reorder_window_ns: 5_000_000,
                ..MergeConfig::default()
            },
            MatchConfig {
                window_ns: 10_000_000,
                ..MatchConfig::default()
            },
        )
        .unwrap();
        (r.peak_held_by_matcher, r.input.peak_held)
    };
    let (small_m, small_in) = peak(5_000);
    let (big_m, big_in) = peak(50_000);
    // Ten times the trace, about the same state (the windows hold ~1.5k
    // skbs at this rate).
    assert!(big_m < small_m * 2, "matcher {small_m} -> {big_m}");
    assert!(big_in < small_in * 2, "input {small_in} -> {big_in}");
}

#[test]
fn a_damaged_file_is_used_up_to_the_damage() {
    let cfg = SynthConfig {
        skbs: 200,
        ..SynthConfig::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let (files, _) = write_trace(dir.path(), &cfg, FileLayout::default()).unwrap();
    let bytes = std::fs::read(&files[0]).unwrap();
    let cut: PathBuf = dir.path().join("cut.pcapng");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3 + 3]).unwrap();
    let (r, _) = tracer_match::run(&[cut], MergeConfig::default(), MatchConfig::default()).unwrap();
    assert_eq!(r.input.damaged_files.len(), 1);
    assert!(dir_of(&r).matched > 100);
}

/// An SND_SW (or SENDMSG) of the tag `tskey` whose skb held `[seq, end)`
/// at the callback (a version-2 event), a → b of the test flow.
fn tx_v2(stage: TxStage, tskey: u32, seq: u32, end: u32, flags: u8) -> Ev {
    let (a, b) = ([10, 1, 0, 1], [10, 1, 0, 2]);
    Ev::Tx(TxEvent {
        stage: stage as u8,
        family: 4,
        cookie: 7,
        tskey,
        seq,
        end_seq: end,
        tx_flags: tracer_codec::TX_FLAG_RANGE | flags,
        sport: 40000,
        dport: 80,
        saddr: v4(a),
        daddr: v4(b),
        ..TxEvent::default()
    })
}

fn rx_ab(seq: u32, end: u32) -> Ev {
    stack(v4([10, 1, 0, 1]), 40000, v4([10, 1, 0, 2]), 80, seq, end)
}

#[test]
fn copies_of_one_byte_pair_in_order_whatever_the_clocks_say() {
    // Both copies reached the receiver's stack (a drop after it, as
    // netfilter's): first send with first reception, second with second,
    // even with b's clock 50 µs behind (both are then violations, found
    // as such: the pairing did not use the clocks).
    let t = 1_000_000_000_000;
    for offset in [0i64, -50_000] {
        let at = |v: u64| (v as i64 + offset) as u64;
        let r = run_events(vec![
            ("a", t, tx_v2(TxStage::SndSw, 1999, 1000, 2000, 0)),
            ("b", at(t + 10_000), rx_ab(1000, 2000)),
            ("a", t + 30_000, tx_v2(TxStage::SndSw, 1999, 1000, 2000, 0)),
            ("b", at(t + 40_000), rx_ab(1000, 2000)),
        ]);
        let d = dir(&r, "a", "b");
        assert_eq!((d.sent, d.matched, d.matched_retransmits), (2, 2, 1));
        let ow = d.one_way.unwrap();
        assert_eq!((ow.min_ns, ow.max_ns), (10_000 + offset, 10_000 + offset));
        assert_eq!(d.violations.count, u64::from(offset < 0) * 2);
    }
}

#[test]
fn a_tag_on_an_skb_already_sent_never_stands_for_its_first_send() {
    // tcp_tx_timestamp() tagged the retransmit queue's tail: the bytes
    // went out untagged at t (received at t + 10 µs); the tag's SND_SW is
    // a retransmission at t + 500 µs, whose copy arrives at t + 510 µs.
    // Pairing the tagged send with the first copy would be a violation.
    let t = 1_000_000_000_000;
    let r = run_events(vec![
        ("b", t + 10_000, rx_ab(1000, 2000)),
        (
            "a",
            t + 20_000,
            tx_v2(
                TxStage::Sendmsg,
                1999,
                1000,
                2000,
                tracer_codec::TX_FLAG_SENT,
            ),
        ),
        ("a", t + 500_000, tx_v2(TxStage::SndSw, 1999, 1000, 2000, 0)),
        ("b", t + 510_000, rx_ab(1000, 2000)),
    ]);
    let d = dir(&r, "a", "b");
    assert_eq!((d.sent, d.retransmits, d.matched), (1, 1, 0));
    assert_eq!(d.ambiguous.unrecorded_send, 1);
    assert_eq!(d.violations.count, 0);
    assert_eq!(r.hosts[0].sendmsg_already_sent, 1);
}

#[test]
fn bytes_sent_inside_an_earlier_skb_pair_with_that_transmission() {
    // Tag 2999 (skb [2000, 3000) at SENDMSG) stays behind while TCP sends
    // its bytes inside the earlier tag's transmission [1000, 3000). Its
    // own SND_SW comes after the receiver already had the bytes: it is a
    // second copy, paired with the second reception, not a violation.
    let t = 1_000_000_000_000;
    let r = run_events(vec![
        ("a", t, tx_v2(TxStage::Sendmsg, 2999, 2000, 3000, 0)),
        ("a", t + 1_000, tx_v2(TxStage::SndSw, 1999, 1000, 3000, 0)),
        ("b", t + 3_000, rx_ab(1000, 3000)),
        ("a", t + 30_000, tx_v2(TxStage::SndSw, 2999, 2000, 3000, 0)),
        ("b", t + 32_000, rx_ab(2000, 3000)),
    ]);
    let d = dir(&r, "a", "b");
    assert_eq!((d.sent, d.matched, d.retransmits), (2, 2, 1));
    let ow = d.one_way.unwrap();
    assert_eq!((ow.min_ns, ow.max_ns), (2_000, 2_000));
    assert_eq!(d.violations.count, 0);
    // The second copy's life has no SENDMSG: its first send was another
    // skb's, so SENDMSG → SCHED would not be this transmission's wait.
    let first_gap = d.stages.iter().find(|s| s.gap == "SENDMSG→SCHED").unwrap();
    assert!(first_gap.dist.is_none(), "{first_gap:?}");
}

#[test]
fn a_tag_left_behind_by_tcp_grow_skb_follows_the_bytes_it_sent() {
    // SENDMSG tags [2000, 3000) (tskey 2999). tcp_grow_skb() moves those
    // bytes into the head skb [1000, 3000), which leaves untagged (no TX
    // event) and arrives at t + 12 µs; the tag stays on the next skb and
    // fires when [3000, 4000) goes out at t + 40 µs. Following tskey would
    // pair that send with the reception at t + 12 µs: a violation of
    // 28 µs on one clock. By bytes it is paired with [3000, 4000), and
    // its SENDMSG, whose byte left unstamped, starts no life.
    let t = 1_000_000_000_000;
    let r = run_events(vec![
        ("a", t, tx_v2(TxStage::Sendmsg, 2999, 2000, 3000, 0)),
        ("b", t + 12_000, rx_ab(1000, 3000)),
        ("a", t + 40_000, tx_v2(TxStage::SndSw, 2999, 3000, 4000, 0)),
        ("b", t + 41_000, rx_ab(3000, 4000)),
    ]);
    let d = dir(&r, "a", "b");
    assert_eq!((d.sent, d.matched, d.violations.count), (1, 1, 0));
    let ow = d.one_way.unwrap();
    assert_eq!((ow.min_ns, ow.max_ns), (1_000, 1_000));
    let first_gap = d.stages.iter().find(|s| s.gap == "SENDMSG→SCHED").unwrap();
    assert!(first_gap.dist.is_none(), "{first_gap:?}");
    assert_eq!(r.hosts[0].tags_moved, 1);
}

/// `bytes` as several concatenated zstd frames (what `zstd` on pieces, or
/// `cat a.zst b.zst`, makes; the sink writes one frame per file, which
/// tracer-sink/tests/compressed.rs reads with the matcher).
fn zstd_frames(bytes: &[u8]) -> Vec<u8> {
    bytes
        .chunks(100_000)
        .flat_map(|c| zstd::bulk::compress(c, 1).unwrap())
        .collect()
}

#[test]
fn a_zstd_compressed_trace_matches_as_its_plain_copy_and_a_cut_one_up_to_the_cut() {
    let cfg = SynthConfig {
        skbs: 400,
        ..SynthConfig::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let (files, _) = write_trace(dir.path(), &cfg, FileLayout::default()).unwrap();
    let plain = std::fs::read(&files[0]).unwrap();
    let zst = zstd_frames(&plain);
    assert!(zst.len() * 3 < plain.len());
    // Told by its magic bytes: a name without .zst still works.
    let named = dir.path().join("compressed.pcapng.zst");
    let unnamed = dir.path().join("compressed-too.pcapng");
    std::fs::write(&named, &zst).unwrap();
    std::fs::write(&unnamed, &zst).unwrap();
    let run = |f: &PathBuf| {
        tracer_match::run(
            std::slice::from_ref(f),
            MergeConfig::default(),
            MatchConfig::default(),
        )
        .unwrap()
        .0
    };
    let want = run(&files[0]);
    for f in [&named, &unnamed] {
        let got = run(f);
        assert!(got.input.damaged_files.is_empty());
        assert_eq!(got.input.events, want.input.events);
        assert_eq!(dir_of(&got).matched, dir_of(&want).matched);
    }
    assert!(dir_of(&want).matched > 300);
    // A directory lists the .zst file.
    let only = tempfile::tempdir().unwrap();
    std::fs::copy(&named, only.path().join("t-000.pcapng.zst")).unwrap();
    let inputs = tracer_match::input::merge::expand_inputs(&[only.path().to_owned()]).unwrap();
    assert_eq!(inputs.len(), 1);
    // Cut inside a frame: the whole frames before it are used, and the
    // file is reported damaged.
    let cut = dir.path().join("cut.pcapng.zst");
    std::fs::write(&cut, &zst[..zst.len() * 2 / 3]).unwrap();
    let r = run(&cut);
    assert_eq!(
        r.input.damaged_files.len(),
        1,
        "{:?}",
        r.input.damaged_files
    );
    assert!(r.input.events > 0 && r.input.events < want.input.events);
}

/// A CPU event of `cpu`: `interval_ns` and the four categories, ns.
fn cpu(cpu: u32, interval_ns: u64, [rx, tx, send, recv]: [u64; 4]) -> Ev {
    Ev::Cpu(tracer_codec::CpuEvent {
        interval_ns,
        net_rx_ns: rx,
        net_tx_ns: tx,
        sock_send_ns: send,
        sock_recv_ns: recv,
        cpu,
        ..Default::default()
    })
}

/// The tokens of the text summary's CPU cost row of `host` and `cpu`.
fn cpu_row<'a>(text: &'a str, host: &str, cpu: &str) -> Vec<&'a str> {
    let section = text
        .split("CPU cost of the network stack")
        .nth(1)
        .unwrap_or_else(|| panic!("no CPU cost section in:\n{text}"));
    section
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|t| t.len() > 2 && t[0] == host && t[1] == cpu)
        .unwrap_or_else(|| panic!("no row {host} {cpu} in:\n{section}"))
}

#[test]
fn cpu_cost_is_summed_per_host_and_cpu() {
    let ms = 1_000_000u64;
    let s = 1_000 * ms;
    let t = 1_000_000_000_000;
    let r = run_events(vec![
        ("a", t, cpu(0, s, [100 * ms, 10 * ms, 50 * ms, 0])),
        ("a", t + 1, cpu(1, 2 * s, [500 * ms, 0, 0, s])),
        ("b", t + 2, cpu(3, 0, [5, 0, 0, 0])),
        ("a", t + s, cpu(0, s, [300 * ms, 0, 150 * ms, 20 * ms])),
        ("b", t + s, cpu(3, 500 * ms, [600 * ms, 0, 0, 0])),
        // A host without CPU events has no row.
        ("c", t + s, snd(4, v4([10, 1, 0, 3]), v4([10, 1, 0, 4]), 1)),
    ]);
    assert_eq!(r.hosts[0].events["cpu"], 3);
    assert_eq!(r.input.events, 0, "(run_events reads no file)");

    let v = serde_json::to_value(&r).unwrap();
    let cost = v["cpu_cost"].as_array().unwrap();
    assert_eq!(cost.len(), 2, "{cost:#?}");
    let (a, b) = (&cost[0], &cost[1]);
    assert_eq!(
        (a["host"].as_str(), b["host"].as_str()),
        (Some("a"), Some("b"))
    );
    let cpus = a["cpus"].as_array().unwrap();
    assert_eq!(cpus.len(), 2);
    // CPU 0: two one-second reads.
    let c0 = &cpus[0];
    assert_eq!(c0["cpu"], 0);
    assert_eq!(c0["samples"], 2);
    assert_eq!(c0["covered_ns"], 2 * s);
    assert_eq!(c0["covered_s"], 2.0);
    assert_eq!(c0["net_rx"]["ns"], 400 * ms);
    assert_eq!(c0["net_rx"]["seconds"], 0.4);
    assert_eq!(c0["net_rx"]["share"], 0.2);
    assert_eq!(c0["net_tx"]["share"], 0.005);
    assert_eq!(c0["sock_send"]["seconds"], 0.2);
    assert_eq!(c0["sock_send"]["share"], 0.1);
    assert_eq!(c0["sock_recv"]["share"], 0.01);
    // CPU 1: one two-second read.
    assert_eq!(cpus[1]["cpu"], 1);
    assert_eq!(cpus[1]["net_rx"]["share"], 0.25);
    assert_eq!(cpus[1]["sock_recv"]["share"], 0.5);
    // The host: CPU time over both.
    let all = &a["all"];
    assert_eq!(all["cpu"], serde_json::Value::Null);
    assert_eq!(
        (all["samples"].as_u64(), all["covered_s"].as_f64()),
        (Some(3), Some(4.0))
    );
    assert_eq!(all["net_rx"]["ns"], 900 * ms);
    assert_eq!(all["net_rx"]["share"], 0.225);
    assert_eq!(all["net_tx"]["share"], 0.0025);
    assert_eq!(all["sock_send"]["share"], 0.05);
    assert_eq!(all["sock_recv"]["ns"], 1_020 * ms);
    assert_eq!(all["sock_recv"]["share"], 0.255);
    // b: an empty interval adds its time but covers none; 120 % is kept.
    let b3 = &b["cpus"][0];
    assert_eq!(
        (b3["samples"].as_u64(), b3["covered_ns"].as_u64()),
        (Some(2), Some(500 * ms))
    );
    assert_eq!(b3["net_rx"]["ns"], 600 * ms + 5);
    assert_eq!(b3["net_rx"]["share"], 1.20000001);
    assert_eq!(b["ignored_samples"], 0);

    let text = tracer_match::text::render(&r);
    assert_eq!(
        cpu_row(&text, "a", "0"),
        [
            "a", "0", "2.00", "s", "400", "ms", "20.0", "%", "10.0", "ms", "0.5", "%", "200", "ms",
            "10.0", "%", "20.0", "ms", "1.0", "%", "2"
        ]
    );
    assert_eq!(
        cpu_row(&text, "a", "all"),
        [
            "a", "all", "4.00", "s", "900", "ms", "22.5", "%", "10.0", "ms", "0.2", "%", "200",
            "ms", "5.0", "%", "1.02", "s", "25.5", "%", "3"
        ]
    );
    assert_eq!(cpu_row(&text, "b", "3")[4..8], ["600", "ms", "120.0", "%"]);
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("b ") && l.contains(" all ")),
        "one CPU: no total row\n{text}"
    );

    let html = tracer_match::html::render(&r, &tracer_match::Charts { directions: vec![] });
    let table = html
        .split("<h2>CPU cost of the network stack</h2>")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .expect("the CPU cost table");
    assert!(
        table.contains("<tr><td>a</td><td>all</td><td>4.00 s</td><td>900 ms</td><td>22.5 %</td><td>10.0 ms</td><td>0.2 %</td><td>200 ms</td><td>5.0 %</td><td>1.02 s</td><td>25.5 %</td><td>3</td></tr>"),
        "{table}"
    );
    assert!(table.contains("<td>b</td><td>3</td><td>500 ms</td><td>600 ms</td><td>120.0 %</td>"));
}

#[test]
fn without_cpu_events_there_is_no_cpu_section() {
    let t = 1_000_000_000_000;
    let r = run_events(vec![(
        "a",
        t,
        snd(4, v4([10, 1, 0, 1]), v4([10, 1, 0, 2]), 1),
    )]);
    assert!(r.cpu_cost.is_empty());
    assert!(!tracer_match::text::render(&r).contains("CPU cost"));
    let html = tracer_match::html::render(&r, &tracer_match::Charts { directions: vec![] });
    assert!(!html.contains("CPU cost"));
}
