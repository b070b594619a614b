//! Reads the sink's pcapng files (plain or `.pcapng.zst`) back into typed
//! frames.

use std::path::{Path, PathBuf};

use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketOption;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::blocks::interface_statistics::InterfaceStatisticsOption;
use pcap_file::pcapng::blocks::opt_common::CommonOption;
use pcap_file::pcapng::{Block, PcapNgReader};
use tracer_codec::{CaptureRecord, Event};

/// One event frame.
#[derive(Debug, Clone)]
pub struct Frame {
    /// if_name of its interface.
    pub iface: String,
    /// EPB timestamp in ns.
    pub ts_ns: u64,
    /// epb_packetid.
    pub packet_id: Option<u64>,
    /// opt_comment.
    pub comment: Option<String>,
    /// Capture header: agent id.
    pub agent_id: u64,
    /// Capture header: event sequence number.
    pub event_seq: u64,
    /// Capture header: host.
    pub host: String,
    /// Capture header: the agent's clock state when it sent the event.
    pub clock_state: u8,
    /// The decoded event.
    pub event: Event,
}

/// Interface statistics of one interface.
#[derive(Debug, Clone, Default)]
pub struct IfStats {
    /// if_name.
    pub iface: String,
    /// isb_ifrecv.
    pub recv: Option<u64>,
    /// isb_ifdrop.
    pub drop: Option<u64>,
    /// opt_comment (the sink's per-agent breakdown).
    pub comment: Option<String>,
}

/// Everything read from a set of files.
#[derive(Debug, Default)]
pub struct Trace {
    /// Event frames in file order.
    pub frames: Vec<Frame>,
    /// ISBs in file order.
    pub stats: Vec<IfStats>,
    /// Files read.
    pub files: Vec<PathBuf>,
}

/// The trace files (`.pcapng` and `.pcapng.zst`) in `dir`, sorted by name.
pub fn pcapng_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| is_trace_name(p))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The pcapng byte stream of a trace file: decoded through zstd when the
/// file starts with a zstd frame (the sink's default `.pcapng.zst`). A
/// frame cut short (a killed sink's file) ends the stream where its whole
/// blocks end, as tshark reads it: a pcapng block cut there is then an
/// error of the pcapng reader.
pub fn open_trace(path: &Path) -> Box<dyn std::io::Read> {
    use std::io::BufRead;
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut r = std::io::BufReader::new(file);
    let head = r.fill_buf().expect("read the file's first bytes");
    if is_zstd(head) {
        Box::new(CutFrameIsEnd(
            zstd::Decoder::with_buffer(r).expect("zstd decoder"),
        ))
    } else {
        Box::new(r)
    }
}

/// A zstd stream whose unfinished last frame ends it (see [`open_trace`]).
struct CutFrameIsEnd<R>(R);

impl<R: std::io::Read> std::io::Read for CutFrameIsEnd<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.0.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(0),
            other => other,
        }
    }
}

/// Whether a file is a trace by its name (`.pcapng`, `.pcapng.zst`).
pub fn is_trace_name(p: &Path) -> bool {
    tracer_match::input::merge::is_trace_name(p)
}

/// Whether `head` starts a zstd frame.
pub fn is_zstd(head: &[u8]) -> bool {
    head.starts_with(&[0x28, 0xB5, 0x2F, 0xFD])
}

/// Read every pcapng file of `dir`; panics on any malformed block.
pub fn read_dir(dir: &Path) -> Trace {
    let mut t = Trace::default();
    for f in pcapng_files(dir) {
        read_file(&f, &mut t, false);
        t.files.push(f);
    }
    t
}

/// Read the files of a sink that was killed: every whole block up to the
/// first one that is cut (a killed write), which is where the file ends
/// for a reader. Returns the trace and whether a file was cut.
pub fn read_dir_of_killed_sink(dir: &Path) -> (Trace, bool) {
    let mut t = Trace::default();
    let mut cut = false;
    for f in pcapng_files(dir) {
        cut |= read_file(&f, &mut t, true);
        t.files.push(f);
    }
    (t, cut)
}

/// Returns whether the file ended in a cut block (only when `lenient`;
/// otherwise that panics).
fn read_file(path: &Path, t: &mut Trace, lenient: bool) -> bool {
    let mut r = PcapNgReader::new(open_trace(path)).expect("pcapng section header");
    let mut names: Vec<String> = Vec::new();
    while let Some(b) = r.next_block() {
        let (block, _) = match b {
            Ok(b) => b,
            Err(_) if lenient => return true,
            Err(e) => panic!("{}: bad block: {e}", path.display()),
        };
        match block {
            Block::SectionHeader(_) => names.clear(),
            Block::InterfaceDescription(idb) => {
                let name = idb
                    .options
                    .iter()
                    .find_map(|o| match o {
                        InterfaceDescriptionOption::IfName(n) => Some(n.to_string()),
                        _ => None,
                    })
                    .unwrap_or_default();
                names.push(name);
            }
            Block::EnhancedPacket(epb) => {
                let cap = CaptureRecord::decode(&epb.data)
                    .unwrap_or_else(|e| panic!("{}: bad capture record: {e}", path.display()));
                let mut packet_id = None;
                let mut comment = None;
                for o in &epb.options {
                    match o {
                        EnhancedPacketOption::Common(CommonOption::Comment(c)) => {
                            comment = Some(c.to_string())
                        }
                        // epb_packetid (code 5): pcap-file has no typed variant.
                        EnhancedPacketOption::Common(CommonOption::Unknown(u))
                            if u.code == 5 && u.value.len() == 8 =>
                        {
                            let mut b = [0u8; 8];
                            b.copy_from_slice(&u.value);
                            packet_id = Some(u64::from_le_bytes(b));
                        }
                        _ => {}
                    }
                }
                t.frames.push(Frame {
                    iface: names
                        .get(epb.interface_id as usize)
                        .cloned()
                        .unwrap_or_default(),
                    ts_ns: epb.timestamp.as_nanos() as u64,
                    packet_id,
                    comment,
                    agent_id: cap.agent_id,
                    event_seq: cap.event_seq,
                    host: cap.host.to_owned(),
                    clock_state: cap.clock_state,
                    event: cap.record.decode().expect("decodable event"),
                });
            }
            Block::InterfaceStatistics(isb) => {
                let mut s = IfStats {
                    iface: names
                        .get(isb.interface_id as usize)
                        .cloned()
                        .unwrap_or_default(),
                    ..IfStats::default()
                };
                for o in &isb.options {
                    match o {
                        InterfaceStatisticsOption::IsbIfRecv(v) => s.recv = Some(*v),
                        InterfaceStatisticsOption::IsbIfDrop(v) => s.drop = Some(*v),
                        InterfaceStatisticsOption::Common(CommonOption::Comment(c)) => {
                            s.comment = Some(c.to_string())
                        }
                        _ => {}
                    }
                }
                t.stats.push(s);
            }
            _ => {}
        }
    }
    false
}

/// One frame of a capture of a live interface (`tracer-sink
/// --live-iface`), as dumpcap wrote it.
#[derive(Debug, Clone)]
pub struct LiveFrame {
    /// The capture's own frame time (when the frame reached the
    /// interface), ns.
    pub capture_ns: u64,
    /// The frame's EtherType.
    pub ethertype: u16,
    /// Capture header: agent id.
    pub agent_id: u64,
    /// Capture header: event sequence number.
    pub event_seq: u64,
    /// The decoded event.
    pub event: Event,
}

/// Read a pcapng capture of a live interface (Ethernet frames, each an
/// Ethernet header then one capture record); panics on a frame that is
/// not one.
pub fn read_live_capture(path: &Path) -> Vec<LiveFrame> {
    let file = std::fs::File::open(path).expect("open capture");
    let mut r = PcapNgReader::new(std::io::BufReader::new(file)).expect("pcapng section header");
    let mut out = Vec::new();
    while let Some(b) = r.next_block() {
        let (block, _) = b.unwrap_or_else(|e| panic!("{}: bad block: {e}", path.display()));
        if let Block::EnhancedPacket(epb) = block {
            let data = &epb.data;
            assert!(
                data.len() > 14,
                "{}: a frame of {} bytes",
                path.display(),
                data.len()
            );
            let cap = CaptureRecord::decode(&data[14..])
                .unwrap_or_else(|e| panic!("{}: bad capture record: {e}", path.display()));
            out.push(LiveFrame {
                capture_ns: epb.timestamp.as_nanos() as u64,
                ethertype: u16::from_be_bytes([data[12], data[13]]),
                agent_id: cap.agent_id,
                event_seq: cap.event_seq,
                event: cap.record.decode().expect("decodable event"),
            });
        }
    }
    out
}
