//! Wireshark's extcap, through the real extcap protocol: tshark, run as an
//! unprivileged user as Wireshark users run it, with its extcap folder
//! pointed at a folder holding `nettrace-extcap`, lists the interface; a
//! capture through it, during a traced TCP flow, receives the live events
//! of a running sink (`--live-listen`, with a key): the same events, with
//! the same global times as frame times, as the sink's file holds; and a
//! capture with another key is refused with the reason.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tracer_codec::Event;
use tracer_e2e::bins::bin;
use tracer_e2e::netns::NetnsPair;
use tracer_e2e::pcap::read_dir;
use tracer_e2e::procs::{run_within, Proc};
use tracer_e2e::scenario::{spawn_agent, spawn_sink, stop_json, tcp_flow};
use tracer_e2e::skip::require_root;
use tracer_e2e::tshark::{dissector_path, Tshark};

const LIVE_PORT: u16 = 7431;
/// Bound on a tshark run that must end by itself: a hang fails the test.
const TSHARK_BOUND: Duration = Duration::from_secs(60);
const FLOW_PORT: u16 = 5432;

/// The unprivileged user tshark runs as (root's tshark ignores
/// WIRESHARK_EXTCAP_DIR, as Wireshark ignores it for any privileged user).
const USER: &str = "nobody";
/// Its group.
const GROUP: &str = "nogroup";

/// A folder the unprivileged user owns: its HOME, the extcap folder with a
/// copy of nettrace-extcap, the key files and the capture.
struct UserDir {
    dir: tempfile::TempDir,
}

impl UserDir {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let extcap = dir.path().join("extcap");
        std::fs::create_dir(&extcap).unwrap();
        std::fs::copy(bin("nettrace-extcap"), extcap.join("nettrace-extcap")).unwrap();
        for sub in ["home", "capture"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        let d = UserDir { dir };
        if tracer_e2e::netns::is_root() {
            d.give_to_user(d.dir.path());
        }
        d
    }

    fn path(&self, sub: &str) -> PathBuf {
        self.dir.path().join(sub)
    }

    /// `dir` and everything in it owned by [`USER`].
    fn give_to_user(&self, dir: &Path) {
        let st = Command::new("chown")
            .args(["-R", &format!("{USER}:")])
            .arg(dir)
            .status()
            .unwrap();
        assert!(st.success(), "chown {}", dir.display());
    }

    /// A key file of `bytes` the user owns (owner-only, as the tools demand).
    fn key(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, bytes).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        if tracer_e2e::netns::is_root() {
            self.give_to_user(&p);
        }
        p
    }

    /// tshark as the user (in namespace `ns` when given), with the
    /// dissector and this extcap folder.
    fn tshark(&self, ts: &Tshark, ns: Option<&str>, args: &[&str]) -> Command {
        let mut c = match ns {
            Some(ns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net={}", NetnsPair::path(ns).display()))
                    .arg("--");
                c
            }
            None => Command::new("env"),
        };
        if tracer_e2e::netns::is_root() {
            // setpriv execs tshark in its place (runuser would stay as its
            // parent and not pass SIGINT on, as su does not).
            c.args([
                "setpriv",
                "--reuid",
                USER,
                "--regid",
                GROUP,
                "--clear-groups",
                "--",
            ]);
        }
        c.arg("env")
            .arg(format!("HOME={}", self.path("home").display()))
            .arg(format!(
                "WIRESHARK_EXTCAP_DIR={}",
                self.path("extcap").display()
            ))
            .arg(ts.exe())
            .arg("-X")
            .arg(format!("lua_script:{}", dissector_path().display()))
            .args(args);
        c
    }
}

#[test]
fn tshark_lists_the_extcap_interface() {
    let Some(ts) = Tshark::or_skip("tshark_lists_the_extcap_interface") else {
        return;
    };
    let d = UserDir::new();
    let (st, out, err) = run_within(d.tshark(&ts, None, &["-D"]), TSHARK_BOUND);
    assert!(st.success(), "tshark -D: {err}");
    assert!(
        out.lines()
            .any(|l| l.contains("nettrace (nettrace live events")),
        "no nettrace interface in tshark -D:\n{out}\n{err}"
    );
    // Its link types, asked through --extcap-dlts.
    let (st, out, err) = run_within(d.tshark(&ts, None, &["-L", "-i", "nettrace"]), TSHARK_BOUND);
    assert!(st.success(), "tshark -L: {err}");
    assert!(
        out.contains("USER0"),
        "tshark -L -i nettrace:\n{out}\n{err}"
    );
}

/// A capture whose extcap fails after Wireshark's capture child has started
/// waiting on the fifo (here: a port that closes the connection, or never
/// answers, during the handshake) ends, with the extcap's reason, instead
/// of leaving tshark waiting for a fifo nobody opens.
#[test]
fn a_capture_that_fails_its_handshake_ends_with_the_reason() {
    let Some(ts) = Tshark::or_skip("a_capture_that_fails_its_handshake_ends_with_the_reason")
    else {
        return;
    };
    let d = UserDir::new();
    for (hold, reason) in [
        (
            Duration::from_millis(300),
            "closed the connection during the handshake",
        ),
        (
            Duration::from_secs(30),
            "did not answer the handshake within 1 s",
        ),
    ] {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let sink = format!("extcap.nettrace.sink:{}", l.local_addr().unwrap());
        // Accepts, says nothing for `hold`, then closes.
        std::thread::spawn(move || {
            let (c, _) = l.accept().unwrap();
            std::thread::sleep(hold);
            drop(c);
        });
        let args = [
            "-i",
            "nettrace",
            "-o",
            &sink,
            "-o",
            "extcap.nettrace.connecttimeout:1",
            "-a",
            "duration:20",
        ];
        let started = Instant::now();
        let (st, out, err) = run_within(d.tshark(&ts, None, &args), TSHARK_BOUND);
        assert!(!st.success(), "tshark succeeded:\n{out}\n{err}");
        assert!(
            err.contains(reason),
            "tshark did not give the reason {reason:?}:\n{err}"
        );
        // Ended by the failure, not by the capture's own duration.
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "tshark took {:?}:\n{err}",
            started.elapsed()
        );
    }
}

#[test]
fn an_extcap_capture_receives_the_sinks_live_events() {
    if !require_root() {
        return;
    }
    let Some(ts) = Tshark::or_skip("an_extcap_capture_receives_the_sinks_live_events") else {
        return;
    };
    let pair = NetnsPair::create("ntrxc", 231).expect("creating namespaces");
    let d = UserDir::new();
    let key_bytes = b"0123456789abcdef0123456789abcdef";
    let user_key = d.key("user.key", key_bytes);
    let wrong_key = d.key("wrong.key", b"fedcba9876543210fedcba9876543210");
    // The sink's and the agent's copy, root's.
    let root_keys = tempfile::tempdir().unwrap();
    let key = tracer_e2e::scenario::key_file(root_keys.path());
    assert_eq!(std::fs::read(&key).unwrap(), key_bytes);

    let out = tempfile::tempdir().unwrap();
    let live = format!("{}:{LIVE_PORT}", pair.addr_b);
    let mut sink = spawn_sink(
        &pair,
        out.path(),
        &["--key-file", &key, "--live-listen", &live],
    );
    // The agent first: the sink's writer hands events (and new clients)
    // over as it writes.
    let mut agent = spawn_agent(&pair, &["--key-file", &key]);
    let capture = d.path("capture").join("live.pcapng");
    let sink_pref = format!("extcap.nettrace.sink:{live}");
    // A capture from the nettrace interface with `key`, then `more`.
    let capture_with = |key: &Path, more: &[&str]| {
        let key_pref = format!("extcap.nettrace.keyfile:{}", key.display());
        let mut args = vec!["-i", "nettrace", "-o", &sink_pref, "-o", &key_pref];
        args.extend_from_slice(more);
        d.tshark(&ts, Some(&pair.b), &args)
    };
    let mut tshark = Proc::spawn(
        "tshark -i nettrace",
        capture_with(&user_key, &["-w", capture.to_str().unwrap()]),
    );
    sink.wait_stderr("live stream client joined", Duration::from_secs(30));

    // Another key is refused, with the reason, while the first client runs.
    let wrong = capture_with(&wrong_key, &["-a", "duration:3"]);
    let (_, wout, werr) = run_within(wrong, TSHARK_BOUND);
    assert!(
        werr.contains("wrong or missing key"),
        "a capture with another key was not refused with its reason:\n{wout}\n{werr}"
    );

    let (local, _) = tcp_flow(&pair, FLOW_PORT, 100, 2000);
    std::thread::sleep(Duration::from_millis(300));
    let agent_final = stop_json(&mut agent, libc::SIGINT);
    // The sink's reorder window, then the stream's last hand-over.
    std::thread::sleep(Duration::from_millis(1000));
    let (st, _) = tshark.stop(libc::SIGINT, Duration::from_secs(20));
    assert!(st.success(), "tshark: {}", tshark.stderr.join("\n"));
    let sink_final = stop_json(&mut sink, libc::SIGTERM);
    assert_eq!(sink_final["live"]["clients_refused_key"], 1, "{sink_final}");

    let file = read_dir(out.path());
    let live = read_dir(&d.path("capture"));
    assert_eq!(live.files.len(), 1, "tshark wrote one capture");
    let key_of = |f: &tracer_e2e::pcap::Frame| (f.agent_id, f.event_seq, f.ts_ns);
    let in_file: BTreeSet<_> = file.frames.iter().map(key_of).collect();
    let in_live: BTreeSet<_> = live.frames.iter().map(key_of).collect();
    assert!(!in_live.is_empty(), "the capture is empty");
    // Every live frame is a frame of the file, with the same global time
    // as its frame time.
    let extra: Vec<_> = in_live.difference(&in_file).collect();
    assert!(extra.is_empty(), "live frames not in the file: {extra:?}");
    // The flow's events all reached the live client (it joined before the
    // flow started).
    let tx = |t: &tracer_e2e::pcap::Trace| {
        t.frames
            .iter()
            .filter(|f| matches!(&f.event, Event::Tx(e) if e.flow().sport == local.port()))
            .count()
    };
    assert!(tx(&file) > 0, "{agent_final}");
    assert_eq!(tx(&live), tx(&file), "TX events of the flow, live vs file");
    ts.check_clean(&live.files[0], &Default::default())
        .unwrap_or_else(|e| panic!("the live capture: {e}"));
}
