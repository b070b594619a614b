//! Replay into a restarted sink, as an attacker on the lab network does
//! it: a keyed agent in namespace a traces a TCP flow to a keyed sink in
//! namespace b while dumpcap records its datagrams on the sink's veth;
//! the sink is stopped and a new one started on the same output
//! directory; the agent goes on tracing, and the recorded datagrams are
//! sent again to the new sink from the agent's own address and port
//! (spoofed, from a raw socket). The new file must hold none of them, the
//! sink must count each one, the agent's own datagrams must all be taken,
//! and the agent must never be told more was delivered than it sent.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::Duration;

use tracer_e2e::netns::{in_netns, NetnsPair};
use tracer_e2e::pcap::read_dir;
use tracer_e2e::procs::Proc;
use tracer_e2e::scenario::{spawn_agent, spawn_sink, stop_json, tcp_flow, SINK_PORT};
use tracer_e2e::skip::require_root;
use tracer_e2e::spoof::Spoofer;

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The UDP payloads to the sink's port in a capture, with their source.
fn recorded(file: &Path) -> Vec<(SocketAddrV4, Vec<u8>)> {
    let tshark = tracer_e2e::tshark::Tshark::find().expect("tshark (scripts/setup.sh installs it)");
    let out = std::process::Command::new(tshark.exe())
        .args(["-n", "-r"])
        .arg(file)
        .args(["-Y", &format!("udp.dstport == {SINK_PORT}")])
        .args(["-T", "fields", "-E", "separator=,"])
        .args(["-e", "ip.src", "-e", "udp.srcport", "-e", "udp.payload"])
        .output()
        .expect("running tshark");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let ip: Ipv4Addr = f[0].parse().expect("ip.src");
            let port: u16 = f[1].parse().expect("udp.srcport");
            let hex = f[2].replace(':', "");
            let bytes: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex payload"))
                .collect();
            (SocketAddrV4::new(ip, port), bytes)
        })
        .flat_map(|(from, payload)| {
            gso_datagrams(&payload)
                .into_iter()
                .map(|d| (from, d.to_vec()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The datagrams of one captured UDP payload: the agent sends UDP GSO
/// batches, which a capture on the veth sees whole, before they are cut
/// into the datagrams a network would carry.
fn gso_datagrams(mut payload: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while !payload.is_empty() {
        let len = tracer_codec::datagram_extent(payload).expect("a datagram the agent framed");
        out.push(&payload[..len]);
        payload = &payload[len..];
    }
    out
}

#[test]
fn recorded_datagrams_replayed_into_a_restarted_sink_are_refused() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrrpl", 239).expect("creating namespaces");
    let dir = tempfile::tempdir().unwrap();
    let key = tracer_e2e::scenario::key_file(dir.path());
    let key_arg = key.as_str();
    let out = dir.path().join("trace");
    let cap = dir.path().join("recorded.pcapng");
    let sink_args = ["--key-file", key_arg, "--stats-interval", "0"];

    let mut sink_a = spawn_sink(&pair, &out, &sink_args);
    let mut agent = spawn_agent(&pair, &["--key-file", key_arg, "--flush-ms", "20"]);
    let mut dumpcap = {
        let mut cmd = NetnsPair::exec(&pair.b, Path::new("dumpcap"));
        cmd.args([
            "-i",
            "ntrrplvb",
            "-f",
            &format!("udp dst port {SINK_PORT}"),
            "-w",
        ])
        .arg(&cap);
        let mut p = Proc::spawn("dumpcap", cmd);
        p.wait_stderr("Capturing on", Duration::from_secs(20));
        p
    };
    tcp_flow(&pair, 5311, 200, 2000);
    std::thread::sleep(Duration::from_millis(300));
    let (st, _) = dumpcap.stop(libc::SIGINT, Duration::from_secs(20));
    assert!(st.success() || st.code().is_none(), "dumpcap: {st:?}");
    let a_final = stop_json(&mut sink_a, libc::SIGTERM);
    let replays = recorded(&cap);
    assert!(
        replays.len() >= 20,
        "recorded only {} datagrams",
        replays.len()
    );
    let agent_src = replays[0].0;

    // A new sink process on the same output directory.
    std::thread::sleep(Duration::from_millis(200));
    let mut sink_b = spawn_sink(&pair, &out, &sink_args);
    let sent_back = {
        let to = SocketAddrV4::new(pair.addr_b, SINK_PORT);
        let replays = replays.clone();
        in_netns(NetnsPair::path(&pair.a), "replayer", move || {
            let mut s = Spoofer::new(agent_src, to).expect("raw socket");
            replays.iter().filter(|(_, d)| s.send(d)).count() as u64
        })
        .unwrap()
        .join()
        .unwrap()
    };
    // The live agent goes on tracing into the new sink.
    tcp_flow(&pair, 5312, 200, 2000);
    std::thread::sleep(Duration::from_millis(500));
    let agent_final = stop_json(&mut agent, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(200));
    let b_final = stop_json(&mut sink_b, libc::SIGTERM);

    let r = &b_final["rejects"];
    let refused = u(&r["stale"]) + u(&r["unconfirmed"]) + u(&r["replay"]);
    println!(
        "recorded {} datagrams, replayed {sent_back}; restarted sink refused {refused} (stale {}, unconfirmed {}, replay {}), accepted {}",
        replays.len(),
        r["stale"],
        r["unconfirmed"],
        r["replay"],
        b_final["datagrams_accepted"]
    );
    assert_eq!(sent_back, replays.len() as u64);
    assert_eq!(refused, sent_back, "every replayed datagram refused: {r}");
    assert_eq!(u(&b_final["datagrams_held"]), 0);

    // No event is in the files twice: the new file holds only new ones.
    let trace = read_dir(&out);
    assert_eq!(trace.files.len(), 2, "one file per sink process");
    let mut seen = BTreeSet::new();
    for f in &trace.frames {
        assert!(
            seen.insert((f.agent_id, f.event_seq)),
            "event {} of agent {:x} written twice",
            f.event_seq,
            f.agent_id
        );
    }
    // The agent's accounting stays true: it was never told more reached a
    // file than it numbered, and everything it sent is in a file.
    let a = &agent_final["stats"];
    let sequenced = u(&a["events_sequenced"]);
    let delivered = u(&a["events_delivered"]);
    println!(
        "agent: sequenced {sequenced}, delivered {delivered}, sink lost {}, unconfirmed {}; files hold {} events (first sink {})",
        a["events_sink_lost"],
        a["events_unconfirmed"],
        seen.len(),
        a_final["events_written"]
    );
    assert!(
        delivered <= sequenced,
        "delivered {delivered} > sequenced {sequenced}"
    );
    assert_eq!(u(&b_final["rejects"]["auth_bad"]), 0);
    assert_eq!(
        seen.len() as u64 + u(&a["events_sink_lost"]) + u(&a["events_unconfirmed"]),
        sequenced,
        "every event the agent numbered is in a file, counted lost, or unconfirmed"
    );
}
