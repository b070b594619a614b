//! The dissector on clock updates and frames whose servo state is
//! HOLDOVER (issue 16: the agent's sanity check did not follow its
//! reference), written the way the sink writes them (no root needed):
//! the state decodes by name in the event and in the capture header, the
//! update carries an expert warning, and a LOCKED one carries none.

mod dissector_common;

use dissector_common::*;
use tracer_codec::ClockState;
use tracer_e2e::tshark::{Query, Tshark};
use tracer_sink::LinkType;

const PI_WARN: &str = "6291456";

#[test]
fn holdover_is_named_and_warned_about() {
    let Some(tshark) = Tshark::or_skip("holdover_is_named_and_warned_about") else {
        return;
    };
    let t0 = 1_700_000_000_000_000_000u64;
    let update = |state: ClockState, offset_ns: i64, error_estimate_ns: u64, i: u64| {
        clock_event(
            2,
            state as u8,
            1_000 + i,
            t0 + i,
            t0 + i + 5_000_000,
            offset_ns,
            0.5,
            9_000,
            4_500,
            error_estimate_ns,
        )
    };
    let events = [
        (ClockState::Locked, update(ClockState::Locked, -3, 4_600, 0)),
        (
            ClockState::Holdover,
            update(ClockState::Holdover, -5_000_003, 5_004_503, 1),
        ),
    ];
    let frames: Vec<Frame> = events
        .iter()
        .enumerate()
        .map(|(i, (state, ev))| Frame {
            interface: 0,
            time_ns: t0 + i as u64,
            data: capture_payload(&Sent {
                agent: Agent {
                    clock_source: 2,
                    clock_state: *state as u8,
                    ..AGENT_A
                },
                event_seq: i as u64,
                record: Record::Clock {
                    ev: *ev,
                    extra: vec![],
                },
                time_ns: 0,
            }),
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("holdover.pcapng");
    write_pcapng(&file, LinkType::User0, &["host-a"], &frames);
    tshark
        .check_clean(&file, &Query::default())
        .expect("no Lua error, no malformed frame");

    let fields = [
        "_ws.col.Info",
        "nettrace.clock.state",
        "nettrace.clock_state",
        "nettrace.clock.error_estimate_ns",
        "_ws.expert.severity",
        "_ws.expert.message",
    ];
    let rows = tshark
        .fields(&file, &fields, &Query::default())
        .expect("tshark");
    assert_eq!(rows.len(), 2);
    let (locked, held) = (&rows[0], &rows[1]);
    assert!(locked.all("_ws.expert.message").is_empty(), "{locked:?}");
    assert_eq!(held.one("nettrace.clock.state"), "4");
    assert_eq!(held.one("nettrace.clock_state"), "4");
    assert_eq!(held.one("nettrace.clock.error_estimate_ns"), "5004503");
    assert!(
        held.one("_ws.col.Info").contains(&events[1].1.summary()),
        "{held:?}"
    );
    assert!(held.one("_ws.col.Info").contains("HOLDOVER"), "{held:?}");
    assert_eq!(held.one("_ws.expert.severity"), PI_WARN);
    assert!(
        held.one("_ws.expert.message").contains("HOLDOVER"),
        "{held:?}"
    );
    // Filterable by name, as the packet list shows it.
    let only = tshark
        .fields(
            &file,
            &["nettrace.event_seq"],
            &Query::default().filter("nettrace.clock_state == 4 && nettrace.clock.holdover.expert"),
        )
        .expect("tshark");
    assert_eq!(only.len(), 1, "{only:?}");
}
