//! The golden event set every field-by-field test decodes.

use std::collections::HashMap;

use tracer_codec::{ClockEvent, TxEvent};

use super::events::*;

/// The golden event set, grouped into datagrams: per agent, consecutive
/// event sequence numbers. Covers all five stages, IPv4 and IPv6, several
/// cookies and tskeys, the same (cookie, tskey) on two agents (latencies
/// must be keyed by agent too), an ACK without SND_SW, a stage without a
/// SENDMSG, an unknown kind and a body with extra trailing bytes. Clock
/// updates (kind 2) sit between TX events in the last three datagrams: all
/// three sources and four servo states, negative and positive offsets,
/// fractional and negative freq_ppb, values above 2^53, u64::MAX, a
/// reference behind the monotonic clock (negative ref - mono) and a body
/// with extra trailing bytes. The first datagram has none, the malformed
/// tests rely on that. Global times increase through the whole list, so
/// file order is send order whatever ordering the sink applies.
pub fn golden_datagrams() -> Vec<(Agent, Vec<Sent>)> {
    let a1 = Skb {
        cookie: 1001,
        tskey: 5000,
        flow: flow("10.0.0.1", 40000, "10.0.0.2", 5201),
        netns: 4_026_531_840,
    };
    let a2 = Skb { tskey: 6448, ..a1 };
    let a3 = Skb {
        cookie: 0x8000_0000_0000_0001,
        tskey: u32::MAX,
        flow: flow("192.168.1.10", 33000, "192.168.1.20", 443),
        netns: 4_026_532_001,
    };
    // Same cookie and tskey as a1, on the other agent.
    let b1 = Skb {
        cookie: 1001,
        tskey: 5000,
        flow: flow("fd00::1", 50000, "fd00:0:0:1::2", 8080),
        netns: 4_026_532_100,
    };
    let b2 = Skb {
        cookie: 3003,
        tskey: 1,
        flow: flow("2001:db8::10", 1, "2001:db8::20", 65535),
        netns: 4_026_532_100,
    };
    let b3 = Skb {
        cookie: 3004,
        tskey: 77,
        flow: flow("127.0.0.1", 45000, "127.0.0.1", 7000),
        netns: 4_026_532_100,
    };

    let t = |us: u64, ns: u64| T0 + us * 1000 + ns;
    let tx = |ev: TxEvent| Record::Tx { ev, extra: vec![] };
    let clock = |ev: ClockEvent| Record::Clock { ev, extra: vec![] };
    // mono_ns of host A / host B: boot-relative, odd, A's above 2^53.
    let mono_a = |g: u64| g - T0 + 9_007_199_254_740_993;
    let mono_b = |g: u64| g - T0 + 86_400_000_000_123;
    // B, sink, LOCKED: the Info example of the README.
    let c1 = clock_event(
        SRC_SINK,
        LOCKED,
        mono_b(t(9, 1)),
        t(9, 1),
        t(9, 1) + 13,
        -12,
        3.4,
        789,
        394,
        1_501,
    );
    // A, phc, UNLOCKED: a PHC that was never set (reference behind the
    // monotonic clock), unknown error.
    let c2 = clock_event(
        SRC_PHC,
        UNLOCKED,
        mono_a(t(21, 0)),
        t(21, 0),
        1_000_000_007,
        0,
        0.0,
        0,
        0,
        u64::MAX,
    );
    // A, phc, JUMP: stepped by a large negative offset; newer fields follow.
    let c3 = clock_event(
        SRC_PHC,
        JUMP,
        mono_a(t(34, 1)),
        t(34, 1),
        t(34, 1) + 1_234_567_890_123,
        -1_234_567_890_123,
        -12.375,
        40_001,
        20_000,
        9_007_199_254_740_995,
    );
    // B, sink, LOCKED_STABLE: an offset above 2^53, tiny negative freq.
    let c4 = clock_event(
        SRC_SINK,
        LOCKED_STABLE,
        mono_b(t(45, 0)),
        t(45, 0),
        t(45, 0) - 9_007_199_254_740_993,
        9_007_199_254_740_993,
        -0.05,
        18_014_398_509_481_985,
        3,
        17,
    );
    // B, system, LOCKED_STABLE: an offset below -2^53, large fractional freq.
    let c5 = clock_event(
        SRC_SYSTEM,
        LOCKED_STABLE,
        mono_b(t(53, 0)),
        t(53, 0),
        t(53, 0) + 9_007_199_254_740_993,
        -9_007_199_254_740_993,
        123_456.789_012_345,
        1,
        1,
        1,
    );
    let mut sendmsg_b2 = b2.at(SENDMSG, t(40, 1), 1);
    sendmsg_b2.comm = comm("curl-with-a-long"); // all 16 bytes used, no NUL
    let groups: Vec<(Agent, Vec<(Record, u64)>)> = vec![
        (
            AGENT_A,
            vec![
                (tx(a1.at(SENDMSG, t(0, 0), 0)), t(0, 0)),
                (tx(a1.at(SCHED, t(1, 337), 0)), t(1, 337)),
                (tx(a2.at(SENDMSG, t(2, 1), 1)), t(2, 1)),
                (tx(a1.at(SND_SW, t(4, 501), 1)), t(4, 501)),
                (
                    Record::Unknown {
                        kind: 77,
                        body: vec![1, 2, 3, 4, 5, 6, 7, 8, 9],
                    },
                    t(4, 501),
                ),
                (tx(a1.at(SND_HW, t(5, 3), 1)), t(5, 3)),
            ],
        ),
        (
            AGENT_B,
            vec![
                (clock(c1), t(9, 1)),
                (tx(b1.at(SCHED, t(10, 7), 1)), t(10, 7)),
                (tx(b1.at(SND_SW, t(12, 999), 1)), t(12, 999)),
            ],
        ),
        (
            AGENT_A,
            vec![
                (tx(a2.at(SCHED, t(20, 3), 0)), t(20, 3)),
                (clock(c2), t(21, 0)),
                (tx(a1.at(ACK, t(30, 11), 0)), t(30, 11)),
                (tx(a3.at(SENDMSG, t(31, 0), 1)), t(31, 0)),
                (tx(a3.at(SCHED, t(31, 901), 1)), t(31, 901)),
                (
                    Record::Tx {
                        ev: a3.at(SND_SW, t(33, 17), 1),
                        extra: vec![0xaa, 0xbb, 0xcc, 0xdd, 0xee],
                    },
                    t(33, 17),
                ),
                (
                    Record::Clock {
                        ev: c3,
                        extra: vec![0x11, 0x22, 0x33],
                    },
                    t(34, 1),
                ),
                // No SND_SW for a2: ACK - SCHED.
                (tx(a2.at(ACK, t(35, 5), 0)), t(35, 5)),
                (tx(a3.at(ACK, t(39, 123), 1)), t(39, 123)),
            ],
        ),
        (
            AGENT_B,
            vec![
                (tx(sendmsg_b2), t(40, 1)),
                (tx(b2.at(SCHED, t(41, 2), 0)), t(41, 2)),
                (clock(c4), t(45, 0)),
                (tx(b1.at(ACK, t(50, 0), 1)), t(50, 0)),
                (tx(b3.at(SENDMSG, t(51, 0), 0)), t(51, 0)),
                (tx(b3.at(SND_SW, t(52, 0), 0)), t(52, 0)),
                (clock(c5), t(53, 0)),
            ],
        ),
    ];

    let mut next_seq: HashMap<u64, u64> =
        HashMap::from([(AGENT_A.agent_id, 100), (AGENT_B.agent_id, 0)]);
    groups
        .into_iter()
        .map(|(agent, recs)| {
            let seq = next_seq.get_mut(&agent.agent_id).unwrap();
            let sent = recs
                .into_iter()
                .map(|(record, time_ns)| {
                    let s = Sent {
                        agent: agent.clone(),
                        event_seq: *seq,
                        record,
                        time_ns,
                    };
                    *seq += 1;
                    s
                })
                .collect();
            (agent, sent)
        })
        .collect()
}
