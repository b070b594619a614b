//! A trace file written by another program from events it holds (the
//! test-data generators, the dissector's test fixtures): the sink's own
//! file writer without the service around it, so that there is one
//! encoder of the format. SHB, IDBs, EPBs and ISBs come out byte for byte
//! as the sink's writer thread writes them (the same code: EPBs encoded in
//! place, plain or one zstd frame), only the file's name, the order of
//! events and the totals in the ISBs are the caller's.
//!
//! ```no_run
//! # fn main() -> Result<(), tracer_sink::SinkError> {
//! use tracer_sink::{Compression, InterfaceTotals, TraceAgent, TraceWriter};
//! let mut w = TraceWriter::create("t.pcapng".as_ref(), Compression::None)?;
//! let alpha = w.add_agent(&TraceAgent::new(0xa1, "alpha"))?;
//! # let record = [0u8; 4];
//! // One capture record: the codec's record, stamped with the global time.
//! w.write_event(alpha, 1_700_000_000_000_000_000, 0, 2, 3, &record)?;
//! w.finish(&[InterfaceTotals::new(alpha, 1, 0)])?;
//! # Ok(())
//! # }
//! ```

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;

use pcap_file::DataLink;
use tracer_codec::{CaptureHeader, ClockSource};

use crate::batch::AgentInfo;
use crate::compression::Compression;
use crate::error::SinkError;
use crate::pcapng::{IsbInfo, TraceFile};
use crate::summary::Summarizer;

/// One agent (host) of a trace file: what its interface says.
#[derive(Debug, Clone)]
pub struct TraceAgent {
    /// Agent id.
    pub agent_id: u64,
    /// Hostname (the interface's `if_name`).
    pub host: String,
    /// Clock source wire value at first sight.
    pub clock_source: u8,
    /// Incarnation (0: a version-1 agent).
    pub incarnation: u64,
    /// Source address of its first datagram.
    pub source: SocketAddr,
}

impl TraceAgent {
    /// Agent `agent_id` on `host`, clock from the sink, incarnation 0,
    /// from 0.0.0.0:0 (an agent no datagram was seen of).
    pub fn new(agent_id: u64, host: &str) -> Self {
        TraceAgent {
            agent_id,
            host: host.to_owned(),
            clock_source: ClockSource::Sink as u8,
            incarnation: 0,
            source: SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        }
    }
}

/// Link type of an interface that is no agent's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkType {
    /// LINKTYPE_USER0: one capture record per frame (the agents' interfaces).
    User0,
    /// Ethernet: frames as captured on a host's link (the agents' UDP
    /// datagrams as `dumpcap` records them, or live-interface frames).
    Ethernet,
}

/// What the ISB of one interface says at the end of the file.
#[derive(Debug, Clone)]
pub struct InterfaceTotals {
    /// Interface id.
    pub iface: u32,
    /// Events received from the agent, cumulative (`isb_ifrecv`).
    pub received: u64,
    /// Events lost before the sink, cumulative (`isb_ifdrop`).
    pub dropped: u64,
    /// The comment (none when empty).
    pub comment: String,
}

impl InterfaceTotals {
    /// Totals of `iface` without a comment.
    pub fn new(iface: u32, received: u64, dropped: u64) -> Self {
        InterfaceTotals {
            iface,
            received,
            dropped,
            comment: String::new(),
        }
    }
}

/// A trace file being written; [`finish`](Self::finish) ends it.
pub struct TraceWriter {
    file: TraceFile,
    /// Interface id -> the capture header of its agent (`None`: an
    /// interface that is no agent's).
    headers: Vec<Option<CaptureHeader>>,
    /// Frame comments as `--comments` writes them, when set.
    summarizer: Option<Summarizer>,
}

impl TraceWriter {
    /// Create (or truncate) `path` and write its SHB. The file stays in
    /// the page cache (the sink drops its own files from it): it is
    /// usually read back at once.
    pub fn create(path: &Path, compression: Compression) -> Result<Self, SinkError> {
        let mut file = TraceFile::create_at(path, compression)?;
        file.keep_cached();
        Ok(TraceWriter {
            file,
            headers: Vec::new(),
            summarizer: None,
        })
    }

    /// Give every event written by [`write_event`](Self::write_event) the
    /// frame comment the sink writes with `--comments` (the event's
    /// summary).
    pub fn with_comments(mut self) -> Self {
        self.summarizer = Some(Summarizer::default());
        self
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Write the IDB of `agent` as the sink describes an agent; returns
    /// its interface id.
    pub fn add_agent(&mut self, agent: &TraceAgent) -> Result<u32, SinkError> {
        let id = self.file.add_interface(&AgentInfo {
            index: self.file.interfaces(),
            agent_id: agent.agent_id,
            host: agent.host.clone(),
            clock_source: agent.clock_source,
            incarnation: agent.incarnation,
            source: agent.source,
        })?;
        self.headers
            .push(Some(CaptureHeader::new(agent.agent_id, &agent.host)));
        Ok(id)
    }

    /// Write the IDB of an interface that is no agent's (`if_name` and
    /// the link type only); returns its interface id.
    pub fn add_interface(&mut self, link: LinkType, name: &str) -> Result<u32, SinkError> {
        let link = match link {
            LinkType::User0 => DataLink::USER0,
            LinkType::Ethernet => DataLink::ETHERNET,
        };
        let id = self
            .file
            .add_link_interface(self.file.interfaces(), link, name)?;
        self.headers.push(None);
        Ok(id)
    }

    /// Write one event of the agent of interface `iface` as the sink
    /// does: an EPB at `ts_ns` (the event's global time), `epb_packetid`
    /// its `event_seq`, whose data are the agent's capture header (with
    /// `event_seq`, `clock_source` and `clock_state`) then `record` (kind,
    /// length, body, as on the wire).
    pub fn write_event(
        &mut self,
        iface: u32,
        ts_ns: u64,
        event_seq: u64,
        clock_source: u8,
        clock_state: u8,
        record: &[u8],
    ) -> Result<(), SinkError> {
        let Some(Some(capture)) = self.headers.get(iface as usize) else {
            return Err(SinkError::Encode(format!(
                "interface {iface} is no agent's"
            )));
        };
        match self.summarizer.as_mut() {
            Some(summarizer) => self.file.write_event_with(
                iface,
                ts_ns,
                event_seq,
                |out| capture.encode(out, event_seq, clock_source, clock_state, record),
                |out| summarizer.summarize_record(record, out),
            ),
            None => {
                self.file
                    .write_event_parts(iface, ts_ns, event_seq, capture.bytes(), record, |h| {
                        CaptureHeader::set_event(h, event_seq, clock_source, clock_state)
                    })
            }
        }?;
        self.commit_if_full()
    }

    /// Write one EPB of any bytes on interface `iface` (a frame of a
    /// captured link, or a capture record made by hand, well formed or
    /// not), with its `epb_packetid` and comment.
    pub fn write_frame(
        &mut self,
        iface: u32,
        ts_ns: u64,
        packet_id: u64,
        data: &[u8],
        comment: Option<&str>,
    ) -> Result<(), SinkError> {
        self.file
            .write_event(iface, ts_ns, data, packet_id, comment)?;
        self.commit_if_full()
    }

    fn commit_if_full(&mut self) -> Result<(), SinkError> {
        self.file.maybe_commit().map(|_| ()).map_err(|f| f.error)
    }

    /// Write one ISB per entry of `totals` (stamped with the file's latest
    /// event time, and holding the first and last event time of its
    /// interface), flush, fsync and close. Returns the file's bytes.
    pub fn finish(self, totals: &[InterfaceTotals]) -> Result<u64, SinkError> {
        let now_ns = self.file.last_event_ns().unwrap_or(0);
        // The interface id is the agent index: interfaces are described
        // once each, in order.
        let isbs: Vec<IsbInfo> = totals
            .iter()
            .map(|t| IsbInfo {
                agent: t.iface,
                ifrecv: t.received,
                ifdrop: t.dropped,
                comment: t.comment.clone(),
            })
            .collect();
        let (_, bytes, _) = self.file.close(&isbs, now_ns).map_err(|f| f.error)?;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketOption;
    use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
    use pcap_file::pcapng::blocks::interface_statistics::InterfaceStatisticsOption;
    use pcap_file::pcapng::blocks::opt_common::CommonOption;
    use pcap_file::pcapng::{Block, PcapNgReader};
    use tracer_codec::{ClockEvent, WireEvent};

    fn clock_event(ns: u64) -> ClockEvent {
        ClockEvent {
            mono_ns: ns,
            global_ns: ns,
            ref_ns: ns,
            offset_ns: -12,
            freq_ppb: 3.5,
            delay_ns: 700,
            uncertainty_ns: 350,
            error_estimate_ns: 900,
            source: 2,
            state: 3,
        }
    }

    fn clock_record(ns: u64) -> Vec<u8> {
        let ev = clock_event(ns);
        let mut rec = Vec::new();
        rec.extend_from_slice(&ClockEvent::KIND.to_le_bytes());
        rec.extend_from_slice(&(ClockEvent::BODY_LEN as u16).to_le_bytes());
        ev.encode_body(&mut rec);
        rec
    }

    /// (interface, ts, packet id, data, comment) of every EPB; IDB
    /// (link, name, description); ISB (iface, recv, drop, comment).
    #[allow(clippy::type_complexity)]
    fn read(
        bytes: &[u8],
    ) -> (
        Vec<(u32, u64, Option<u64>, Vec<u8>, Option<String>)>,
        Vec<(DataLink, String, Option<String>)>,
        Vec<(u32, Option<u64>, Option<u64>, Option<String>)>,
    ) {
        let (mut epbs, mut idbs, mut isbs) = (Vec::new(), Vec::new(), Vec::new());
        let mut r = PcapNgReader::new(bytes).unwrap();
        while let Some(b) = r.next_block() {
            match b.unwrap() {
                (Block::EnhancedPacket(e), _) => {
                    let (mut id, mut comment) = (None, None);
                    for o in &e.options {
                        match o {
                            EnhancedPacketOption::Common(CommonOption::Unknown(u)) => {
                                id = Some(u64::from_le_bytes(u.value[..].try_into().unwrap()))
                            }
                            EnhancedPacketOption::Common(CommonOption::Comment(c)) => {
                                comment = Some(c.to_string())
                            }
                            other => panic!("unexpected option {other:?}"),
                        }
                    }
                    let ts = e.timestamp.as_nanos() as u64;
                    epbs.push((e.interface_id, ts, id, e.data.to_vec(), comment));
                }
                (Block::InterfaceDescription(d), _) => {
                    let (mut name, mut desc) = (String::new(), None);
                    for o in &d.options {
                        match o {
                            InterfaceDescriptionOption::IfName(n) => name = n.to_string(),
                            InterfaceDescriptionOption::IfDescription(t) => {
                                desc = Some(t.to_string())
                            }
                            _ => {}
                        }
                    }
                    idbs.push((d.linktype, name, desc));
                }
                (Block::InterfaceStatistics(s), _) => {
                    let (mut recv, mut drop, mut comment) = (None, None, None);
                    for o in &s.options {
                        match o {
                            InterfaceStatisticsOption::IsbIfRecv(n) => recv = Some(*n),
                            InterfaceStatisticsOption::IsbIfDrop(n) => drop = Some(*n),
                            InterfaceStatisticsOption::Common(CommonOption::Comment(c)) => {
                                comment = Some(c.to_string())
                            }
                            _ => {}
                        }
                    }
                    isbs.push((s.interface_id, recv, drop, comment));
                }
                _ => {}
            }
        }
        (epbs, idbs, isbs)
    }

    fn write(path: &Path, compression: Compression, comments: bool) -> u64 {
        let mut w = TraceWriter::create(path, compression).unwrap();
        if comments {
            w = w.with_comments();
        }
        let a = w.add_agent(&TraceAgent::new(0xa1, "alpha")).unwrap();
        let lo = w.add_interface(LinkType::Ethernet, "lo").unwrap();
        let b = w
            .add_agent(&TraceAgent {
                clock_source: 1,
                incarnation: 9,
                source: "10.0.0.2:4000".parse().unwrap(),
                ..TraceAgent::new(0xb2, "beta")
            })
            .unwrap();
        assert_eq!((a, lo, b), (0, 1, 2));
        for i in 0..3000u64 {
            let ts = 1_700_000_000_000_000_000 + i * 1000;
            w.write_event([a, b][(i % 2) as usize], ts, i, 2, 3, &clock_record(ts))
                .unwrap();
        }
        w.write_frame(lo, 5, 77, &[1, 2, 3], Some("by hand"))
            .unwrap();
        assert!(w.write_event(lo, 5, 0, 2, 3, &[]).is_err());
        let totals = [
            InterfaceTotals::new(a, 1500, 3),
            InterfaceTotals {
                comment: "datagrams=1".into(),
                ..InterfaceTotals::new(b, 1500, 0)
            },
        ];
        w.finish(&totals).unwrap()
    }

    #[test]
    fn writes_what_the_sink_writes_plain_or_zstd_with_or_without_comments() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("t.pcapng");
        let zst = dir.path().join("t.pcapng.zst");
        let bytes = write(&plain, Compression::None, false);
        write(&zst, Compression::Zstd { level: 1 }, true);
        let plain_bytes = std::fs::read(&plain).unwrap();
        assert_eq!(bytes, plain_bytes.len() as u64);
        let (epbs, idbs, isbs) = read(&plain_bytes);
        assert_eq!(
            idbs,
            vec![
                (
                    DataLink::USER0,
                    "alpha".into(),
                    Some(crate::pcapng::interface_description(
                        0xa1,
                        2,
                        0,
                        "0.0.0.0:0".parse().unwrap()
                    ))
                ),
                (DataLink::ETHERNET, "lo".into(), None),
                (
                    DataLink::USER0,
                    "beta".into(),
                    Some(crate::pcapng::interface_description(
                        0xb2,
                        1,
                        9,
                        "10.0.0.2:4000".parse().unwrap()
                    ))
                ),
            ]
        );
        assert_eq!(epbs.len(), 3001);
        for (i, (iface, ts, id, data, comment)) in epbs[..3000].iter().enumerate() {
            let (agent, host) = [(0xa1, "alpha"), (0xb2, "beta")][i % 2];
            assert_eq!(*iface, [0, 2][i % 2]);
            assert_eq!(*id, Some(i as u64));
            assert_eq!(comment, &None);
            let mut want = Vec::new();
            CaptureHeader::new(agent, host).encode(&mut want, i as u64, 2, 3, &clock_record(*ts));
            assert_eq!(data, &want);
        }
        assert_eq!(
            epbs[3000],
            (1, 5, Some(77), vec![1, 2, 3], Some("by hand".into()))
        );
        assert_eq!(
            isbs,
            vec![
                (0, Some(1500), Some(3), None),
                (2, Some(1500), Some(0), Some("datagrams=1".into()))
            ]
        );
        // Compressed, with comments: the same blocks, each event's
        // comment its summary.
        let decoded = zstd::stream::decode_all(&std::fs::read(&zst).unwrap()[..]).unwrap();
        let (zepbs, zidbs, zisbs) = read(&decoded);
        assert_eq!((zidbs, zisbs), (idbs, isbs));
        assert_eq!(zepbs.len(), epbs.len());
        for (z, p) in zepbs[..3000].iter().zip(&epbs) {
            assert_eq!((z.0, z.1, z.2, &z.3), (p.0, p.1, p.2, &p.3));
            assert_eq!(z.4, Some(clock_event(z.1).summary()));
        }
    }
}
