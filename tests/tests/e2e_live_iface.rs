//! The sink's live interface (`--live-iface`) end to end, with the real
//! kernel: a traced iperf3 flow between two namespaces, tracer-agent
//! `--probes rx,drops` on the receiving host, which is also where the sink
//! and its live interface are. A real `dumpcap` capture of the interface
//! must hold the same events as the sink's file from the moment it
//! started (same order, count per kind, global times), decode through the
//! dissector without errors, and a capture filter on the event kind must
//! keep exactly that kind. The traced host must show none of the live
//! interface's frames in the trace, although the kernel drops each of
//! them while no capture reads it. And the interface must go with the
//! sink: after a clean exit, after a kill -9 (and a restart at once, which
//! must get the name), and a stale persistent one is taken over.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use tracer_codec::{Event, EventKind, LIVE_ETHERTYPE};
use tracer_e2e::bins::bin;
use tracer_e2e::netns::NetnsPair;
use tracer_e2e::pcap::{read_dir, read_live_capture, LiveFrame};
use tracer_e2e::procs::{run, Proc};
use tracer_e2e::scenario::{spawn_sink, stop_json, SINK_PORT};
use tracer_e2e::skip::{require_root, skip};
use tracer_e2e::tshark::{Query, Tshark};

const IFACE: &str = "nettrace0";
const PORT: u16 = 5331;
/// The libpcap capture filter of one event kind: the capture record
/// starts after the 14-byte Ethernet header; its header_len (u16, little
/// endian, below 256) is at frame byte 16; the record's kind (u16, little
/// endian) starts header_len bytes into the capture record.
const RX_ONLY_FILTER: &str = "ether proto 0x88b5 and ether[14 + ether[16]] == 3";

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `ip -n NS ...`, its stdout.
fn ip(ns: &str, args: &[&str]) -> Option<String> {
    let out = Command::new("ip")
        .args(["-n", ns])
        .args(args)
        .output()
        .expect("running ip");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn iface_exists(ns: &str) -> bool {
    ip(ns, &["link", "show", IFACE]).is_some()
}

/// The interface's index and the frames its host dropped on receive
/// (rx dropped + rx nohandler: no handler for the EtherType).
fn iface_info(ns: &str) -> (u32, u64) {
    let json = ip(ns, &["-j", "-s", "-s", "link", "show", IFACE]).expect("live interface exists");
    let v: serde_json::Value = serde_json::from_str(&json).expect("ip -j");
    let l = &v[0];
    let rx = &l["stats64"]["rx"];
    let dropped = rx["dropped"].as_u64().unwrap_or(0) + rx["nohandler"].as_u64().unwrap_or(0);
    (l["ifindex"].as_u64().expect("ifindex") as u32, dropped)
}

fn wait_gone(ns: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while iface_exists(ns) {
        assert!(Instant::now() < deadline, "{IFACE} still exists {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn spawn_dumpcap(ns: &str, file: &Path, filter: Option<&str>) -> Proc {
    let mut cmd = NetnsPair::exec(ns, Path::new("dumpcap"));
    cmd.args(["-i", IFACE, "-w"]).arg(file);
    if let Some(f) = filter {
        cmd.args(["-f", f]);
    }
    let mut p = Proc::spawn("dumpcap", cmd);
    p.wait_stderr("Capturing on", Duration::from_secs(20));
    p
}

fn stop_dumpcap(p: &mut Proc) {
    let (st, _) = p.stop(libc::SIGINT, Duration::from_secs(10));
    assert!(st.success(), "dumpcap: {st}: {}", p.stderr.join("\n"));
}

/// An event as both outputs must show it.
type Key = (u64, u64, EventKind, u64);

fn key(agent_id: u64, event_seq: u64, e: &Event, ts: u64) -> Key {
    (agent_id, event_seq, e.kind(), ts)
}

fn live_keys(frames: &[LiveFrame]) -> Vec<Key> {
    frames
        .iter()
        .map(|f| {
            assert_eq!(f.ethertype, LIVE_ETHERTYPE, "only event frames");
            let g = f
                .event
                .global_ns()
                .expect("every kind here has a global time");
            key(f.agent_id, f.event_seq, &f.event, g)
        })
        .collect()
}

/// The part of `file` from the event `first` on.
fn suffix_from<'a>(file: &'a [Key], first: &Key) -> &'a [Key] {
    let at = file
        .iter()
        .position(|k| k == first)
        .unwrap_or_else(|| panic!("the capture's first event {first:?} is not in the file"));
    &file[at..]
}

fn per_kind(keys: &[Key]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for k in keys {
        *m.entry(format!("{:?}", k.2)).or_insert(0) += 1;
    }
    m
}

/// One second of iperf3 from a to b.
fn iperf3(pair: &NetnsPair) {
    let mut server = {
        let mut cmd = NetnsPair::exec(&pair.b, Path::new("iperf3"));
        cmd.args(["-s", "-1", "-B", &pair.addr_b.to_string()])
            .args(["-p", &PORT.to_string()]);
        Proc::spawn("iperf3 -s", cmd)
    };
    let (addr, port) = (pair.addr_b.to_string(), PORT.to_string());
    let mut ok = false;
    for _ in 0..20 {
        // The server may not listen yet.
        std::thread::sleep(Duration::from_millis(100));
        let mut client = NetnsPair::exec(&pair.a, Path::new("iperf3"));
        client.args([
            "-c", &addr, "-p", &port, "-t", "1", "-b", "200M", "-l", "16K",
        ]);
        let (st, out, err) = run(client);
        if st.success() {
            ok = true;
            break;
        }
        assert!(!out.contains("Connected"), "iperf3 failed: {out}{err}");
    }
    assert!(ok, "iperf3 client never connected");
    drop(server.stop(libc::SIGTERM, Duration::from_secs(5)));
}

#[test]
fn live_interface_shows_the_files_events_and_never_traces_itself() {
    if !require_root() {
        return;
    }
    let Some(tshark) = Tshark::or_skip("live_interface_shows_the_files_events") else {
        return;
    };
    if !have("iperf3") || !have("dumpcap") {
        skip("iperf3 or dumpcap not installed (scripts/setup.sh installs both)");
        return;
    }
    let pair = NetnsPair::create("ntrliv", 226).expect("creating namespaces");
    let out = tempfile::tempdir().unwrap();
    let caps = tempfile::tempdir().unwrap();
    let mut sink = spawn_sink(&pair, out.path(), &["--live-iface", IFACE]);
    let mut agent = {
        let mut cmd = NetnsPair::exec(&pair.b, &bin("tracer-agent"));
        cmd.args(["--sink", &format!("{}:{SINK_PORT}", pair.addr_b)])
            .args(["--probes", "rx,drops", "--hostname", "receiver", "--json"]);
        let mut p = Proc::spawn("tracer-agent", cmd);
        p.wait_stderr("rx probe attached", Duration::from_secs(30));
        p.wait_stderr("drops probe attached", Duration::from_secs(30));
        p
    };
    // No reader yet: the host drops every frame (no handler for 0x88B5)
    // while the drops probe watches; a few clock events make frames.
    std::thread::sleep(Duration::from_millis(2500));
    let (ifindex, dropped_unread) = iface_info(&pair.b);
    let all_file = caps.path().join("live.pcapng");
    let rx_file = caps.path().join("rx-only.pcapng");
    let mut cap_all = spawn_dumpcap(&pair.b, &all_file, None);
    let mut cap_rx = spawn_dumpcap(&pair.b, &rx_file, Some(RX_ONLY_FILTER));
    iperf3(&pair);
    std::thread::sleep(Duration::from_millis(300));
    let agent_final = stop_json(&mut agent, libc::SIGINT);
    // Past the reorder window (250 ms) and a tick: everything is written.
    std::thread::sleep(Duration::from_millis(1000));
    stop_dumpcap(&mut cap_all);
    stop_dumpcap(&mut cap_rx);
    let sink_final = stop_json(&mut sink, libc::SIGTERM);
    wait_gone(&pair.b, "after the sink exited");

    let trace = read_dir(out.path());
    assert_eq!(agent_final["stats"]["ring_overruns"], 0, "{agent_final}");
    let file: Vec<Key> = trace
        .frames
        .iter()
        .map(|f| {
            assert_eq!(f.event.global_ns(), Some(f.ts_ns), "file stamps are global");
            key(f.agent_id, f.event_seq, &f.event, f.ts_ns)
        })
        .collect();

    // The traced host shows none of its live interface's frames: no drop
    // of their protocol, no event on that interface; yet the kernel did
    // drop frames of the interface while it was traced.
    assert!(dropped_unread > 0, "no frame took the drop path unread");
    for f in &trace.frames {
        match &f.event {
            Event::Drop(d) => {
                assert_ne!(d.protocol, LIVE_ETHERTYPE, "a live frame's drop: {d:?}");
                assert_ne!(d.ifindex, ifindex, "a drop on the live interface: {d:?}");
            }
            Event::Rx(r) => assert_ne!(r.ifindex, ifindex, "RX on the live interface: {r:?}"),
            _ => {}
        }
    }

    // The capture holds the file's events from its start on: the same
    // events, in the same order, with the same global times.
    let live = live_keys(&read_live_capture(&all_file));
    assert!(!live.is_empty(), "the capture holds no frame");
    let want = suffix_from(&file, &live[0]);
    assert_eq!(per_kind(&live), per_kind(want), "count per kind");
    assert_eq!(live.len(), want.len());
    assert!(
        live == want,
        "the capture differs from the file (order or times)"
    );
    let rx_events = per_kind(&live).get("Rx").copied().unwrap_or(0);
    assert!(
        rx_events > 1000,
        "a traced iperf3 flow: {:?}",
        per_kind(&live)
    );
    let live_stats = &sink_final["live"];
    assert_eq!(live_stats["iface"], IFACE);
    assert_eq!(live_stats["frames_dropped"], 0, "{live_stats}");
    assert_eq!(
        live_stats["frames_sent"].as_u64(),
        Some(file.len() as u64),
        "{live_stats}"
    );

    // The capture filter keeps exactly the RX events.
    let rx_only = live_keys(&read_live_capture(&rx_file));
    assert!(!rx_only.is_empty());
    let want_rx: Vec<Key> = suffix_from(&file, &rx_only[0])
        .iter()
        .filter(|k| k.2 == EventKind::Rx)
        .copied()
        .collect();
    assert!(rx_only == want_rx, "capture filter {RX_ONLY_FILTER:?}");

    // tshark decodes every frame through the dissector without an error
    // and shows each event's global time; the frame time is the capture
    // time, a reorder window or more after the event.
    let rows = tshark
        .fields(
            &all_file,
            &[
                "frame.time_epoch",
                "eth.type",
                "nettrace.kind",
                "nettrace.rx.global_ns",
                "nettrace.clock.global_ns",
                "nettrace.drop.global_ns",
            ],
            &Query::default(),
        )
        .expect("tshark decodes the capture cleanly");
    assert_eq!(rows.len(), live.len());
    let mut lag_ms = Vec::new();
    for (row, k) in rows.iter().zip(&live) {
        assert_eq!(row.one("eth.type"), "0x88b5");
        let global = [
            "nettrace.rx.global_ns",
            "nettrace.clock.global_ns",
            "nettrace.drop.global_ns",
        ]
        .iter()
        .find_map(|f| row.opt(f))
        .unwrap_or_else(|| panic!("no global time shown: {row:?}"));
        assert_eq!(global, k.3.to_string());
        let frame_s: f64 = row.one("frame.time_epoch").parse().expect("epoch");
        let lag = frame_s * 1e3 - k.3 as f64 / 1e6;
        assert!(lag > 0.0, "frame time before the event: {row:?}");
        lag_ms.push(lag);
    }
    lag_ms.sort_by(f64::total_cmp);
    eprintln!(
        "frame time - global time: min {:.1} ms, median {:.1} ms, max {:.1} ms over {} frames; \
         per kind {:?}",
        lag_ms[0],
        lag_ms[lag_ms.len() / 2],
        lag_ms[lag_ms.len() - 1],
        lag_ms.len(),
        per_kind(&live)
    );
    let shown_rx = tshark
        .fields(
            &all_file,
            &["frame.number"],
            &Query::default().filter("nettrace.kind == 3"),
        )
        .expect("display filter");
    assert_eq!(
        shown_rx.len(),
        rx_events,
        "display filter nettrace.kind == 3"
    );
}

#[test]
fn live_interface_goes_with_the_sink_even_after_kill_9() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrlvk", 227).expect("creating namespaces");
    let out = tempfile::tempdir().unwrap();
    let args = ["--live-iface", IFACE, "--no-clock-responder"];

    // A clean exit removes it.
    let mut sink = spawn_sink(&pair, out.path(), &args);
    assert!(iface_exists(&pair.b));
    // A second sink cannot take the name while the first holds it.
    let mut second = NetnsPair::exec(&pair.b, &bin("tracer-sink"));
    second
        .args(["--listen", &format!("{}:{}", pair.addr_b, SINK_PORT + 10)])
        .arg("--output")
        .arg(out.path())
        .args(args);
    let (st, _, err) = run(second);
    assert!(!st.success());
    assert!(err.contains("in use by another process"), "{err}");
    stop_json(&mut sink, libc::SIGTERM);
    wait_gone(&pair.b, "after a clean exit");

    // kill -9, then a restart at once gets the name.
    let mut sink = spawn_sink(&pair, out.path(), &args);
    assert!(iface_exists(&pair.b));
    let (st, _) = sink.stop(libc::SIGKILL, Duration::from_secs(10));
    assert!(!st.success());
    let mut sink = spawn_sink(&pair, out.path(), &args);
    assert!(iface_exists(&pair.b));
    stop_json(&mut sink, libc::SIGTERM);
    wait_gone(&pair.b, "after kill -9 and a restart");

    // A stale persistent TAP of the name is taken over, then removed.
    ip(&pair.b, &["tuntap", "add", "dev", IFACE, "mode", "tap"]).expect("ip tuntap add");
    let mut sink = spawn_sink(&pair, out.path(), &args);
    sink.wait_stderr("took over a stale live interface", Duration::from_secs(5));
    stop_json(&mut sink, libc::SIGTERM);
    wait_gone(&pair.b, "after taking over a stale one");
}

/// The agent's own live interface (`tracer-agent --live-iface`, no sink):
/// with `--write`, the capture holds the file's events from its first
/// frame on, as the sink's does; without it, frames arrive and no file is
/// written; either way the interface goes when the agent exits.
#[test]
fn the_agents_own_live_interface_with_and_without_files() {
    if !require_root() {
        return;
    }
    if !have("iperf3") || !have("dumpcap") {
        skip("iperf3 or dumpcap not installed (scripts/setup.sh installs both)");
        return;
    }
    let pair = NetnsPair::create("ntrlag", 228).expect("creating namespaces");
    let caps = tempfile::tempdir().unwrap();
    for with_files in [true, false] {
        let out = tempfile::tempdir().unwrap();
        let files = out.path().join("traces");
        let mut agent = {
            let mut cmd = NetnsPair::exec(&pair.b, &bin("tracer-agent"));
            cmd.args(["--live-iface", IFACE]).args([
                "--probes",
                "rx",
                "--hostname",
                "solo",
                "--json",
            ]);
            if with_files {
                cmd.arg("--write").arg(&files);
            }
            let mut p = Proc::spawn("tracer-agent --live-iface", cmd);
            p.wait_stderr("rx probe attached", Duration::from_secs(30));
            p
        };
        assert!(iface_exists(&pair.b), "the agent made no {IFACE}");
        let cap = caps.path().join(format!("agent-{with_files}.pcapng"));
        let mut dumpcap = spawn_dumpcap(&pair.b, &cap, None);
        iperf3(&pair);
        std::thread::sleep(Duration::from_millis(300));
        let fin = stop_json(&mut agent, libc::SIGINT);
        stop_dumpcap(&mut dumpcap);
        wait_gone(&pair.b, "after the agent exited");
        let live_stats = &fin["writer"]["live"];
        assert_eq!(live_stats["frames_dropped"], 0, "{fin}");
        let live = live_keys(&read_live_capture(&cap));
        let rx = per_kind(&live).get("Rx").copied().unwrap_or(0);
        assert!(rx > 1000, "a traced iperf3 flow: {:?}", per_kind(&live));
        if with_files {
            let trace = read_dir(&files);
            let file: Vec<Key> = trace
                .frames
                .iter()
                .map(|f| key(f.agent_id, f.event_seq, &f.event, f.ts_ns))
                .collect();
            let want = suffix_from(&file, &live[0]);
            let first_diff = live.iter().zip(want).position(|(a, b)| a != b);
            assert!(
                live == want,
                "the capture differs from the agent's file: {} frames against {}, first \
                 difference at {first_diff:?}",
                live.len(),
                want.len()
            );
            assert_eq!(fin["writer"]["sink_write_lost"], 0, "{fin}");
        } else {
            assert!(!files.exists(), "no --write, yet files were written");
            assert_eq!(fin["writer"]["events_written"], 0, "{fin}");
            assert_eq!(fin["writer"]["sink_write_lost"], 0, "{fin}");
            // The capture started after the interface did: it holds the
            // frames sent from then on (the exact match is the case above).
            assert!(
                live_stats["frames_sent"].as_u64() >= Some(live.len() as u64),
                "{fin}"
            );
        }
    }
}

/// An agent beside a remote sink with a live interface of its own
/// (`--sink` and `--live-iface`): the remote sink's file and the local
/// capture show the same events from the capture's first frame on, and
/// the local copy's loopback datagrams are not traced.
#[test]
fn an_agent_beside_a_sink_shows_its_events_live_too() {
    if !require_root() {
        return;
    }
    if !have("dumpcap") {
        skip("dumpcap not installed (scripts/setup.sh installs it)");
        return;
    }
    let pair = NetnsPair::create("ntrlas", 229).expect("creating namespaces");
    let out = tempfile::tempdir().unwrap();
    let caps = tempfile::tempdir().unwrap();
    let mut sink = spawn_sink(&pair, out.path(), &[]);
    let mut agent = {
        let mut cmd = NetnsPair::exec(&pair.a, &bin("tracer-agent"));
        cmd.args(["--sink", &format!("{}:{SINK_PORT}", pair.addr_b)])
            .args(["--live-iface", IFACE, "--probes", "tx,rx"])
            .args(["--hostname", "sender", "--json"]);
        let mut p = Proc::spawn("tracer-agent --sink --live-iface", cmd);
        p.wait_stderr("rx probe attached", Duration::from_secs(30));
        p
    };
    let cap = caps.path().join("beside.pcapng");
    let mut dumpcap = spawn_dumpcap(&pair.a, &cap, None);
    tracer_e2e::scenario::tcp_flow(&pair, PORT + 1, 300, 2000);
    std::thread::sleep(Duration::from_millis(300));
    let fin = stop_json(&mut agent, libc::SIGINT);
    stop_dumpcap(&mut dumpcap);
    wait_gone(&pair.a, "after the agent exited");
    std::thread::sleep(Duration::from_millis(200));
    let sink_final = stop_json(&mut sink, libc::SIGTERM);
    assert_eq!(fin["stats"]["ring_overruns"], 0, "{fin}");
    assert_eq!(fin["writer"]["sink_write_lost"], 0, "{fin}");
    assert_eq!(sink_final["sink_write_lost"], 0, "{sink_final}");

    let trace = read_dir(out.path());
    let file: Vec<Key> = trace
        .frames
        .iter()
        .map(|f| {
            if let Event::Rx(r) = &f.event {
                assert!(
                    !r.flow().saddr.is_loopback() && !r.flow().daddr.is_loopback(),
                    "the local copy's datagrams were traced: {r:?}"
                );
            }
            key(f.agent_id, f.event_seq, &f.event, f.ts_ns)
        })
        .collect();
    let live = live_keys(&read_live_capture(&cap));
    let tx = per_kind(&live).get("Tx").copied().unwrap_or(0);
    assert!(tx > 300, "the flow's TX events: {:?}", per_kind(&live));
    let want = suffix_from(&file, &live[0]);
    assert_eq!(per_kind(&live), per_kind(want), "count per kind");
    assert!(
        live == want,
        "the capture differs from the remote sink's file"
    );
}
