//! Trace files of the dissector tests, written by the sink's own writer
//! (`tracer_sink::TraceWriter`): capture-record frames as the sink writes
//! them, and Ethernet frames as a capture of the agents' datagrams holds
//! them.

use std::path::Path;

use tracer_sink::{Compression, LinkType, TraceWriter};

use super::events::Sent;

/// The pcapng frame payload the sink writes for `s`.
pub fn capture_payload(s: &Sent) -> Vec<u8> {
    let mut out = Vec::new();
    tracer_codec::CaptureRecord::encode(
        &mut out,
        s.agent.agent_id,
        s.event_seq,
        s.agent.clock_source,
        s.agent.clock_state,
        s.agent.host,
        &s.record.bytes(),
    );
    out
}

/// One frame to write: interface index, time, bytes.
pub struct Frame {
    pub interface: u32,
    pub time_ns: u64,
    pub data: Vec<u8>,
}

/// Write a trace file with the sink's writer: one interface per name in
/// `interfaces` (link type `link`; name and link only, no agent
/// description), then the frames, each with its index as `epb_packetid`
/// and no comment; no interface statistics.
pub fn write_pcapng(path: &Path, link: LinkType, interfaces: &[&str], frames: &[Frame]) {
    let mut w = TraceWriter::create(path, Compression::None).expect("create pcapng");
    for name in interfaces {
        w.add_interface(link, name).expect("IDB");
    }
    for (i, f) in frames.iter().enumerate() {
        w.write_frame(f.interface, f.time_ns, i as u64, &f.data, None)
            .expect("EPB");
    }
    w.finish(&[]).expect("close pcapng");
}

/// Ethernet + IPv4 + UDP (127.0.0.1:50000 -> 127.0.0.2:`dport`) around
/// `payload`, with a correct IPv4 header checksum and no UDP checksum.
pub fn ethernet_udp(payload: &[u8], dport: u16) -> Vec<u8> {
    let udp_len = 8 + payload.len();
    let ip_len = 20 + udp_len;
    let mut f = Vec::with_capacity(14 + ip_len);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00]);
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
    ip[6] = 0x40; // don't fragment
    ip[8] = 64;
    ip[9] = 17; // UDP
    ip[12..16].copy_from_slice(&[127, 0, 0, 1]);
    ip[16..20].copy_from_slice(&[127, 0, 0, 2]);
    let sum = ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum::<u32>();
    let folded = (sum & 0xffff) + (sum >> 16);
    let csum = !(((folded & 0xffff) + (folded >> 16)) as u16);
    ip[10..12].copy_from_slice(&csum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&50000u16.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}
