//! The live pcapng stream (`--live-listen`) with the client side of
//! `tracer_auth::live` over a raw TcpStream: a client connected from the
//! start reads a valid pcapng stream holding exactly the file's events
//! (same interfaces, timestamps, packet ids and capture records, in the
//! file's order); a client joining mid-run gets the SHB and the IDBs of
//! the live agents first, then only the events written after it joined;
//! a wrong or missing key is refused; clients past the limit are
//! refused; a client that stops reading is cut loose and counted while
//! the file gets every event.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::{Block, PcapNgReader};
use tracer_auth::live::{
    ClientHello, HandshakeError, ServerHello, Status, Verdict, SERVER_HELLO_LEN, VERDICT_LEN,
};
use tracer_auth::SharedKey;
use tracer_sink::{LiveStreamConfig, SinkConfig};

fn key(b: u8) -> SharedKey {
    SharedKey::from_bytes(&[b; 32]).expect("a 32-byte key")
}

fn stream_config(key: Option<SharedKey>) -> (LiveStreamConfig, SocketAddr) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the live listener");
    let addr = l.local_addr().unwrap();
    (LiveStreamConfig::new(l, key.map(Arc::new)), addr)
}

/// Why a connection failed: the handshake's error, or I/O.
#[derive(Debug)]
enum ConnectError {
    Handshake(HandshakeError),
    Io(#[allow(dead_code)] std::io::Error),
}

impl From<std::io::Error> for ConnectError {
    fn from(e: std::io::Error) -> Self {
        ConnectError::Io(e)
    }
}

impl From<HandshakeError> for ConnectError {
    fn from(e: HandshakeError) -> Self {
        ConnectError::Handshake(e)
    }
}

/// The client's side of the handshake, blocking.
fn connect(addr: SocketAddr, key: Option<&SharedKey>) -> Result<TcpStream, ConnectError> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut b = [0u8; SERVER_HELLO_LEN];
    s.read_exact(&mut b)?;
    let hello = ServerHello::decode(&b)?;
    let mut nonce = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut nonce)?;
    let reply = ClientHello::answer(&hello, nonce, key)?;
    s.write_all(&reply.encode())?;
    let mut v = [0u8; VERDICT_LEN];
    s.read_exact(&mut v)?;
    Verdict::check(&v, &hello, &reply, key)?;
    Ok(s)
}

/// Everything a client reads until the sink closes the stream.
fn read_all(mut s: TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    s.read_to_end(&mut out).expect("the stream ends cleanly");
    out
}

/// An EPB as both the file and the stream hold it: its interface's name,
/// timestamp, packet data.
type Epb = (String, u64, Vec<u8>);

/// Parse a whole pcapng byte stream: block kinds in order ('S', 'I',
/// 'E', ...) and the EPBs; panics on anything malformed.
fn parse(bytes: &[u8]) -> (Vec<char>, Vec<Epb>) {
    let mut r = PcapNgReader::new(bytes).expect("a pcapng stream starts with an SHB");
    let mut order = vec!['S'];
    let mut names: Vec<String> = Vec::new();
    let mut epbs = Vec::new();
    while let Some(b) = r.next_block() {
        let (block, _) = b.expect("a whole pcapng block");
        match block {
            Block::SectionHeader(_) => {
                order.push('S');
                names.clear();
            }
            Block::InterfaceDescription(i) => {
                order.push('I');
                names.push(idb_name(&i));
            }
            Block::EnhancedPacket(e) => {
                order.push('E');
                epbs.push(epb(&names, &e));
            }
            _ => order.push('?'),
        }
    }
    (order, epbs)
}

fn epb(names: &[String], e: &EnhancedPacketBlock) -> Epb {
    let name = names
        .get(e.interface_id as usize)
        .cloned()
        .expect("an EPB names a described interface");
    (name, e.timestamp.as_nanos() as u64, e.data.to_vec())
}

fn file_epbs(out: &std::path::Path) -> Vec<Epb> {
    let mut v = Vec::new();
    for f in files(out) {
        for s in read_file(&f) {
            let names: Vec<String> = s.idbs.iter().map(idb_name).collect();
            v.extend(s.epbs.iter().map(|e| epb(&names, e)));
        }
    }
    v
}

/// `rounds` datagrams of 5 events from each agent, times after `t0`.
fn send_rounds(agents: &mut [SimAgent], to: SocketAddr, t0: u64, rounds: u64) -> usize {
    let tx = sender();
    let mut n = 0;
    for round in 0..rounds {
        for (ai, a) in agents.iter_mut().enumerate() {
            let evs: Vec<_> = (0..5u64)
                .map(|k| tx_event(t0 + round * 10_000 + k * 100 + ai as u64, round, 2))
                .collect();
            tx.send_to(&a.datagram(&evs), to).unwrap();
            n += evs.len();
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_read_the_files_events_as_pcapng_and_late_ones_start_with_the_idbs() {
    let (live, addr) = stream_config(None);
    let sink = TestSink::start(|c| SinkConfig {
        live_stream: Some(live),
        ..c
    })
    .await;
    let early = tokio::task::spawn_blocking(move || connect(addr, None).expect("handshake"))
        .await
        .unwrap();
    let mut agents = [
        SimAgent::new(0x1111, "alpha"),
        SimAgent::new(0x2222, "beta"),
        SimAgent::new(0x3333, "gamma"),
    ];
    let first = send_rounds(&mut agents, sink.addr, BASE_NS, 20);
    // Past the reorder window: the first events are written.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let late = tokio::task::spawn_blocking(move || connect(addr, None).expect("handshake"))
        .await
        .unwrap();
    // A tick for the writer to welcome the late client.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = send_rounds(&mut agents, sink.addr, BASE_NS + 1_000_000_000, 20);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let readers = tokio::task::spawn_blocking(move || (read_all(early), read_all(late)));
    let (stats, dir) = sink.stop().await;
    let (early, late) = readers.await.unwrap();

    let file = file_epbs(&dir.path().join("out"));
    assert_eq!(file.len(), first + second);
    assert_eq!(stats.events_written, (first + second) as u64);

    // From the start: the file's blocks, the file's events.
    let (order, epbs) = parse(&early);
    assert_eq!(
        &order[..4],
        &['S', 'I', 'I', 'I'],
        "SHB, then an IDB per agent"
    );
    assert!(
        epbs == file,
        "the early client's events differ from the file's"
    );

    // Mid-run: the SHB and the three live agents' IDBs first, then only
    // the events written after it joined.
    let (order, epbs) = parse(&late);
    assert_eq!(&order[..4], &['S', 'I', 'I', 'I'], "{order:?}");
    assert!(!order[4..].contains(&'I'), "no IDB later: {order:?}");
    assert_eq!(epbs.len(), second, "the events after joining");
    assert!(epbs[..] == file[first..]);

    let live = stats.live.expect("live stats");
    assert_eq!(live.clients_connected, 2);
    assert_eq!(live.stream_frames_sent, (first + 2 * second) as u64);
    assert_eq!((live.clients_cut, live.stream_frames_dropped), (0, 0));
    assert!(live.stream_listen.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_or_missing_keys_and_clients_past_the_limit_are_refused() {
    let (mut live, addr) = stream_config(Some(key(1)));
    live.max_clients = 1;
    let sink = TestSink::start(|c| SinkConfig {
        live_stream: Some(live),
        ..c
    })
    .await;
    let results = tokio::task::spawn_blocking(move || {
        let wrong = connect(addr, Some(&key(2)));
        let missing = connect(addr, None);
        let right = connect(addr, Some(&key(1))).expect("the sink's key is accepted");
        let second = connect(addr, Some(&key(1)));
        (wrong, missing, right, second)
    })
    .await
    .unwrap();
    let (wrong, missing, right, second) = results;
    assert!(
        matches!(
            wrong,
            Err(ConnectError::Handshake(HandshakeError::Refused(
                Status::BadTag
            )))
        ),
        "{wrong:?}"
    );
    assert!(
        matches!(
            missing,
            Err(ConnectError::Handshake(HandshakeError::KeyRequired))
        ),
        "{missing:?}"
    );
    assert!(
        matches!(
            second,
            Err(ConnectError::Handshake(HandshakeError::Refused(
                Status::TooManyClients
            )))
        ),
        "{second:?}"
    );
    // The accepted client reads a stream that starts with an SHB.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reader = tokio::task::spawn_blocking(move || read_all(right));
    let (stats, _dir) = sink.stop().await;
    let bytes = reader.await.unwrap();
    let (order, _) = parse(&bytes);
    assert_eq!(order, ['S']);
    let live = stats.live.expect("live stats");
    assert_eq!(live.clients_connected, 1);
    assert_eq!(live.clients_refused_key, 1);
    assert_eq!(live.clients_refused_full, 1);
    // The client without a key gives up before its hello.
    assert_eq!(live.clients_handshake_failed, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_cut_loose_and_the_file_gets_everything() {
    let (mut live, addr) = stream_config(None);
    live.client_queue_chunks = 2;
    live.max_clients = 1;
    let sink = TestSink::start(|c| SinkConfig {
        live_stream: Some(live),
        ..c
    })
    .await;
    let stuck = tokio::task::spawn_blocking(move || {
        let s = connect(addr, None).expect("handshake");
        // Read nothing more, with as little room as the kernel allows.
        socket2::SockRef::from(&s)
            .set_recv_buffer_size(4096)
            .unwrap();
        s
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Far more than the client's queue (2 x 256 KiB) and the sockets'
    // buffers hold: about 16 MB of EPBs, sent in steps.
    let mut agent = [SimAgent::new(0x4444, "busy")];
    let mut sent = 0;
    for step in 0..20u64 {
        sent += send_rounds(&mut agent, sink.addr, BASE_NS + step * 1_000_000_000, 1000);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    // The sink reset the connection: reading ends (a reset, or EOF)
    // instead of waiting for more.
    let ended = tokio::task::spawn_blocking(move || {
        let mut s = stuck;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match s.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return false,
                Err(_) => return true,
            }
        }
    });
    assert!(
        ended.await.unwrap(),
        "the slow client's connection was not closed"
    );
    // Its place is free again (one client at most here).
    let again = tokio::task::spawn_blocking(move || connect(addr, None).map(drop))
        .await
        .unwrap();
    assert!(again.is_ok(), "{again:?}");
    let (stats, _dir) = sink.stop().await;
    assert_eq!(stats.events_accepted, sent as u64);
    assert_eq!(
        stats.events_written, sent as u64,
        "the file waits for no client"
    );
    assert_eq!(stats.sink_write_lost, 0);
    let live = stats.live.expect("live stats");
    assert_eq!(live.clients_cut, 1, "{live:?}");
    assert!(live.stream_frames_dropped > 0, "{live:?}");
    assert_eq!(live.clients_live, 0);
}
