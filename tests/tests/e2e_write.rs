//! End to end with the real kernel: one host, one program. `tracer-agent
//! --write DIR` traces a TCP flow between two namespaces with no sink
//! anywhere: its files must hold the flow's events, rotate as asked, count
//! every event the agent read as written, show none of the agent's own
//! loopback traffic to its writer, and decode cleanly in tshark. Without a
//! loopback interface, with `--clock sink` or with neither an output nor a
//! sink, the agent refuses with a message that says what to do.

use std::net::IpAddr;
use std::process::Command;
use std::time::Duration;

use tracer_codec::{Event, TxStage};
use tracer_e2e::bins::bin;
use tracer_e2e::netns::NetnsPair;
use tracer_e2e::pcap::read_dir;
use tracer_e2e::procs::{run, Proc};
use tracer_e2e::scenario::{stop_json, tcp_flow};
use tracer_e2e::skip::require_root;
use tracer_e2e::tshark::{Query, Tshark};

const CHUNKS: usize = 2000;
const CHUNK: usize = 1000;
const PORT: u16 = 5431;

#[test]
fn write_traces_one_host_into_rotated_files() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrwr", 231).expect("creating namespaces");
    let out = tempfile::tempdir().unwrap();
    let mut cmd = NetnsPair::exec(&pair.a, &bin("tracer-agent"));
    cmd.arg("--write")
        .arg(out.path())
        .args(["--probes", "tx,rx", "--hostname", "solo", "--json"])
        .args(["--rotate-size", "64K", "--file-prefix", "solo"]);
    let mut agent = Proc::spawn("tracer-agent --write", cmd);
    agent.wait_stderr("rx probe attached", Duration::from_secs(30));
    let (local, peer) = tcp_flow(&pair, PORT, CHUNKS, CHUNK);
    std::thread::sleep(Duration::from_millis(300));
    let fin = stop_json(&mut agent, libc::SIGINT);
    assert_eq!(fin["final"], true);
    let (stats, writer) = (&fin["stats"], &fin["writer"]);
    assert_eq!(stats["bpf"]["ringbuf_lost"], 0, "{fin}");
    assert_eq!(stats["ring_overruns"], 0, "{fin}");
    let sum = |v: &serde_json::Value| -> u64 {
        v.as_array()
            .map(|a| a.iter().filter_map(|x| x.as_u64()).sum())
            .unwrap_or(0)
    };
    let read = sum(&stats["events_by_stage"])
        + sum(&stats["rx_events_by_stage"])
        + stats["clock_events"].as_u64().unwrap_or(0);
    assert_eq!(
        writer["events_written"].as_u64(),
        Some(read),
        "every event the agent read is in the files: {fin}"
    );
    assert_eq!(writer["sink_write_lost"], 0, "{fin}");
    assert_eq!(writer["datagrams_rejected"], 0, "{fin}");

    let trace = read_dir(out.path());
    assert!(
        trace.files.len() >= 2,
        "--rotate-size 64K rotated: {:?}",
        trace.files
    );
    // Named as the sink names them, compressed as it compresses by default.
    assert!(
        trace.files.iter().all(|f| f
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("solo-") && n.ends_with(".pcapng.zst"))),
        "{:?}",
        trace.files
    );
    assert_eq!(trace.frames.len() as u64, read);
    let mut sendmsg = 0;
    for f in &trace.frames {
        assert_eq!(f.host, "solo");
        let flow = match &f.event {
            Event::Tx(e) => {
                if e.stage == TxStage::Sendmsg as u8 && e.flow().sport == local.port() {
                    sendmsg += 1;
                }
                e.flow()
            }
            Event::Rx(e) => e.flow(),
            Event::Clock(_) => continue,
            other => panic!("unexpected event {other:?}"),
        };
        // The agent's datagrams to its own writer cross loopback: they are
        // nettrace's own traffic and must not be traced.
        assert!(
            !flow.saddr.is_loopback() && !flow.daddr.is_loopback(),
            "the agent traced its own loopback datagrams: {:?}",
            f.event
        );
        // IPv4 is the flow's (IPv6 carries the namespace's own neighbour
        // discovery, which the rx probe sees at STACK_ENTRY too).
        if flow.saddr.is_ipv4() && !flow.saddr.is_unspecified() {
            let ends = [flow.saddr, flow.daddr];
            assert!(
                ends.contains(&IpAddr::from(pair.addr_a)),
                "an event of another flow: {:?}",
                f.event
            );
        }
    }
    assert!(
        sendmsg >= CHUNKS,
        "{sendmsg} SENDMSG events of the flow {local} -> {peer} for {CHUNKS} writes"
    );
    if let Some(ts) = Tshark::or_skip("write_traces_one_host_into_rotated_files") {
        for f in &trace.files {
            ts.check_clean(f, &Query::default())
                .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        }
    }
}

/// The agent's exit status and stderr for `args`, run in a new network
/// namespace (its loopback down) when `unshare_net`.
fn agent_fails(args: &[&str], unshare_net: bool) -> (i32, String) {
    let mut cmd = if unshare_net {
        let mut c = Command::new("unshare");
        c.arg("--net").arg(bin("tracer-agent"));
        c
    } else {
        Command::new(bin("tracer-agent"))
    };
    cmd.args(args);
    let (st, _, err) = run(cmd);
    assert!(!st.success(), "{args:?} succeeded: {err}");
    (st.code().unwrap_or(-1), err)
}

#[test]
fn write_refuses_what_cannot_work_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let out = out.to_str().unwrap();
    let (code, err) = agent_fails(&[], false);
    assert_eq!(code, 2, "a usage error: {err}");
    assert!(err.contains("--sink") && err.contains("--write"), "{err}");
    let (_, err) = agent_fails(&["--write", out, "--clock", "sink"], false);
    assert!(err.contains("--write or --live-iface has none"), "{err}");
    assert!(
        !std::path::Path::new(out).exists(),
        "a refused command line left files behind"
    );
    let (_, err) = agent_fails(&["--sink", "127.0.0.1:9", "--rotate-size", "1M"], false);
    assert!(
        err.contains("--rotate-size applies to the files of --write"),
        "{err}"
    );
    if require_root() {
        // A namespace fresh from unshare has its loopback down.
        let (_, err) = agent_fails(&["--write", out], true);
        assert!(err.contains("ip link set lo up"), "{err}");
    }
}
