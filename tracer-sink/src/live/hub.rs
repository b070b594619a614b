//! The writer's side of the live stream: the time-ordered events encoded
//! once as pcapng blocks and fanned out to every client's bounded queue.
//!
//! The stream is one pcapng section as the files are: a Section Header
//! Block, an Interface Description Block per agent (in the order agents
//! appear, as in a file), then an Enhanced Packet Block per event stamped
//! with its global time. A client joining mid-run first gets the SHB and
//! every IDB of the section so far (`head`), then the events from the
//! next hand-over on. Past [`MAX_STREAM_IFACES`] interfaces a new section
//! starts (a new SHB, the IDBs again as agents show up), so `head` stays
//! bounded on a sink that sees agents come and go for weeks.
//!
//! Never waits for a client: a hand-over a client's queue cannot take
//! cuts that client loose (counted, with the events it missed).

use std::net::SocketAddr;
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use pcap_file::pcapng::PcapNgWriter;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, Notify};
use tracer_codec::CaptureHeader;

use crate::batch::{AgentInfo, EventMeta};
use crate::error::SinkError;
use crate::fasthash::IndexMap;
use crate::pcapng::{encode_epb_parts, interface_block, section_header};

use crate::stats::{add, LiveCounters};

/// Bytes of EPBs gathered before a hand-over to the clients (also handed
/// over after every release of the reorder buffer and every tick).
pub const CHUNK_BYTES: usize = 256 << 10;
/// Hand-overs a client's queue holds by default: with [`CHUNK_BYTES`], at
/// most 8 MiB of a client's stream waits in the sink (plus its socket
/// buffer).
pub const CLIENT_QUEUE_CHUNKS: usize = 32;
/// Interfaces in one section of the stream before a new one starts.
pub const MAX_STREAM_IFACES: usize = 4096;

/// A client that passed the handshake, as the hub holds it.
pub(crate) struct Client {
    /// Its queue of hand-overs.
    pub tx: mpsc::Sender<Arc<Vec<u8>>>,
    /// Told when the client is cut loose: its task closes the connection
    /// without writing what is queued.
    pub cut: Arc<Notify>,
    /// Its address, for the logs.
    pub peer: SocketAddr,
}

/// The stream's state on the writer thread.
pub(crate) struct Hub {
    /// Clients from the acceptor, not yet sent their `head`.
    joins: Receiver<Client>,
    clients: Vec<Client>,
    /// The pcap-file writer the SHB and IDBs are encoded with; its buffer
    /// is drained into `head` and `chunk` after each block.
    blocks: PcapNgWriter<Vec<u8>>,
    /// SHB and IDBs of the current section.
    head: Vec<u8>,
    /// Agent index -> interface id in the current section.
    ifaces: IndexMap<u32>,
    /// Blocks not handed over yet.
    chunk: Vec<u8>,
    /// EPBs in `chunk`.
    chunk_events: u64,
    counters: Arc<LiveCounters>,
}

impl Hub {
    pub fn new(joins: Receiver<Client>, counters: Arc<LiveCounters>) -> Result<Self, SinkError> {
        let mut hub = Hub {
            joins,
            clients: Vec::new(),
            blocks: new_section()?,
            head: Vec::new(),
            ifaces: IndexMap::default(),
            chunk: Vec::with_capacity(CHUNK_BYTES + 4096),
            chunk_events: 0,
            counters,
        };
        hub.head = std::mem::take(hub.blocks.get_mut());
        Ok(hub)
    }

    /// The interface id of `a` in this section, writing its IDB (into
    /// `head` and the pending chunk) first if it has none.
    pub fn interface(&mut self, a: &AgentInfo) -> Option<u32> {
        if let Some(&id) = self.ifaces.get(&a.index) {
            return Some(id);
        }
        if self.ifaces.len() >= MAX_STREAM_IFACES {
            self.blocks = match new_section() {
                Ok(w) => w,
                Err(e) => {
                    tracing::error!(error = %e, "cannot start a new live stream section");
                    return None;
                }
            };
            self.ifaces.clear();
            self.head = std::mem::take(self.blocks.get_mut());
            self.chunk.extend_from_slice(&self.head);
        }
        if let Err(e) = self.blocks.write_pcapng_block(interface_block(a)) {
            tracing::error!(error = %e, "cannot encode an interface for the live stream");
            return None;
        }
        let idb = std::mem::take(self.blocks.get_mut());
        self.head.extend_from_slice(&idb);
        self.chunk.extend_from_slice(&idb);
        let id = self.ifaces.len() as u32;
        self.ifaces.insert(a.index, id);
        Some(id)
    }

    /// One event, in the stream's order. Costs nothing without clients.
    pub fn event(
        &mut self,
        ts: u64,
        a: &AgentInfo,
        capture: &CaptureHeader,
        m: &EventMeta,
        rec: &[u8],
    ) {
        if self.clients.is_empty() {
            return;
        }
        let Some(iface) = self.interface(a) else {
            return;
        };
        let at = encode_epb_parts(
            &mut self.chunk,
            iface,
            ts,
            m.event_seq,
            capture.bytes(),
            rec,
        );
        CaptureHeader::set_event(
            &mut self.chunk[at..at + capture.len()],
            m.event_seq,
            m.clock_source,
            m.clock_state,
        );
        self.chunk_events += 1;
        if self.chunk.len() >= CHUNK_BYTES {
            self.hand_over();
        }
    }

    /// Hand the pending blocks to every client, then welcome the clients
    /// that joined since (their `head` holds every IDB so far).
    pub fn flush(&mut self) {
        self.hand_over();
        while let Ok(c) = self.joins.try_recv() {
            let head = Arc::new(self.head.clone());
            match c.tx.try_send(head) {
                Ok(()) => {
                    tracing::info!(peer = %c.peer, "live stream client joined");
                    self.clients.push(c);
                }
                Err(_) => self.left(&c),
            }
        }
    }

    fn hand_over(&mut self) {
        if self.chunk.is_empty() {
            return;
        }
        let events = std::mem::take(&mut self.chunk_events);
        if self.clients.is_empty() {
            self.chunk.clear();
            return;
        }
        let chunk = Arc::new(std::mem::replace(
            &mut self.chunk,
            Vec::with_capacity(CHUNK_BYTES + 4096),
        ));
        let counters = Arc::clone(&self.counters);
        self.clients
            .retain(|c| match c.tx.try_send(Arc::clone(&chunk)) {
                Ok(()) => {
                    add(&counters.stream_frames_sent, events);
                    true
                }
                Err(TrySendError::Full(_)) => {
                    c.cut.notify_one();
                    add(&counters.clients_cut, 1);
                    add(&counters.stream_frames_dropped, events);
                    tracing::warn!(peer = %c.peer,
                    "live stream client cut loose: it reads more slowly than events come \
                     (counted as clients_cut); it may connect again");
                    false
                }
                Err(TrySendError::Closed(_)) => {
                    add(&counters.clients_left, 1);
                    tracing::info!(peer = %c.peer, "live stream client left");
                    false
                }
            });
    }

    fn left(&self, c: &Client) {
        add(&self.counters.clients_left, 1);
        tracing::info!(peer = %c.peer, "live stream client left");
    }

    /// End of the run: hand over what is pending; the clients' tasks write
    /// what is queued and close.
    pub fn close(&mut self) {
        self.flush();
        self.clients.clear();
    }
}

/// A pcap-file writer whose buffer holds a fresh SHB.
fn new_section() -> Result<PcapNgWriter<Vec<u8>>, SinkError> {
    PcapNgWriter::with_section_header(Vec::new(), section_header())
        .map_err(|e| SinkError::Encode(format!("live stream section header: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    use pcap_file::pcapng::{Block, PcapNgReader};

    fn agent(index: u32) -> AgentInfo {
        AgentInfo {
            index,
            agent_id: u64::from(index) + 1,
            host: format!("h{index}"),
            clock_source: 0,
            incarnation: 1,
            source: "127.0.0.1:9".parse().unwrap(),
        }
    }

    fn meta(agent: u32, seq: u64) -> EventMeta {
        EventMeta {
            ts_ns: 1000 + seq,
            event_seq: seq,
            agent,
            start: 0,
            len: 0,
            clock_source: 0,
            clock_state: 2,
        }
    }

    /// Block kinds of a byte stream, 'S' 'I' 'E', with each EPB's interface.
    fn kinds(bytes: &[u8]) -> Vec<(char, u32)> {
        let mut r = PcapNgReader::new(bytes).expect("starts with an SHB");
        let mut v = vec![('S', 0)];
        while let Some(b) = r.next_block() {
            match b.expect("whole block").0 {
                Block::SectionHeader(_) => v.push(('S', 0)),
                Block::InterfaceDescription(_) => v.push(('I', 0)),
                Block::EnhancedPacket(e) => v.push(('E', e.interface_id)),
                _ => v.push(('?', 0)),
            }
        }
        v
    }

    fn join(hub: &mut Hub, tx: &std::sync::mpsc::Sender<Client>) -> mpsc::Receiver<Arc<Vec<u8>>> {
        let (ctx, crx) = mpsc::channel(1 << 16);
        tx.send(Client {
            tx: ctx,
            cut: Arc::new(Notify::new()),
            peer: "127.0.0.1:1".parse().unwrap(),
        })
        .unwrap();
        hub.flush();
        crx
    }

    fn drain(rx: &mut mpsc::Receiver<Arc<Vec<u8>>>) -> Vec<u8> {
        let mut v = Vec::new();
        while let Ok(c) = rx.try_recv() {
            v.extend_from_slice(&c);
        }
        v
    }

    #[test]
    fn a_new_section_starts_past_the_interface_bound() {
        let (tx, rx) = std::sync::mpsc::channel();
        let mut hub = Hub::new(rx, Arc::new(LiveCounters::default())).unwrap();
        let mut early = join(&mut hub, &tx);
        let rec = [3u8, 0, 0, 0];
        for i in 0..=MAX_STREAM_IFACES as u32 {
            let a = agent(i);
            hub.event(
                1,
                &a,
                &CaptureHeader::new(a.agent_id, &a.host),
                &meta(i, 0),
                &rec,
            );
        }
        hub.flush();
        let k = kinds(&drain(&mut early));
        // SHB, then IDB + EPB per agent up to the bound; the next agent
        // opens a second section where it is interface 0.
        let shbs: Vec<usize> = (0..k.len()).filter(|&i| k[i].0 == 'S').collect();
        assert_eq!(shbs.len(), 2, "two sections");
        assert_eq!(k[shbs[1]..], [('S', 0), ('I', 0), ('E', 0)]);
        assert_eq!(k[shbs[1] - 1], ('E', MAX_STREAM_IFACES as u32 - 1));
        // A client joining now gets the second section's header only.
        let mut late = join(&mut hub, &tx);
        assert_eq!(kinds(&drain(&mut late)), [('S', 0), ('I', 0)]);
    }

    #[test]
    fn a_full_queue_cuts_the_client_and_counts_what_it_missed() {
        let (tx, rx) = std::sync::mpsc::channel();
        let counters = Arc::new(LiveCounters::default());
        let mut hub = Hub::new(rx, Arc::clone(&counters)).unwrap();
        let (ctx, mut crx) = mpsc::channel(1);
        let cut = Arc::new(Notify::new());
        tx.send(Client {
            tx: ctx,
            cut: Arc::clone(&cut),
            peer: "127.0.0.1:1".parse().unwrap(),
        })
        .unwrap();
        hub.flush(); // its head fills its queue of one
        let a = agent(0);
        let h = CaptureHeader::new(a.agent_id, &a.host);
        for s in 0..3 {
            hub.event(1, &a, &h, &meta(0, s), &[3, 0, 0, 0]);
        }
        hub.flush();
        let get = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(get(&counters.clients_cut), 1);
        assert_eq!(get(&counters.stream_frames_dropped), 3);
        assert!(hub.clients.is_empty());
        // Its task was told; what it holds is the head only.
        assert!(crx.try_recv().is_ok() && crx.try_recv().is_err());
        // Later events cost nothing: no client, nothing encoded.
        hub.event(1, &a, &h, &meta(0, 9), &[3, 0, 0, 0]);
        assert!(hub.chunk.is_empty());
    }
}
