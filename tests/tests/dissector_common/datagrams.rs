//! Real agent datagrams (the codec's builder) holding the test events,
//! in any wire version, tagged or not, padded as a GSO batch pads them.

use tracer_codec::{DatagramBuilder, DatagramHeader, WIRE_VERSION};

use super::events::{Agent, Record, Sent};

/// Incarnation of every test agent's datagrams (version 2).
pub const INCARNATION: u64 = 0x1234_5678_9abc_def1;
/// The sink instance every version-3 datagram of the fixtures is bound to.
pub const BOUND_SINK: u64 = 0x0bad_cafe_0000_0001;
/// The agent clock every version-3 datagram of the fixtures was sent at.
pub const SENT_MONO_NS: u64 = 987_654_321_000;

/// A real datagram (tracer_codec::DatagramBuilder) holding `events`.
pub fn datagram(agent: &Agent, seq: u64, lost_events: u64, events: &[Sent]) -> Vec<u8> {
    datagram_with(agent, seq, lost_events, events, WIRE_VERSION, None)
}

/// [`datagram`] in wire `version`, tagged with `key` when given.
pub fn datagram_with(
    agent: &Agent,
    seq: u64,
    lost_events: u64,
    events: &[Sent],
    version: u16,
    key: Option<&tracer_auth::MacKey>,
) -> Vec<u8> {
    datagram_padded(agent, seq, lost_events, events, version, key, None)
}

/// [`datagram_with`], padded to `pad_to` bytes as an agent pads the
/// datagrams of a UDP GSO batch.
pub fn datagram_padded(
    agent: &Agent,
    seq: u64,
    lost_events: u64,
    events: &[Sent],
    version: u16,
    key: Option<&tracer_auth::MacKey>,
    pad_to: Option<usize>,
) -> Vec<u8> {
    let mut b = DatagramBuilder::for_version(agent.host, 65_000, version).with_mac_room();
    for s in events {
        let (kind, body) = s.record.kind_body();
        let pushed = match &s.record {
            Record::Tx { ev, extra } if extra.is_empty() => b.push_tx(ev),
            Record::Clock { ev, extra } if extra.is_empty() => b.push_clock(ev),
            _ => b.push_raw(kind, &body),
        };
        assert!(pushed, "record fits");
    }
    let header = DatagramHeader {
        version,
        agent_id: agent.agent_id,
        boot_id: agent.boot_id,
        seq,
        lost_events,
        first_event_seq: events.first().map_or(0, |s| s.event_seq),
        clock_source: agent.clock_source,
        clock_state: agent.clock_state,
        event_count: 0, // set by the builder
        flags: 0,
        incarnation: INCARNATION,
        sink_instance: BOUND_SINK,
        sent_mono_ns: SENT_MONO_NS,
        hostname: agent.host.to_owned(),
    };
    let mut out = Vec::new();
    b.finish_into(&header, pad_to, key.map(|k| |d: &[u8]| k.tag(d)), &mut out);
    out
}
