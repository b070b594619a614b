//! End to end with the real kernel: `--filter` keeps only matching flows.
//! Two TCP echo flows between two namespaces (data both ways, so the
//! traced host both sends (TX stages) and receives (every RX stage)):
//! with `--filter 'port P1 or port P3'` only the P1 flow and the reset of
//! a refused connect to P3 reach the trace, nothing of P2 or P4; with
//! `--filter 'host A1'` on the receiving host only the flow, the drop and
//! the socketless reset of source address A1 do, nothing of a second
//! source address A3 of the same namespace. IPv6 flows over loopback are
//! kept or refused the same way (port; `host ::1`).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

use tracer_codec::{Event, RxStage, TcpAnomaly, TxStage};
use tracer_e2e::bins::bin;
use tracer_e2e::netns::{in_netns, NetnsPair};
use tracer_e2e::pcap::{read_dir, Trace};
use tracer_e2e::procs::Proc;
use tracer_e2e::scenario::{spawn_sink, stop_json, SINK_PORT};
use tracer_e2e::skip::require_root;

/// The flow the port filter keeps.
const P1: u16 = 5411;
/// The flow it drops.
const P2: u16 = 5412;
/// Closed port whose refused connect it keeps (`or`).
const P3: u16 = 5413;
/// Closed port whose refused connect it drops.
const P4: u16 = 5414;
/// Echo flow size: chunks of CHUNK bytes each way.
const CHUNKS: usize = 40;
const CHUNK: usize = 2000;

/// An agent in `ns` with `args`, sending to the sink in b; returns once
/// its last probe (tcp) is attached.
fn spawn_agent(pair: &NetnsPair, ns: &str, host: &str, args: &[&str]) -> Proc {
    let mut cmd = NetnsPair::exec(ns, &bin("tracer-agent"));
    cmd.args(["--sink", &format!("{}:{SINK_PORT}", pair.addr_b)])
        .args(["--probes", "tx,rx,drops,tcp", "--hostname", host, "--json"])
        .args(args);
    let mut p = Proc::spawn(host, cmd);
    p.wait_stderr("tcp probe attached", Duration::from_secs(30));
    p
}

/// A TCP echo server in namespace b on `port`: echoes every connection
/// until its peer closes. Returns its thread.
fn echo_server(pair: &NetnsPair, port: u16, conns: usize) -> std::thread::JoinHandle<usize> {
    let addr = SocketAddr::from((pair.addr_b, port));
    let l = in_netns(NetnsPair::path(&pair.b), "echo-bind", move || {
        TcpListener::bind(addr).unwrap()
    })
    .unwrap()
    .join()
    .unwrap();
    std::thread::spawn(move || {
        let mut total = 0;
        for _ in 0..conns {
            let (mut s, _) = l.accept().unwrap();
            s.set_nodelay(true).unwrap();
            let mut buf = vec![0u8; 1 << 16];
            loop {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        s.write_all(&buf[..n]).unwrap();
                        total += n;
                    }
                }
            }
        }
        total
    })
}

/// A connected TCP socket from namespace `ns`, bound to `local` first
/// (port chosen by the kernel), to `to`.
fn connect_from(local: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    // std has no bind-before-connect: a raw socket, then into TcpStream.
    // SAFETY: plain socket syscalls on a descriptor owned here; on success
    // it is handed to TcpStream, which closes it.
    unsafe {
        use std::os::fd::FromRawFd;
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let s = TcpStream::from_raw_fd(fd);
        let sin = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(ip).to_be(),
            },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let a = sin(local, 0);
        if libc::bind(fd, (&raw const a).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let IpAddr::V4(ip) = to.ip() else {
            unreachable!("IPv4 test addresses")
        };
        let b = sin(ip, to.port());
        if libc::connect(fd, (&raw const b).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(s)
    }
}

/// Echo CHUNKS chunks from `local` (in a) to b:`port`; returns the
/// client's local port.
fn echo_flow(pair: &NetnsPair, local: Ipv4Addr, port: u16) -> u16 {
    let to = SocketAddr::from((pair.addr_b, port));
    in_netns(NetnsPair::path(&pair.a), "echo-client", move || {
        let mut c = connect_from(local, to).unwrap();
        c.set_nodelay(true).unwrap();
        let data = vec![0x5au8; CHUNK];
        let mut back = vec![0u8; CHUNK];
        for _ in 0..CHUNKS {
            c.write_all(&data).unwrap();
            c.read_exact(&mut back).unwrap();
        }
        let p = c.local_addr().unwrap().port();
        // Let the last ACKs arrive before closing.
        std::thread::sleep(Duration::from_millis(50));
        p
    })
    .unwrap()
    .join()
    .unwrap()
}

/// A refused connect from `local` (in a) to the closed b:`port`.
fn refused(pair: &NetnsPair, local: Ipv4Addr, port: u16) {
    let to = SocketAddr::from((pair.addr_b, port));
    in_netns(NetnsPair::path(&pair.a), "refused", move || {
        let e = connect_from(local, to).expect_err("closed port");
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
    })
    .unwrap()
    .join()
    .unwrap();
}

/// An echo flow over IPv6 inside namespace `ns`, to and from `addr`.
fn v6_echo(ns: &str, addr: Ipv6Addr, port: u16) {
    in_netns(NetnsPair::path(ns), "v6-echo", move || {
        let l = TcpListener::bind((addr, port)).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = vec![0u8; CHUNK];
            for _ in 0..CHUNKS {
                s.read_exact(&mut buf).unwrap();
                s.write_all(&buf).unwrap();
            }
        });
        let mut c = TcpStream::connect((addr, port)).unwrap();
        c.set_nodelay(true).unwrap();
        let mut back = vec![0u8; CHUNK];
        for _ in 0..CHUNKS {
            c.write_all(&back.clone()).unwrap();
            c.read_exact(&mut back).unwrap();
        }
        server.join().unwrap();
        std::thread::sleep(Duration::from_millis(50));
    })
    .unwrap()
    .join()
    .unwrap();
}

/// The ends of an event with a flow: (saddr, sport, daddr, dport).
type Ends = (IpAddr, u16, IpAddr, u16);

fn ends(ev: &Event) -> Option<Ends> {
    macro_rules! ends_of {
        ($e:expr) => {{
            let addr = |a: &[u8; 16]| -> IpAddr {
                if $e.family == 6 {
                    IpAddr::from(*a)
                } else {
                    IpAddr::from([a[0], a[1], a[2], a[3]])
                }
            };
            Some((addr(&$e.saddr), $e.sport, addr(&$e.daddr), $e.dport))
        }};
    }
    match ev {
        Event::Tx(e) => ends_of!(e),
        Event::Rx(e) => ends_of!(e),
        Event::Drop(e) => ends_of!(e),
        Event::Tcp(e) => ends_of!(e),
        _ => None,
    }
}

/// Run `traffic` with a sink in b and an agent in `ns` (`--filter
/// filter`); returns the trace and the agent's final stats.
fn filtered_run(
    pair: &NetnsPair,
    ns: &str,
    filter: &str,
    traffic: impl FnOnce(),
) -> (Trace, serde_json::Value) {
    let out = tempfile::tempdir().unwrap();
    let mut sink = spawn_sink(pair, out.path(), &[]);
    let mut agent = spawn_agent(pair, ns, "traced", &["--filter", filter]);
    traffic();
    std::thread::sleep(Duration::from_millis(300));
    let agent_final = stop_json(&mut agent, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(200));
    stop_json(&mut sink, libc::SIGTERM);
    assert_eq!(agent_final["stats"]["bpf"]["ringbuf_lost"], 0);
    assert_eq!(agent_final["stats"]["bad_records"], 0);
    (read_dir(out.path()), agent_final)
}

fn has_port(e: &Ends, p: u16) -> bool {
    e.1 == p || e.3 == p
}

#[test]
fn port_filter_keeps_only_the_matching_flows() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrflt", 251).expect("creating namespaces");
    let s1 = echo_server(&pair, P1, 1);
    let s2 = echo_server(&pair, P2, 2);
    let a = pair.addr_a;
    let (trace, _) = filtered_run(&pair, &pair.a, &format!("port {P1} or port {P3}"), || {
        echo_flow(&pair, a, P2);
        echo_flow(&pair, a, P1);
        echo_flow(&pair, a, P2);
        refused(&pair, a, P4);
        refused(&pair, a, P3);
        v6_echo(&pair.a, Ipv6Addr::LOCALHOST, P2);
        v6_echo(&pair.a, Ipv6Addr::LOCALHOST, P1);
    });
    assert_eq!(s1.join().unwrap(), CHUNKS * CHUNK);
    assert_eq!(s2.join().unwrap(), 2 * CHUNKS * CHUNK);

    let mut tx = Vec::new();
    let mut rx = Vec::new();
    let mut resets = Vec::new();
    let mut v6 = 0;
    for f in &trace.frames {
        let Some(e) = ends(&f.event) else { continue };
        assert!(
            has_port(&e, P1) || has_port(&e, P3),
            "an event outside the filter: {:?}",
            f.event
        );
        if e.0.is_ipv6() {
            v6 += 1;
            continue;
        }
        match &f.event {
            Event::Tx(t) => tx.push(t.stage().unwrap()),
            Event::Rx(r) => rx.push(r.stage().unwrap()),
            Event::Tcp(t) => resets.push((t.anomaly(), e)),
            _ => {}
        }
    }
    // The P1 flow is all there: every TX stage of its tagged sends and
    // every RX stage of the echoes it read.
    for st in [
        TxStage::Sendmsg,
        TxStage::Sched,
        TxStage::SndSw,
        TxStage::Ack,
    ] {
        let n = tx.iter().filter(|s| **s == st).count();
        assert!(n >= CHUNKS / 2, "{n} {} events of the P1 flow", st.name());
    }
    for st in RxStage::ALL {
        let n = rx.iter().filter(|s| **s == st).count();
        assert!(n >= CHUNKS / 2, "{n} {} events of the P1 flow", st.name());
    }
    // IPv6 (the loopback flow on P1 in a; the one on P2 is checked above).
    assert!(v6 >= CHUNKS * 4, "{v6} IPv6 events on P1");
    // `or`: the refused connect to P3 is kept (the tcp probe, local end
    // first), the one to P4 is not (checked above).
    assert_eq!(
        resets
            .iter()
            .filter(|(a, e)| *a == Some(TcpAnomaly::ResetReceived) && e.3 == P3)
            .count(),
        1,
        "{resets:?}"
    );
}

#[test]
fn host_filter_keeps_only_the_matching_address() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrflh", 252).expect("creating namespaces");
    // A second address of a, on the same veth.
    let a3 = Ipv4Addr::new(10, 252, 0, 3);
    let st = Command::new("ip")
        .args([
            "-n",
            &pair.a,
            "addr",
            "add",
            "10.252.0.3/24",
            "dev",
            "ntrflhva",
        ])
        .status()
        .unwrap();
    assert!(st.success());
    let a1 = pair.addr_a;
    // A second IPv6 address of b, for an IPv6 flow the filter refuses.
    let other6: Ipv6Addr = "fd00:252::5".parse().unwrap();
    let st = Command::new("ip")
        .args([
            "-n",
            &pair.b,
            "addr",
            "add",
            "fd00:252::5/128",
            "dev",
            "lo",
            "nodad",
        ])
        .status()
        .unwrap();
    assert!(st.success());
    let server = echo_server(&pair, P1, 2);
    let filter = format!("host {a1} or host ::1");
    let (trace, _) = filtered_run(&pair, &pair.b, &filter, || {
        echo_flow(&pair, a3, P1);
        echo_flow(&pair, a1, P1);
        refused(&pair, a3, P4);
        refused(&pair, a1, P4);
        v6_echo(&pair.b, other6, P2);
        v6_echo(&pair.b, Ipv6Addr::LOCALHOST, P2);
    });
    assert_eq!(server.join().unwrap(), 2 * CHUNKS * CHUNK);

    let (mut tx, mut rx, mut drops, mut reset_sent, mut v6) = (0, 0, 0, 0, 0);
    let lo6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
    for f in &trace.frames {
        let Some(e) = ends(&f.event) else { continue };
        if e.0.is_ipv6() {
            // Either end (a listener's DATA_READY has no remote end).
            assert!(e.0 == lo6 || e.2 == lo6, "{:?}", f.event);
            assert!(e.0 != IpAddr::V6(other6) && e.2 != IpAddr::V6(other6));
            v6 += 1;
            continue;
        }
        assert!(
            e.0 == IpAddr::V4(a1) || e.2 == IpAddr::V4(a1),
            "an event outside the filter: {:?}",
            f.event
        );
        assert!(e.0 != IpAddr::V4(a3) && e.2 != IpAddr::V4(a3));
        match &f.event {
            Event::Tx(_) => tx += 1,
            Event::Rx(_) => rx += 1,
            Event::Drop(d) if d.dport == P4 => drops += 1,
            Event::Tcp(t) if t.anomaly() == Some(TcpAnomaly::ResetSent) && t.sport == P4 => {
                reset_sent += 1
            }
            _ => {}
        }
    }
    assert!(tx >= CHUNKS && rx >= CHUNKS * 3, "tx {tx}, rx {rx}");
    // The SYN to the closed port dropped (NO_SOCKET) and answered by a
    // socketless reset: both kept for a1 only (the reset's flow is turned
    // around, a1 is its destination).
    assert!(drops >= 1, "no drop of a1's SYN");
    assert!(v6 >= CHUNKS * 4, "{v6} events of the ::1 flow");
    assert_eq!(reset_sent, 1);
}

/// Closed port outside the range of the `not` test.
const OUT_OF_RANGE: u16 = 5420;

/// `not`, a protocol word and a port range together: `tcp and portrange
/// P1-1..P4+1 and not port P2` keeps the P1 echo flow and the refused
/// connect to P4; it drops the P2 echo flow (`not`), the refused connect
/// to a port past the range, and a UDP datagram into a's closed port P1
/// (`tcp`; its NO_SOCKET drop would otherwise match the range).
#[test]
fn not_protocol_and_port_range() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrfln", 253).expect("creating namespaces");
    let s1 = echo_server(&pair, P1, 1);
    let s2 = echo_server(&pair, P2, 1);
    let a = pair.addr_a;
    let (lo, hi) = (P1 - 1, P4 + 1);
    let filter = format!("tcp and portrange {lo}-{hi} and not port {P2}");
    let (trace, stats) = filtered_run(&pair, &pair.a, &filter, || {
        echo_flow(&pair, a, P2);
        echo_flow(&pair, a, P1);
        refused(&pair, a, P4);
        refused(&pair, a, OUT_OF_RANGE);
        let to = SocketAddr::from((a, P1));
        in_netns(NetnsPair::path(&pair.b), "udp", move || {
            let s = std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
            for _ in 0..3 {
                s.send_to(b"not tcp", to).unwrap();
                std::thread::sleep(Duration::from_millis(5));
            }
        })
        .unwrap()
        .join()
        .unwrap();
    });
    assert_eq!(s1.join().unwrap(), CHUNKS * CHUNK);
    assert_eq!(s2.join().unwrap(), CHUNKS * CHUNK);

    let (mut tx, mut rx, mut reset_p4) = (Vec::new(), Vec::new(), 0);
    for f in &trace.frames {
        let Some(e) = ends(&f.event) else { continue };
        let in_range = |p: u16| (lo..=hi).contains(&p);
        assert!(
            (in_range(e.1) || in_range(e.3)) && !has_port(&e, P2),
            "an event outside the filter: {:?}",
            f.event
        );
        match &f.event {
            Event::Tx(t) => tx.push(t.stage().unwrap()),
            Event::Rx(r) => {
                assert_eq!(r.protocol, 6, "{r:?}");
                rx.push(r.stage().unwrap())
            }
            Event::Drop(d) => assert_eq!(d.l4proto, 6, "`tcp`: {}", d.summary()),
            Event::Tcp(t) if t.anomaly() == Some(TcpAnomaly::ResetReceived) => {
                assert_eq!(t.dport, P4, "{}", t.summary());
                reset_p4 += 1;
            }
            _ => {}
        }
    }
    for st in [TxStage::Sendmsg, TxStage::Ack] {
        let n = tx.iter().filter(|s| **s == st).count();
        assert!(n >= CHUNKS / 2, "{n} {} events of the P1 flow", st.name());
    }
    for st in RxStage::ALL {
        let n = rx.iter().filter(|s| **s == st).count();
        assert!(n >= CHUNKS / 2, "{n} {} events of the P1 flow", st.name());
    }
    assert_eq!(reset_p4, 1, "the refused connect in the range");
    // The UDP datagrams were dropped in a, seen by BPF and filtered out.
    assert!(
        stats["stats"]["bpf"]["drops_seen"].as_u64() >= Some(3),
        "{stats}"
    );
}
