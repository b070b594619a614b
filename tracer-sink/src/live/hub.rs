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
