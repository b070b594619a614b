//! End to end with the real kernel: the drops probe in namespace a records
//! the skbs a's kernel drops, with reason names from the running kernel's
//! BTF and symbolized locations: UDP and TCP into closed ports give
//! NO_SOCKET, an nftables drop rule gives NETFILTER_DROP, and a drop in
//! namespace b is not recorded; and the tcp probe records the
//! retransmissions random loss causes and the resets of a refused connect.
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
        // The frame's experts: the pcapng comment (PI_COMMENT) and the drop,
        // a warning with its reason.
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
