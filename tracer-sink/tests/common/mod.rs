//! Helpers shared by the integration tests: simulated agents, an
//! in-process sink on 127.0.0.1:0, and a pcapng reader.
#![allow(dead_code)]

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::Duration;

use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::interface_statistics::{
    InterfaceStatisticsBlock, InterfaceStatisticsOption,
};
use pcap_file::pcapng::blocks::opt_common::CommonOption;
use pcap_file::pcapng::{Block, PcapNgReader};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracer_codec::{
    DatagramBuilder, DatagramHeader, TxEvent, MAC_LEN, RECORD_HEADER_LEN, WIRE_VERSION,
};
use tracer_sink::{SinkConfig, SinkError, SinkStats};

/// A TAI instant in 2023, far from "now": events with it sort before
/// anything stamped with the sink's receive time.
pub const BASE_NS: u64 = 1_700_000_000_000_000_000;

/// A simulated agent that frames events like the real one.
pub struct SimAgent {
    pub agent_id: u64,
    pub boot_id: [u8; 16],
    pub host: String,
    pub clock_source: u8,
    pub clock_state: u8,
    pub seq: u64,
    pub event_seq: u64,
    pub lost_events: u64,
    pub max_len: usize,
    /// Random per process start in a real agent; here derived from the id.
    pub incarnation: u64,
    /// Wire version to send (1: an agent of an older build).
    pub version: u16,
    /// Tag every datagram with this key.
    pub key: Option<tracer_auth::MacKey>,
    /// The sink instance its datagrams are bound to (0: none yet).
    pub sink_instance: u64,
}

impl SimAgent {
    pub fn new(agent_id: u64, host: &str) -> Self {
        SimAgent {
            agent_id,
            boot_id: [agent_id as u8; 16],
            host: host.to_owned(),
            clock_source: 0,
            clock_state: 2,
            seq: 0,
            event_seq: 0,
            lost_events: 0,
            max_len: 1472,
            incarnation: agent_id ^ 0x1_0000_0000,
            version: WIRE_VERSION,
            key: None,
            sink_instance: 0,
        }
    }

    /// Bind to the sink as a real agent does: read acknowledgements on
    /// `sock` (where this agent's datagrams came from) until one for this
    /// agent from another sink instance than the current one arrives, and
    /// carry that instance from now on. A keyed sink holds an agent's
    /// datagrams until it has bound.
    pub fn bind(&mut self, sock: &UdpSocket) {
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let end = std::time::Instant::now() + Duration::from_secs(5);
        let mut buf = [0u8; 256];
        while std::time::Instant::now() < end {
            let Ok(n) = sock.recv(&mut buf) else {
                continue;
            };
            if let Ok((ack, _)) = tracer_codec::Ack::parse(&buf[..n]) {
                if (ack.agent_id, ack.incarnation) == (self.agent_id, self.incarnation)
                    && ack.sink_instance != self.sink_instance
                {
                    self.sink_instance = ack.sink_instance;
                    return;
                }
            }
        }
        panic!(
            "agent {:x}: no acknowledgement to bind to within 5 s",
            self.agent_id
        );
    }

    /// The same agent tagging its datagrams with `key`.
    pub fn with_key(mut self, key: &tracer_auth::SharedKey) -> Self {
        self.key = Some(key.mac_key(tracer_auth::Purpose::Datagram));
        self
    }

    fn builder(&self) -> DatagramBuilder {
        let b = DatagramBuilder::for_version(&self.host, self.max_len, self.version);
        if self.key.is_some() {
            b.with_mac_room()
        } else {
            b
        }
    }

    fn frame(&self, mut b: DatagramBuilder) -> Vec<u8> {
        match &self.key {
            Some(k) => b.finish_with_mac(&self.header(), |d| k.tag(d)),
            None => b.finish(&self.header()),
        }
    }

    fn header(&self) -> DatagramHeader {
        DatagramHeader {
            version: self.version,
            agent_id: self.agent_id,
            boot_id: self.boot_id,
            seq: self.seq,
            lost_events: self.lost_events,
            first_event_seq: self.event_seq,
            clock_source: self.clock_source,
            clock_state: self.clock_state,
            event_count: 0,
            flags: 0,
            incarnation: self.incarnation,
            sink_instance: self.sink_instance,
            sent_mono_ns: mono_ns(),
            hostname: self.host.clone(),
        }
    }

    /// One datagram holding all of `events` (they must fit), advancing seq.
    pub fn datagram(&mut self, events: &[TxEvent]) -> Vec<u8> {
        let mut b = self.builder();
        for e in events {
            assert!(b.push_tx(e), "event does not fit the datagram");
        }
        let d = self.frame(b);
        self.seq += 1;
        self.event_seq += events.len() as u64;
        d
    }

    /// A datagram with raw records `(kind, body)`.
    pub fn datagram_raw(&mut self, recs: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut b = self.builder();
        for (k, body) in recs {
            assert!(b.push_raw(*k, body));
        }
        let d = self.frame(b);
        self.seq += 1;
        self.event_seq += recs.len() as u64;
        d
    }

    /// How many TX events fit one datagram of this agent.
    pub fn per_datagram(&self) -> usize {
        let tag = if self.key.is_some() { MAC_LEN } else { 0 };
        (self.max_len - tracer_codec::wire::fixed_len(self.version) - self.host.len() - tag)
            / (RECORD_HEADER_LEN + TxEvent::BODY_LEN)
    }
}

/// CLOCK_MONOTONIC now, ns (what an agent stamps its datagrams with).
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Cookies of the TX events in the files of `dir`, sorted.
pub fn written_cookies(dir: &Path) -> Vec<u64> {
    let mut out = Vec::new();
    for f in files(dir) {
        for s in read_file(&f) {
            for e in &s.epbs {
                let c = tracer_codec::CaptureRecord::decode(&e.data).unwrap();
                if let tracer_codec::Event::Tx(t) = c.record.decode().unwrap() {
                    out.push(t.cookie);
                }
            }
        }
    }
    out.sort();
    out
}

/// A plausible TX event at `global_ns`.
pub fn tx_event(global_ns: u64, cookie: u64, stage: u8) -> TxEvent {
    TxEvent {
        mono_ns: global_ns - BASE_NS + 1_000,
        global_ns,
        cookie,
        tskey: cookie as u32 ^ 0x5555,
        seq: 1000,
        netns: 4026531840,
        cpu: (cookie % 2) as u32,
        pid: if stage == 0 { 4242 } else { 0 },
        tid: if stage == 0 { 4243 } else { 0 },
        stage,
        family: 4,
        sport: 40000,
        dport: 5201,
        saddr: [10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        daddr: [10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        comm: *b"iperf3\0\0\0\0\0\0\0\0\0\0",
        ..TxEvent::default()
    }
}

/// A sink running in-process on 127.0.0.1:0.
pub struct TestSink {
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    handle: JoinHandle<Result<SinkStats, SinkError>>,
}

impl TestSink {
    /// Start with a config derived from the default one for a fresh temp dir.
    pub async fn start(tune: impl FnOnce(SinkConfig) -> SinkConfig) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        Self::start_in(dir, tune).await
    }

    /// Start writing into `dir/out`.
    pub async fn start_in(
        dir: tempfile::TempDir,
        tune: impl FnOnce(SinkConfig) -> SinkConfig,
    ) -> Self {
        let cfg = tune(SinkConfig::new(dir.path().join("out")));
        let (socket, _) =
            tracer_sink::bind_udp("127.0.0.1:0".parse().unwrap(), 32 << 20).expect("bind");
        let addr = socket.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let handle = tokio::spawn(tracer_sink::run(socket, cfg, async move {
            let _ = rx.await;
        }));
        TestSink {
            addr,
            dir,
            stop: Some(tx),
            handle,
        }
    }

    pub fn out(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// Shut down and return the final stats.
    pub async fn stop(mut self) -> (SinkStats, tempfile::TempDir) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let stats = tokio::time::timeout(Duration::from_secs(30), self.handle)
            .await
            .expect("sink did not stop within 30 s")
            .expect("sink task panicked")
            .expect("sink returned an error");
        (stats, self.dir)
    }
}

/// A UDP sender socket.
pub fn sender() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").expect("bind sender")
}

/// One pcapng section as read back.
#[derive(Debug, Default)]
pub struct Section {
    pub idbs: Vec<InterfaceDescriptionBlock<'static>>,
    pub epbs: Vec<EnhancedPacketBlock<'static>>,
    pub isbs: Vec<InterfaceStatisticsBlock<'static>>,
    /// Block kinds in file order: 'S', 'I', 'E', 'T' (statistics).
    pub order: Vec<char>,
    pub shb_app: Option<String>,
    /// Padding blocks skipped.
    pub padding: usize,
}

/// Read a pcapng file whole; panics on any parse error.
pub fn read_file(path: &Path) -> Vec<Section> {
    let mut r = PcapNgReader::new(tracer_e2e::pcap::open_trace(path)).expect("pcapng header");
    let mut sections: Vec<Section> = vec![Section::default()];
    sections[0].order.push('S');
    if let Some(app) = r.section().options.iter().find_map(|o| match o {
        pcap_file::pcapng::blocks::section_header::SectionHeaderOption::UserApplication(a) => {
            Some(a.to_string())
        }
        _ => None,
    }) {
        sections[0].shb_app = Some(app);
    }
    while let Some(b) = r.next_block() {
        let (b, _) = b.unwrap_or_else(|e| panic!("{}: bad block: {e}", path.display()));
        let s = sections.last_mut().unwrap();
        match b {
            Block::SectionHeader(_) => {
                let mut n = Section::default();
                n.order.push('S');
                sections.push(n);
            }
            Block::InterfaceDescription(i) => {
                s.order.push('I');
                s.idbs.push(i.into_owned());
            }
            Block::EnhancedPacket(e) => {
                s.order.push('E');
                s.epbs.push(e.into_owned());
            }
            Block::InterfaceStatistics(i) => {
                s.order.push('T');
                s.isbs.push(i.into_owned());
            }
            // The padding that keeps every block inside one page
            // (pcapng/pages.rs): skipped, as Wireshark skips it.
            Block::Unknown(u) if u.type_ == tracer_sink::PAD_BLOCK => s.padding += 1,
            other => panic!("unexpected block {other:?}"),
        }
    }
    sections
}

/// Trace files (`.pcapng`, `.pcapng.zst`) of a directory, in the order
/// they were written.
pub fn files(dir: &Path) -> Vec<PathBuf> {
    tracer_e2e::pcap::pcapng_files(dir)
}

pub fn idb_name(i: &InterfaceDescriptionBlock) -> String {
    i.options
        .iter()
        .find_map(|o| match o {
            InterfaceDescriptionOption::IfName(n) => Some(n.to_string()),
            _ => None,
        })
        .unwrap_or_default()
}

pub fn idb_desc(i: &InterfaceDescriptionBlock) -> String {
    i.options
        .iter()
        .find_map(|o| match o {
            InterfaceDescriptionOption::IfDescription(n) => Some(n.to_string()),
            _ => None,
        })
        .unwrap_or_default()
}

pub fn epb_packet_id(e: &EnhancedPacketBlock) -> Option<u64> {
    e.options.iter().find_map(|o| match o {
        EnhancedPacketOption::Common(CommonOption::Unknown(u))
            if u.code == tracer_sink::EPB_PACKETID =>
        {
            Some(u64::from_le_bytes(u.value.as_ref().try_into().ok()?))
        }
        _ => None,
    })
}

pub fn epb_comment(e: &EnhancedPacketBlock) -> Option<String> {
    e.options.iter().find_map(|o| match o {
        EnhancedPacketOption::Common(CommonOption::Comment(c)) => Some(c.to_string()),
        _ => None,
    })
}

/// `(ifrecv, ifdrop, comment)` of an ISB.
pub fn isb_counts(i: &InterfaceStatisticsBlock) -> (Option<u64>, Option<u64>, Option<String>) {
    let mut r = (None, None, None);
    for o in &i.options {
        match o {
            InterfaceStatisticsOption::IsbIfRecv(n) => r.0 = Some(*n),
            InterfaceStatisticsOption::IsbIfDrop(n) => r.1 = Some(*n),
            InterfaceStatisticsOption::Common(CommonOption::Comment(c)) => {
                r.2 = Some(c.to_string())
            }
            _ => {}
        }
    }
    r
}

pub fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// Map a section's interface id to the agent id in its description.
pub fn iface_agent(s: &Section, iface: u32) -> String {
    let d = idb_desc(&s.idbs[iface as usize]);
    d.split_whitespace().nth(1).unwrap_or_default().to_owned()
}

/// The `tracer-sink` binary running on 127.0.0.1:`port`, its stderr drained
/// by a thread (so it never blocks) and returned by [`SinkBin::stop`].
pub struct SinkBin {
    /// The sink process (its stdout is piped when asked for).
    pub child: std::process::Child,
    /// UDP port it listens on.
    pub port: u16,
    logger: std::thread::JoinHandle<String>,
}

/// A UDP port free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl SinkBin {
    /// Start the binary writing into `out` with `args`, and wait for its
    /// "started" log line (it has bound its socket then).
    pub fn start(out: &Path, args: &[&str], stdout: std::process::Stdio) -> Self {
        use std::io::{BufRead, BufReader};
        let port = free_port();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tracer-sink"))
            .args(["--listen", &format!("127.0.0.1:{port}"), "--output"])
            .arg(out)
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(stdout)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn tracer-sink");
        let stderr = child.stderr.take().unwrap();
        let (ltx, lrx) = std::sync::mpsc::channel::<String>();
        let logger = std::thread::spawn(move || {
            let mut all = String::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = ltx.send(line.clone());
                all.push_str(&line);
                all.push('\n');
            }
            all
        });
        loop {
            let line = lrx
                .recv_timeout(Duration::from_secs(20))
                .expect("sink did not start");
            if line.contains("tracer-sink started") {
                break;
            }
        }
        SinkBin {
            child,
            port,
            logger,
        }
    }

    /// SIGTERM, wait; returns the exit status, everything on stderr and,
    /// when it was piped, everything on stdout.
    pub fn stop(mut self) -> (std::process::ExitStatus, String, String) {
        use std::io::Read;
        // SAFETY: plain kill(2) on the pid of a child we spawned and still own.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(rc, 0);
        let mut stdout = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            o.read_to_string(&mut stdout).unwrap();
        }
        let status = self.child.wait().unwrap();
        (status, self.logger.join().unwrap(), stdout)
    }
}
