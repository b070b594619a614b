//! Traced runs between two namespaces: a sink in one, an agent in the
//! other, real TCP traffic, and the resulting files read back.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use crate::bins::bin;
use crate::netns::{in_netns, NetnsPair};
use crate::pcap::read_dir;
use crate::procs::Proc;

/// UDP port of the sink in every scenario.
pub const SINK_PORT: u16 = 7420;

/// This kernel's CLOCK_TAI now.
pub fn tai_now_ns() -> u64 {
    clocksync::bracket::now_ns(clocksync::ClockId::Tai).unwrap()
}

/// Send `chunks` writes of `size` bytes from namespace a to b and return the
/// client's (local, peer) addresses.
pub fn tcp_flow(
    pair: &NetnsPair,
    port: u16,
    chunks: usize,
    size: usize,
) -> (SocketAddr, SocketAddr) {
    let addr = SocketAddr::from((pair.addr_b, port));
    let server = in_netns(NetnsPair::path(&pair.b), "e2e-server", move || {
        TcpListener::bind(addr).unwrap()
    })
    .unwrap()
    .join()
    .unwrap();
    let reader = std::thread::spawn(move || {
        let (mut s, _) = server.accept().unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0;
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
        total
    });
    let client = in_netns(NetnsPair::path(&pair.a), "e2e-sender", move || {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_nodelay(true).unwrap();
        let data = vec![0x5au8; size];
        for _ in 0..chunks {
            c.write_all(&data).unwrap();
            std::thread::sleep(Duration::from_micros(500));
        }
        let ends = (c.local_addr().unwrap(), c.peer_addr().unwrap());
        // Let the last ACKs arrive before closing.
        std::thread::sleep(Duration::from_millis(100));
        ends
    })
    .unwrap()
    .join()
    .unwrap();
    assert_eq!(reader.join().unwrap(), chunks * size);
    client
}

/// A TCP flow in this (root) namespace that the agent must not report.
pub fn noise_flow() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut b = Vec::new();
        s.read_to_end(&mut b).unwrap();
    });
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    for _ in 0..50 {
        c.write_all(&[1u8; 4096]).unwrap();
    }
    drop(c);
    t.join().unwrap();
    port
}

/// A deployment key file in `dir` (owner-only, as every program demands),
/// returned as the `--key-file` argument.
pub fn key_file(dir: &std::path::Path) -> String {
    use std::os::unix::fs::PermissionsExt;
    let key = dir.join("nettrace.key");
    std::fs::write(&key, b"0123456789abcdef0123456789abcdef").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    key.to_str().expect("UTF-8 temp path").to_owned()
}

/// What one traced run left behind.
pub struct Outcome {
    /// The sink's files, read back.
    pub trace: crate::pcap::Trace,
    /// The agent's final `--json` stats line.
    pub agent_final: serde_json::Value,
    /// The sink's final `--json` stats line.
    pub sink_final: serde_json::Value,
    /// Inode of namespace a (the traced one).
    pub netns_a: u32,
}

/// Start tracer-sink in namespace b writing to `out`; returns once it is
/// listening.
pub fn spawn_sink(pair: &NetnsPair, out: &std::path::Path, args: &[&str]) -> Proc {
    let mut cmd = NetnsPair::exec(&pair.b, &bin("tracer-sink"));
    cmd.args(["--listen", &format!("{}:{SINK_PORT}", pair.addr_b)])
        .arg("--output")
        .arg(out)
        .arg("--json")
        .args(args);
    let mut sink = Proc::spawn("tracer-sink", cmd);
    sink.wait_stderr("tracer-sink started", Duration::from_secs(30));
    sink
}

/// Start tracer-agent in namespace a (host "sender"); returns once its
/// probe is attached.
pub fn spawn_agent(pair: &NetnsPair, args: &[&str]) -> Proc {
    let mut cmd = NetnsPair::exec(&pair.a, &bin("tracer-agent"));
    cmd.args(["--sink", &format!("{}:{SINK_PORT}", pair.addr_b)])
        .args(["--probes", "tx", "--hostname", "sender", "--json"])
        .args(args);
    let mut agent = Proc::spawn("tracer-agent", cmd);
    agent.wait_stderr("tx probe attached", Duration::from_secs(30));
    agent
}

/// Stop a process with `sig`, require exit 0, return its last stdout line
/// as JSON.
pub fn stop_json(p: &mut Proc, sig: i32) -> serde_json::Value {
    let (st, stdout) = p.stop(sig, Duration::from_secs(20));
    assert!(st.success(), "exit {st}: {}", p.stderr.join("\n"));
    serde_json::from_str(stdout.lines().last().expect("final stats line")).expect("stats JSON")
}

/// Sink in b, agent (with `agent_args`) in a, then `traffic`, then SIGINT
/// the agent and SIGTERM the sink; both must exit 0.
pub fn traced_run<T>(
    pair: &NetnsPair,
    agent_args: &[&str],
    traffic: impl FnOnce() -> T,
) -> (Outcome, T) {
    traced_run_with(pair, agent_args, &[], None, traffic)
}

/// [`traced_run`] with sink arguments, and optionally a stderr line of the
/// agent to wait for before the traffic starts.
pub fn traced_run_with<T>(
    pair: &NetnsPair,
    agent_args: &[&str],
    sink_args: &[&str],
    wait_for: Option<&str>,
    traffic: impl FnOnce() -> T,
) -> (Outcome, T) {
    let out = tempfile::tempdir().unwrap();
    let mut sink = spawn_sink(pair, out.path(), sink_args);
    let mut agent = spawn_agent(pair, agent_args);
    if let Some(line) = wait_for {
        agent.wait_stderr(line, Duration::from_secs(30));
    }

    let result = traffic();
    std::thread::sleep(Duration::from_millis(300));

    let agent_final = stop_json(&mut agent, libc::SIGINT);
    assert_eq!(agent_final["final"], true);
    // Let the last datagram land before the sink drains and closes.
    std::thread::sleep(Duration::from_millis(200));
    let sink_final = stop_json(&mut sink, libc::SIGTERM);
    let netns_a = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(NetnsPair::path(&pair.a)).unwrap().ino() as u32
    };
    let trace = read_dir(out.path());
    assert!(!trace.files.is_empty(), "no pcapng written");
    (
        Outcome {
            trace,
            agent_final,
            sink_final,
            netns_a,
        },
        result,
    )
}
