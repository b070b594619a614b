//! End to end with the real kernel: the drops probe in namespace a records
//! the skbs a's kernel drops, with reason names from the running kernel's
//! BTF and symbolized locations: UDP and TCP into closed ports give
//! NO_SOCKET, an nftables drop rule gives NETFILTER_DROP, and a drop in
//! namespace b is not recorded; and the tcp probe records the
//! retransmissions random loss causes and the resets of a refused connect,
//! and the socket memory anomalies: a raw socket with a minimal receive
//! buffer fills its queue (RCVQUEUE_FULL), and a UDP socket whose memory
//! cgroup caps socket memory at one page fails a charge (EXCEED_BUF_LIMIT).
//! Checked in the pcapng (decoded with tracer_codec) and through tshark
//! with the dissector.

use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::process::Command;
use std::time::Duration;

use tracer_codec::{DropEvent, Event, TcpAnomaly, TcpEvent};
use tracer_e2e::bins::bin;
use tracer_e2e::netns::{in_netns, NetnsPair};
use tracer_e2e::pcap::read_dir;
use tracer_e2e::procs::Proc;
use tracer_e2e::scenario::{spawn_sink, stop_json, tcp_flow, SINK_PORT};
use tracer_e2e::skip::require_root;
use tracer_e2e::tshark::{Query, Tshark};

/// Closed UDP port of a: NO_SOCKET.
const UDP_CLOSED: u16 = 47001;
/// UDP port of a behind an nftables drop rule: NETFILTER_DROP.
const UDP_FILTERED: u16 = 47002;
/// Closed UDP port of b: a drop in the other namespace.
const UDP_CLOSED_B: u16 = 47003;
/// Closed TCP port of a: NO_SOCKET for the SYN.
const TCP_CLOSED: u16 = 47004;
/// Source port of b's datagrams, so the flow is known exactly.
const SRC_PORT: u16 = 47100;

/// Expert severity PI_WARN as tshark prints `_ws.expert.severity`.
const PI_WARN: &str = "6291456";
/// Expert severity PI_NOTE.
const PI_NOTE: &str = "4194304";

/// An agent in namespace `ns` with `probes`, named `host`, sending to the
/// sink in b; returns once the last probe is attached.
fn spawn_agent(pair: &NetnsPair, ns: &str, host: &str, probes: &str) -> Proc {
    let mut cmd = NetnsPair::exec(ns, &bin("tracer-agent"));
    cmd.args(["--sink", &format!("{}:{SINK_PORT}", pair.addr_b)])
        .args(["--probes", probes, "--hostname", host, "--json"]);
    let mut p = Proc::spawn(host, cmd);
    let last = probes.rsplit(',').next().unwrap_or(probes);
    p.wait_stderr(&format!("{last} probe attached"), Duration::from_secs(30));
    p
}

fn netns_inode(ns: &str) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(NetnsPair::path(ns)).unwrap().ino() as u32
}

fn nft(ns: &str, rule: &str) {
    // `ip netns exec` for nft only: the agent needs nsenter (see netns.rs).
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "nft"])
        .args(rule.split(' '))
        .output()
        .expect("running nft (scripts/setup.sh installs nftables)");
    assert!(
        out.status.success(),
        "nft {rule}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Send `n` datagrams from namespace `ns` (source port `sport`, 0 for any)
/// to `to`.
fn udp_from(ns: &str, sport: u16, to: SocketAddr, n: usize) {
    in_netns(NetnsPair::path(ns), "e2e-udp", move || {
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, sport)).expect("bind");
        for _ in 0..n {
            s.send_to(b"nettrace drop test", to).expect("send");
            std::thread::sleep(Duration::from_millis(5));
        }
    })
    .expect("thread in netns")
    .join()
    .expect("udp sender");
}

/// A TCP connect from `ns` to a closed port: refused.
fn tcp_refused_from(ns: &str, to: SocketAddr) {
    in_netns(NetnsPair::path(ns), "e2e-tcp", move || {
        let e = TcpStream::connect_timeout(&to, Duration::from_secs(2)).expect_err("closed port");
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
    })
    .expect("thread in netns")
    .join()
    .expect("tcp connect");
}

#[test]
fn drops_with_reasons_in_the_traced_namespace_only() {
    if !require_root() {
        return;
    }
    let Some(tshark) = Tshark::or_skip("drops_with_reasons_in_the_traced_namespace_only") else {
        return;
    };
    let pair = NetnsPair::create("ntrdrp", 241).expect("creating namespaces");
    nft(&pair.a, "add table inet ntrdrp");
    nft(
        &pair.a,
        "add chain inet ntrdrp c { type filter hook input priority 0 ; }",
    );
    nft(
        &pair.a,
        &format!("add rule inet ntrdrp c udp dport {UDP_FILTERED} drop"),
    );

    let out = tempfile::tempdir().unwrap();
    let mut sink = spawn_sink(&pair, out.path(), &[]);
    let mut agent = spawn_agent(&pair, &pair.a, "sender", "drops");
    let a = |port| SocketAddr::from((pair.addr_a, port));
    udp_from(&pair.b, SRC_PORT, a(UDP_CLOSED), 3);
    udp_from(&pair.b, SRC_PORT + 1, a(UDP_FILTERED), 3);
    tcp_refused_from(&pair.b, a(TCP_CLOSED));
    udp_from(&pair.a, 0, SocketAddr::from((pair.addr_b, UDP_CLOSED_B)), 3);
    std::thread::sleep(Duration::from_millis(300));
    let agent_final = stop_json(&mut agent, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(200));
    let sink_final = stop_json(&mut sink, libc::SIGTERM);
    let netns_a = netns_inode(&pair.a);

    assert_eq!(agent_final["stats"]["bpf"]["ringbuf_lost"], 0);
    assert_eq!(agent_final["stats"]["ring_overruns"], 0);
    assert_eq!(agent_final["stats"]["bad_records"], 0);
    assert!(
        agent_final["stats"]["bpf"]["drops_seen"].as_u64()
            > agent_final["stats"]["drop_events"].as_u64(),
        "b's drop was seen by BPF and filtered out: {agent_final}"
    );
    let trace = read_dir(out.path());
    let drops: Vec<&DropEvent> = trace
        .frames
        .iter()
        .filter_map(|f| match &f.event {
            Event::Drop(d) => Some(d),
            _ => None,
        })
        .collect();
    assert_eq!(
        Some(drops.len() as u64),
        agent_final["stats"]["drop_events"].as_u64(),
        "every drop the agent read is in the file (sink: {sink_final})"
    );
    for d in &drops {
        assert_eq!(d.netns, netns_a, "drop from another namespace: {d:?}");
        assert!(
            d.dport != UDP_CLOSED_B,
            "b's drop leaked in: {}",
            d.summary()
        );
        // Every drop names its freeing function, as kallsyms does.
        assert!(
            d.location_str().contains("+0x") && d.location != 0,
            "{}",
            d.summary()
        );
    }
    let find = |dport: u16, l4proto: u8| -> Vec<&&DropEvent> {
        drops
            .iter()
            .filter(|d| d.dport == dport && d.l4proto == l4proto)
            .collect()
    };
    let udp_closed = find(UDP_CLOSED, 17);
    assert_eq!(udp_closed.len(), 3, "{drops:#?}");
    for d in &udp_closed {
        assert_eq!(d.reason_str(), "NO_SOCKET", "{}", d.summary());
        assert_eq!(d.family, 4);
        assert_eq!(&d.saddr[..4], &pair.addr_b.octets());
        assert_eq!(&d.daddr[..4], &pair.addr_a.octets());
        assert_eq!(d.sport, SRC_PORT);
        assert!(d.ifindex != 0);
        assert!(d.len >= 8 + 18, "UDP header and payload: {}", d.len);
    }
    let filtered = find(UDP_FILTERED, 17);
    assert_eq!(filtered.len(), 3, "{drops:#?}");
    for d in &filtered {
        assert_eq!(d.reason_str(), "NETFILTER_DROP", "{}", d.summary());
        assert_eq!(d.sport, SRC_PORT + 1);
    }
    let tcp = find(TCP_CLOSED, 6);
    assert!(!tcp.is_empty(), "{drops:#?}");
    assert!(tcp.iter().all(|d| d.reason_str() == "NO_SOCKET"));

    // The same through the dissector: names filterable, a warning each.
    let file = trace.files.first().expect("a pcapng");
    let rows = tshark
        .fields(
            file,
            &[
                "nettrace.drop.reason",
                "nettrace.drop.reason_code",
                "nettrace.drop.location",
                "nettrace.drop.dport",
                "nettrace.drop.saddr",
                "_ws.expert.severity",
                "_ws.expert.message",
            ],
            &Query::default().filter(&format!(
                "nettrace.drop.reason == \"NO_SOCKET\" && nettrace.drop.dport == {UDP_CLOSED}"
            )),
        )
        .expect("tshark");
    assert_eq!(rows.len(), 3, "{rows:#?}");
    for r in &rows {
        assert_eq!(r.one("nettrace.drop.dport"), UDP_CLOSED.to_string());
        assert_eq!(r.one("nettrace.drop.saddr"), pair.addr_b.to_string());
        assert_eq!(
            r.one("nettrace.drop.reason_code"),
            udp_closed[0].reason.to_string()
        );
        assert!(r.one("nettrace.drop.location").contains("+0x"), "{r:?}");
        // The frame's experts: the drop, a warning with its reason (and,
        // with --comments, the pcapng comment as PI_COMMENT).
        let sev = r.all("_ws.expert.severity");
        let msg = r.all("_ws.expert.message");
        let i = msg
            .iter()
            .position(|m| m.starts_with("Dropped: NO_SOCKET at __udp"))
            .unwrap_or_else(|| panic!("no drop expert: {r:?}"));
        assert_eq!(sev.get(i).map(String::as_str), Some(PI_WARN), "{r:?}");
    }
    let nf = tshark
        .fields(
            file,
            &["nettrace.drop.dport"],
            &Query::default().filter("nettrace.drop.reason == \"NETFILTER_DROP\""),
        )
        .expect("tshark");
    assert_eq!(nf.len(), 3, "{nf:#?}");
    assert!(nf
        .iter()
        .all(|r| r.one("nettrace.drop.dport") == UDP_FILTERED.to_string()));
    let b_drops = tshark
        .fields(
            file,
            &["frame.number"],
            &Query::default().filter(&format!("nettrace.drop.dport == {UDP_CLOSED_B}")),
        )
        .expect("tshark");
    assert!(b_drops.is_empty(), "{b_drops:#?}");
}

/// Port of the lossy TCP flow (a -> b).
const LOSSY_PORT: u16 = 5301;
/// Closed TCP port of b: a's connect is reset.
const TCP_CLOSED_B: u16 = 47005;

#[test]
fn retransmissions_and_resets_under_random_loss() {
    if !require_root() {
        return;
    }
    let Some(tshark) = Tshark::or_skip("retransmissions_and_resets_under_random_loss") else {
        return;
    };
    let pair = NetnsPair::create("ntrtcp", 242).expect("creating namespaces");
    // One segment in ten of the flow is lost on its way into b.
    nft(&pair.b, "add table inet ntrtcp");
    nft(
        &pair.b,
        "add chain inet ntrtcp c { type filter hook input priority 0 ; }",
    );
    nft(
        &pair.b,
        &format!("add rule inet ntrtcp c tcp dport {LOSSY_PORT} numgen random mod 10 == 0 drop"),
    );
    let out = tempfile::tempdir().unwrap();
    let mut sink = spawn_sink(&pair, out.path(), &[]);
    let mut sender = spawn_agent(&pair, &pair.a, "sender", "drops,tcp");
    let mut receiver = spawn_agent(&pair, &pair.b, "receiver", "drops,tcp");

    let (local, peer) = tcp_flow(&pair, LOSSY_PORT, 300, 3000);
    tcp_refused_from(&pair.a, SocketAddr::from((pair.addr_b, TCP_CLOSED_B)));
    std::thread::sleep(Duration::from_millis(300));
    let mut finals = Vec::new();
    for a in [&mut sender, &mut receiver] {
        let f = stop_json(a, libc::SIGINT);
        assert_eq!(f["stats"]["bpf"]["ringbuf_lost"], 0, "{f}");
        assert_eq!(f["stats"]["ring_overruns"], 0, "{f}");
        assert_eq!(f["stats"]["bad_records"], 0, "{f}");
        finals.push(f);
    }
    std::thread::sleep(Duration::from_millis(200));
    stop_json(&mut sink, libc::SIGTERM);
    let (netns_a, netns_b) = (netns_inode(&pair.a), netns_inode(&pair.b));

    let trace = read_dir(out.path());
    let mut tcp: Vec<(&str, &TcpEvent)> = Vec::new();
    let mut nf_drops = 0;
    for f in &trace.frames {
        match &f.event {
            Event::Tcp(e) => {
                let want = if f.host == "sender" { netns_a } else { netns_b };
                assert_eq!(e.netns, want, "{}: {}", f.host, e.summary());
                tcp.push((f.host.as_str(), e));
            }
            Event::Drop(d) => {
                let want = if f.host == "sender" { netns_a } else { netns_b };
                assert_eq!(d.netns, want, "{}: {}", f.host, d.summary());
                if d.reason_str() == "NETFILTER_DROP" && d.dport == LOSSY_PORT {
                    assert_eq!(f.host, "receiver", "the rule is in b");
                    nf_drops += 1;
                }
            }
            _ => {}
        }
    }
    assert!(nf_drops > 0, "random loss made no NETFILTER_DROP");
    // The sender's retransmissions of the flow, with sane sequence ranges.
    let rtx: Vec<&TcpEvent> = tcp
        .iter()
        .filter(|(h, e)| {
            *h == "sender"
                && e.anomaly() == Some(TcpAnomaly::Retransmit)
                && (e.sport, e.dport) == (local.port(), peer.port())
        })
        .map(|(_, e)| *e)
        .collect();
    assert!(
        !rtx.is_empty(),
        "{nf_drops} segments lost and no retransmission: {tcp:#?}"
    );
    for e in &rtx {
        assert!(e.cookie != 0, "{}", e.summary());
        let len = e.end_seq.wrapping_sub(e.seq);
        assert!(len > 0 && len < 1 << 20, "{}", e.summary());
        assert_eq!(&e.saddr[..4], &pair.addr_a.octets());
        assert_eq!(&e.daddr[..4], &pair.addr_b.octets());
    }
    // The refused connect: a reset received by a, sent by b without a socket.
    let received: Vec<_> = tcp
        .iter()
        .filter(|(h, e)| {
            *h == "sender"
                && e.anomaly() == Some(TcpAnomaly::ResetReceived)
                && e.dport == TCP_CLOSED_B
        })
        .collect();
    assert_eq!(received.len(), 1, "{tcp:#?}");
    assert!(received[0].1.cookie != 0);
    let sent: Vec<_> = tcp
        .iter()
        .filter(|(h, e)| {
            *h == "receiver"
                && e.anomaly() == Some(TcpAnomaly::ResetSent)
                && e.sport == TCP_CLOSED_B
        })
        .collect();
    assert_eq!(sent.len(), 1, "{tcp:#?}");
    let s = sent[0].1;
    assert_eq!(
        (s.cookie, s.family),
        (0, 4),
        "socketless reset: {}",
        s.summary()
    );
    assert_eq!(&s.saddr[..4], &pair.addr_b.octets());
    assert_eq!(&s.daddr[..4], &pair.addr_a.octets());
    assert_eq!(s.dport, received[0].1.sport, "the same connection");

    // Through the dissector: a retransmission is a note, a reset a warning.
    let file = trace.files.first().expect("a pcapng");
    let expert = |filter: &str| {
        tshark
            .fields(
                file,
                &["_ws.expert.severity", "_ws.expert.message"],
                &Query::default().filter(filter),
            )
            .expect("tshark")
    };
    let rows = expert(&format!(
        "nettrace.tcp.anomaly == 0 && nettrace.tcp.sport == {}",
        local.port()
    ));
    assert_eq!(rows.len(), rtx.len());
    for r in &rows {
        let i = r
            .all("_ws.expert.message")
            .iter()
            .position(|m| m.starts_with("Retransmission of seq "))
            .unwrap_or_else(|| panic!("{r:?}"));
        assert_eq!(r.all("_ws.expert.severity")[i], PI_NOTE, "{r:?}");
    }
    let rows = expert(&format!(
        "nettrace.tcp.anomaly == 1 && nettrace.tcp.sport == {TCP_CLOSED_B} && nettrace.tcp.cookie == 0"
    ));
    assert_eq!(rows.len(), 1);
    let rows = expert(&format!(
        "nettrace.tcp.anomaly == 2 && nettrace.tcp.dport == {TCP_CLOSED_B}"
    ));
    assert_eq!(rows.len(), 1);
    let i = rows[0]
        .all("_ws.expert.message")
        .iter()
        .position(|m| m == "Connection reset: RESET_RECEIVED")
        .unwrap_or_else(|| panic!("{:?}", rows[0]));
    assert_eq!(rows[0].all("_ws.expert.severity")[i], PI_WARN);
    assert_eq!(
        expert("nettrace.drop.reason == \"NETFILTER_DROP\"").len(),
        nf_drops
    );
}

/// UDP port of the socket whose memory cgroup caps its receive memory.
const MEMCG_PORT: u16 = 47200;
/// Datagrams sent to each namespace's capped sockets.
const FLOOD: usize = 10;
/// Payload of each of them.
const FLOOD_LEN: usize = 1000;
/// SK_MEM_RECV, the kind sock:sock_exceed_buf_limit reports for a receive.
const SK_MEM_RECV: u32 = 1;

/// A cgroup v1 memory controller child whose TCP/socket memory limit
/// (`memory.kmem.tcp.limit_in_bytes`, which caps every socket that charges
/// protocol memory, UDP included) is one page. A socket created by a
/// thread inside it charges its receive memory there, so once one page is
/// queued the next charge fails in `__sk_mem_raise_allocated`, the path
/// of sock:sock_exceed_buf_limit. (The other way to get there, the global
/// `net.ipv4.udp_mem` / `tcp_mem` limits, would starve every socket of the
/// machine.) Removed on drop; a leftover of a killed run is removed first.
struct CappedMemcg {
    path: std::path::PathBuf,
}

impl CappedMemcg {
    /// Under this process's own memory cgroup; None when the machine has no
    /// cgroup v1 memory controller with socket accounting.
    fn create(name: &str) -> Option<Self> {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let rel = own.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
            ctrl.split(',')
                .any(|c| c == "memory")
                .then(|| path.to_owned())
        })?;
        let parent =
            std::path::Path::new("/sys/fs/cgroup/memory").join(rel.trim_start_matches('/'));
        if !parent.join("memory.kmem.tcp.limit_in_bytes").exists() {
            return None;
        }
        let path = parent.join(name);
        let _ = std::fs::remove_dir(&path);
        std::fs::create_dir(&path).expect("creating the memory cgroup");
        let cg = CappedMemcg { path };
        std::fs::write(cg.path.join("memory.kmem.tcp.limit_in_bytes"), "4096")
            .expect("capping socket memory");
        Some(cg)
    }

    /// Its `tasks` file: writing a thread id there moves that thread only
    /// (cgroup v1 places threads one by one).
    fn tasks(&self) -> std::path::PathBuf {
        self.path.join("tasks")
    }

    /// Socket memory charged to it now, in bytes.
    fn usage(&self) -> u64 {
        std::fs::read_to_string(self.path.join("memory.kmem.tcp.usage_in_bytes"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for CappedMemcg {
    fn drop(&mut self) {
        // Empty once the thread that entered it has exited; the socket's
        // reference keeps it only as an offline cgroup.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.path).is_ok() || !self.path.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// In namespace `ns`: an ICMP echo ("ping") socket with the smallest
/// receive buffer, and a UDP socket on `addr:MEMCG_PORT` created inside
/// `memcg`; both are returned to be kept open and never read. The ping
/// socket is the one of this kernel's sockets that queues through
/// sock_queue_rcv_skb() and so reports a full queue as
/// sock:sock_rcvqueue_full (raw sockets check their queue before cloning
/// and drop silently; TCP and UDP have queue limits of their own): its
/// second echo reply no longer fits.
fn capped_sockets(ns: &str, addr: Ipv4Addr, memcg: &CappedMemcg) -> (UdpSocket, UdpSocket) {
    use std::os::fd::{FromRawFd, OwnedFd};
    let ping = in_netns(NetnsPair::path(ns), "e2e-ping", || {
        // Ping sockets are for the groups in this range (default: none).
        std::fs::write("/proc/sys/net/ipv4/ping_group_range", "0 0").expect("ping_group_range");
        // SAFETY: plain socket(2); the fd is owned right below.
        let fd = unsafe {
            libc::socket(
                libc::AF_INET,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                libc::IPPROTO_ICMP,
            )
        };
        assert!(fd >= 0, "ping socket: {}", std::io::Error::last_os_error());
        // SAFETY: fd is a fresh descriptor nobody else owns.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        let one: libc::c_int = 1;
        // SAFETY: setsockopt with a c_int option and its size; the kernel
        // raises the value to its minimum receive buffer.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "SO_RCVBUF: {}", std::io::Error::last_os_error());
        // An AF_INET datagram socket: std's UDP calls work on it.
        UdpSocket::from(owned)
    })
    .expect("thread in netns")
    .join()
    .expect("ping socket");
    let tasks = memcg.tasks();
    let udp = in_netns(NetnsPair::path(ns), "e2e-memcg", move || {
        // This thread only: it exits right after, and the socket stays
        // charged to the cgroup it was created in.
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        std::fs::write(&tasks, tid.to_string()).expect("joining the memory cgroup");
        UdpSocket::bind((addr, MEMCG_PORT)).expect("bind")
    })
    .expect("thread in netns")
    .join()
    .expect("capped UDP socket");
    (ping, udp)
}

/// Datagrams dropped by the ping sockets of namespace `ns` (the last
/// column of its /proc/net/icmp).
fn ping_drops(ns: &str) -> u64 {
    in_netns(NetnsPair::path(ns), "e2e-icmp", || {
        // thread-self: /proc/self/net would show the process's namespace.
        let t = std::fs::read_to_string("/proc/thread-self/net/icmp").expect("/proc/net/icmp");
        t.lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
            .sum()
    })
    .expect("thread in netns")
    .join()
    .expect("icmp table")
}

/// An ICMP echo request with `len` bytes of payload (the kernel fills in
/// the identifier and checksum of a ping socket's requests).
fn echo_request(len: usize) -> Vec<u8> {
    let mut m = vec![8, 0, 0, 0, 0, 0, 0, 1];
    m.resize(8 + len, 0x42);
    m
}

#[test]
fn socket_queue_full_and_buffer_limit_in_the_traced_namespace_only() {
    if !require_root() {
        return;
    }
    let Some(tshark) =
        Tshark::or_skip("socket_queue_full_and_buffer_limit_in_the_traced_namespace_only")
    else {
        return;
    };
    let Some(memcg) = CappedMemcg::create("ntrsqf") else {
        tracer_e2e::skip::skip(
            "no cgroup v1 memory controller with memory.kmem.tcp.limit_in_bytes",
        );
        return;
    };
    let pair = NetnsPair::create("ntrsqf", 243).expect("creating namespaces");
    let out = tempfile::tempdir().unwrap();
    let mut sink = spawn_sink(&pair, out.path(), &[]);
    let mut agent = spawn_agent(&pair, &pair.a, "sender", "tcp");
    // The same sockets in both namespaces; only a's may be reported.
    let held_a = capped_sockets(&pair.a, pair.addr_a, &memcg);
    let held_b = capped_sockets(&pair.b, pair.addr_b, &memcg);
    // Datagrams into each namespace's capped UDP socket, and echo
    // requests from each ping socket, whose replies come back to it.
    let flood = |from: &str, ping: &UdpSocket, to: Ipv4Addr| {
        let ping = ping.try_clone().expect("dup");
        in_netns(NetnsPair::path(from), "e2e-flood", move || {
            let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).expect("bind");
            for _ in 0..FLOOD {
                s.send_to(&[0x42; FLOOD_LEN], (to, MEMCG_PORT))
                    .expect("send");
                ping.send_to(&echo_request(FLOOD_LEN), (to, 0))
                    .expect("ping");
                std::thread::sleep(Duration::from_millis(2));
            }
        })
        .expect("thread in netns")
        .join()
        .expect("flood");
    };
    flood(&pair.b, &held_b.0, pair.addr_a);
    flood(&pair.a, &held_a.0, pair.addr_b);
    let ident = held_a.0.local_addr().expect("ping socket address").port();
    std::thread::sleep(Duration::from_millis(300));
    let charged = memcg.usage();
    // b's sockets overflowed as a's did: what the agent must not report.
    let dropped_b = ping_drops(&pair.b);
    assert!(dropped_b > 0, "b's ping socket dropped nothing");
    let agent_final = stop_json(&mut agent, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(200));
    stop_json(&mut sink, libc::SIGTERM);
    drop((held_a, held_b));
    assert_eq!(agent_final["stats"]["bpf"]["ringbuf_lost"], 0);
    assert_eq!(agent_final["stats"]["bad_records"], 0);

    let netns_a = netns_inode(&pair.a);
    let trace = read_dir(out.path());
    let mut full = Vec::new();
    let mut limit = Vec::new();
    for f in &trace.frames {
        let Event::Tcp(e) = &f.event else { continue };
        assert_eq!(
            e.netns,
            netns_a,
            "another namespace's anomaly: {}",
            e.summary()
        );
        match e.anomaly() {
            Some(TcpAnomaly::RcvqueueFull) => full.push(*e),
            Some(TcpAnomaly::ExceedBufLimit) => limit.push(*e),
            _ => {}
        }
    }
    // a's ping socket: its local "port" is its echo identifier, and what
    // did not fit is an echo reply (ICMP header and payload).
    assert!(
        !full.is_empty(),
        "no RCVQUEUE_FULL: {:?}",
        trace
            .frames
            .iter()
            .map(|f| format!("{:?}", f.event))
            .collect::<Vec<_>>()
    );
    assert!(full.len() < FLOOD, "the first reply fits: {}", full.len());
    for e in &full {
        assert_eq!(
            (e.family, e.sport, e.dport),
            (4, ident, 0),
            "{}",
            e.summary()
        );
        assert_eq!(e.detail as usize, 8 + FLOOD_LEN, "{}", e.summary());
        assert_eq!(&e.saddr[..4], &[0; 4], "an unbound ping socket");
        assert_ne!(e.cookie, 0);
    }
    // The capped UDP socket: a receive charge (SK_MEM_RECV) refused.
    assert!(
        !limit.is_empty(),
        "no EXCEED_BUF_LIMIT ({charged} bytes charged to the capped cgroup)"
    );
    for e in &limit {
        assert_eq!((e.family, e.sport), (4, MEMCG_PORT), "{}", e.summary());
        assert_eq!(&e.saddr[..4], &pair.addr_a.octets());
        assert_eq!(e.detail, SK_MEM_RECV, "{}", e.summary());
    }

    // The dissector names both and files them as warnings.
    let file = trace.files.first().expect("a pcapng");
    for (anomaly, name, n) in [
        (3, "RCVQUEUE_FULL", full.len()),
        (4, "EXCEED_BUF_LIMIT", limit.len()),
    ] {
        let rows = tshark
            .fields(
                file,
                &[
                    "nettrace.tcp.anomaly",
                    "_ws.expert.severity",
                    "_ws.expert.message",
                ],
                &Query::default().filter(&format!("nettrace.tcp.anomaly == {anomaly}")),
            )
            .expect("tshark");
        assert_eq!(rows.len(), n, "{name}");
        for r in &rows {
            let i = r
                .all("_ws.expert.message")
                .iter()
                .position(|m| m == name)
                .unwrap_or_else(|| panic!("{r:?}"));
            assert_eq!(r.all("_ws.expert.severity")[i], PI_WARN, "{r:?}");
        }
    }
}
