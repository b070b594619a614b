//! A flood of forged clock-exchange answers at a keyed agent: agent and
//! sink in two namespaces of one kernel (true offset 0), both with one key
//! file, the agent on `--clock sink`. Once its clock is locked, an attacker
//! in the sink's namespace sends, from a raw socket with the responder's
//! address and port as source, a burst and then a sustained flood (as fast
//! as one thread sends over veth) of random datagrams and of well-formed
//! answers with guessed sequence numbers at the agent's exchange port. The
//! agent must keep updating its clock through the whole flood, and every
//! update must stay as close to the truth as without the flood.

use std::net::SocketAddrV4;
use std::time::Duration;

use clocksync::exchange::{Kind, Message};
use clocksync::{measure_offset, ClockId};
use tracer_codec::{ClockEvent, Event};
use tracer_e2e::netns::{in_netns, NetnsPair};
use tracer_e2e::scenario::{self as e2e, tai_now_ns, SINK_PORT};
use tracer_e2e::skip::require_root;
use tracer_e2e::spoof::Spoofer;

/// The responder's port: the sink's clock port is the one after its
/// event port.
const CLOCK_PORT: u16 = SINK_PORT + 1;
/// Seconds between clock updates of the agent.
const INTERVAL_S: f64 = 0.2;
/// Length of the sustained flood.
const FLOOD: Duration = Duration::from_secs(6);

/// The agent's exchange socket, as its namespace's /proc/PID/net/udp
/// shows it: (local port, receive queue bytes, drops).
fn exchange_socket(pid: u32, responder: SocketAddrV4) -> (u16, u64, u64) {
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/udp")).expect("/proc/PID/net/udp");
    let want = format!(
        "{:08X}:{:04X}",
        u32::from_ne_bytes(responder.ip().octets()),
        responder.port()
    );
    table
        .lines()
        .skip(1)
        .find_map(|l| {
            // sl local remote st tx_queue:rx_queue ... drops (the last).
            let cols: Vec<&str> = l.split_whitespace().collect();
            if cols.get(2) != Some(&want.as_str()) {
                return None;
            }
            let port = u16::from_str_radix(cols[1].rsplit(':').next()?, 16).ok()?;
            let rx_queue = u64::from_str_radix(cols.get(4)?.rsplit(':').next()?, 16).ok()?;
            let drops = cols.last()?.parse().ok()?;
            Some((port, rx_queue, drops))
        })
        .unwrap_or_else(|| panic!("no socket of pid {pid} connected to {responder}:\n{table}"))
}

/// Junk an attacker without the key can make: random bytes of the
/// message's lengths, and well-formed answers of both kinds with a random
/// sequence number (with a forged tag when long).
fn forged(i: u64, state: &mut u64) -> Vec<u8> {
    // xorshift64: fast, and every datagram differs.
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    let r = *state;
    let long = i % 2 == 0;
    match i % 4 {
        0 | 1 => {
            let len = if long { 56 } else { 40 };
            (0..len).map(|k| (r >> (k % 56)) as u8).collect()
        }
        _ => {
            let m = Message {
                kind: if i % 8 < 4 {
                    Kind::Response
                } else {
                    Kind::FollowUp
                },
                flags: 1 | if long { 2 } else { 0 },
                seq: r,
                t_ns: r.rotate_left(17),
                state: 3,
                error_estimate_ns: 100,
            };
            let mut b = m.encode().to_vec();
            if long {
                b.extend_from_slice(&r.to_le_bytes());
                b.extend_from_slice(&r.rotate_left(7).to_le_bytes());
            }
            b
        }
    }
}

#[test]
fn a_flood_of_forged_answers_does_not_stop_a_keyed_agents_clock() {
    if !require_root() {
        return;
    }
    let pair = NetnsPair::create("ntrfld", 238).expect("creating namespaces");
    let dir = tempfile::tempdir().unwrap();
    let key = tracer_e2e::scenario::key_file(dir.path());
    let key_arg = key.as_str();
    let interval = INTERVAL_S.to_string();
    let agent_args = [
        "--key-file",
        key_arg,
        "--clock",
        "sink",
        "--clock-interval",
        &interval,
    ];
    let sink_args = ["--key-file", key_arg, "--stats-interval", "0"];
    let responder = SocketAddrV4::new(pair.addr_b, CLOCK_PORT);
    let mut window = (0, 0);
    let mut sent = (0, 0);
    let (o, ()) = e2e::traced_run_with(
        &pair,
        &agent_args,
        &sink_args,
        Some("state=LOCKED"),
        || {
            // traced_run_with gives no handle on the agent: find it by the
            // one socket connected to this pair's responder.
            let pid = agent_pid(&pair);
            let (port, _, drops_before) = exchange_socket(pid, responder);
            let target = SocketAddrV4::new(pair.addr_a, port);
            let start = tai_now_ns();
            let flood = in_netns(NetnsPair::path(&pair.b), "forger", move || {
                let mut s = Spoofer::new(responder, target).expect("raw socket");
                let mut rng = 0x9e37_79b9_7f4a_7c15u64;
                let mut burst = 0;
                for i in 0..2_000 {
                    burst += u64::from(s.send(&forged(i, &mut rng)));
                }
                (burst, s.flood(FLOOD, |i| forged(i, &mut rng)))
            })
            .unwrap();
            sent = flood.join().expect("forger thread");
            window = (start, tai_now_ns());
            let (_, queued, drops) = exchange_socket(pid, responder);
            println!(
                "agent exchange socket after the flood: {queued} bytes queued, {} datagrams dropped by the kernel",
                drops - drops_before
            );
            // Junk never stays queued: at most the answers of the exchange
            // in flight are (a full queue is about 200 KB).
            assert!(queued < 16_384, "{queued} bytes of junk left queued");
            // Updates after the flood show that it left nothing behind.
            std::thread::sleep(Duration::from_secs(1));
        },
    );
    let (burst, sustained) = sent;
    let secs = (window.1 - window.0) as f64 / 1e9;
    println!(
        "forged answers: burst {burst}, then {sustained} in {secs:.1} s ({:.0}/s)",
        sustained as f64 / secs
    );
    assert!(
        sustained as f64 / secs > 20_000.0,
        "the forger must flood, not trickle: {sustained} in {secs:.1} s"
    );

    let clocks: Vec<ClockEvent> = o
        .trace
        .frames
        .iter()
        .filter_map(|f| match &f.event {
            Event::Clock(c) => Some(*c),
            _ => None,
        })
        .collect();
    let during: Vec<&ClockEvent> = clocks
        .iter()
        .filter(|c| (window.0..window.1).contains(&c.global_ns))
        .collect();
    let expected = secs / INTERVAL_S;
    println!(
        "clock updates during the flood: {} (one every {INTERVAL_S} s: {expected:.0})",
        during.len()
    );
    // A sample is a burst of 16 exchanges; one lost update in ten is
    // already a defect, a frozen clock writes none.
    assert!(
        during.len() as f64 >= 0.9 * expected - 1.0,
        "the clock stopped updating under the flood: {} updates in {secs:.1} s, {} in the whole run; agent stderr shows why",
        during.len(),
        clocks.len()
    );
    // Truth: both namespaces read this kernel's CLOCK_TAI.
    let off = measure_offset(ClockId::Monotonic, ClockId::Tai, 64)
        .unwrap()
        .offset_ns();
    let mut errs: Vec<i64> = during
        .iter()
        .map(|c| (c.global_ns as i64 - (c.mono_ns as i64 + off)).abs())
        .collect();
    errs.sort_unstable();
    let (p50, max) = (errs[errs.len() / 2], errs[errs.len() - 1]);
    println!("|global - truth| at the updates during the flood: p50 {p50} ns, max {max} ns");
    // The usual bound of e2e_clock (max 5 µs for a keyed, loaded veth).
    assert!(max < 5_000, "an update during the flood was {max} ns off");

    // What the agent refused, it says: its exchange socket's filter
    // dropped the flood in the kernel, counted in the agent's stats.
    let exchange = &o.agent_final["stats"]["clock"]["exchange"];
    println!("agent exchange stats: {exchange}");
    let refused = exchange["dropped_by_kernel"].as_u64().unwrap_or(0);
    assert!(
        refused as f64 >= 0.9 * (burst + sustained) as f64,
        "{refused} of {} forged answers counted: {exchange}",
        burst + sustained
    );
}

/// The pid of the agent of `pair` (the one tracer-agent in namespace a).
fn agent_pid(pair: &NetnsPair) -> u32 {
    use std::os::unix::fs::MetadataExt;
    let ns = std::fs::metadata(NetnsPair::path(&pair.a)).unwrap().ino();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let in_a =
                std::fs::metadata(format!("/proc/{pid}/ns/net")).is_ok_and(|m| m.ino() == ns);
            comm.trim() == "tracer-agent" && in_a
        })
        .expect("the agent process in namespace a")
}
