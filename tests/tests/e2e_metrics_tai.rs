//! The metrics mode's RX latencies when the kernel's TAI offset is not
//! zero and when it changes under a running agent: an skb's RX stamp is
//! REALTIME and the program reads CLOCK_TAI, so it must subtract exactly
//! the offset the kernel has now. Left out, every latency is the offset
//! (37 s on a host whose NTP or ptp4l set it); subtracted twice or with
//! the wrong sign, every stamp looks like the future and is not observed.
//!
//! Alone in its test binary: it sets the machine's TAI offset (adjtimex
//! ADJ_TAI, which moves CLOCK_TAI) for a few seconds and puts it back, so
//! no other test of this run reads CLOCK_TAI meanwhile.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use tracer_e2e::bins::bin;
use tracer_e2e::netns::{in_netns, NetnsPair};
use tracer_e2e::procs::Proc;
use tracer_e2e::skip::require_root;

const METRICS: &str = "127.0.0.1:19432";
const HOOKS: [&str; 3] = ["netif_receive_skb", "tcp_probe", "skb_copy_datagram_iovec"];
const ROUND_TRIPS: usize = 200;

fn adjtimex(modes: u32, tai: i64) -> libc::timex {
    // SAFETY: timex is plain data; zero is a valid value of every field.
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    tx.modes = modes;
    tx.constant = tai as libc::c_long;
    // SAFETY: tx is a valid, writable timex for the call.
    let r = unsafe { libc::adjtimex(&mut tx) };
    assert!(r >= 0, "adjtimex: {}", std::io::Error::last_os_error());
    tx
}

/// The kernel's TAI offset, seconds.
fn tai_offset() -> i64 {
    i64::from(adjtimex(0, 0).tai)
}

fn set_tai_offset(s: i64) {
    adjtimex(libc::ADJ_TAI, s);
    assert_eq!(tai_offset(), s, "the kernel did not take TAI offset {s}");
}

/// Puts the machine's TAI offset back, also when the test fails.
struct RestoreTai(i64);

impl Drop for RestoreTai {
    fn drop(&mut self) {
        adjtimex(libc::ADJ_TAI, self.0);
    }
}

/// NT_TAI_RECHECK_SHIFT of ebpf/metrics.bpf.c: a hook rereads the offset
/// when CLOCK_TAI >> this is not what it was at its last read.
const TAI_RECHECK_SHIFT: u32 = 27;

/// Until CLOCK_TAI enters its next recheck epoch: every copy of the offset
/// a hook kept before now is stale from then on, and its next event
/// rereads the map.
fn wait_next_epoch() {
    // SAFETY: timespec is plain data; zero is a valid value.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: ts is a valid, writable timespec for the call.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_TAI, &mut ts) };
    assert_eq!(
        r,
        0,
        "clock_gettime(CLOCK_TAI): {}",
        std::io::Error::last_os_error()
    );
    let now = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    let next = ((now >> TAI_RECHECK_SHIFT) + 1) << TAI_RECHECK_SHIFT;
    std::thread::sleep(Duration::from_nanos(next - now));
}

/// TCP round trips over the namespace's loopback: every skb passes the
/// three RX hooks.
fn traffic(ns: &str) {
    in_netns(NetnsPair::path(ns), "e2e-lo", move || {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let mut buf = [0u8; 1000];
        for _ in 0..ROUND_TRIPS {
            c.write_all(&buf).unwrap();
            s.read_exact(&mut buf).unwrap();
        }
    })
    .unwrap()
    .join()
    .unwrap();
}

/// Per hook (count, sum in seconds) and the future-stamp count, scraped.
fn scrape(ns: &str) -> (Vec<(f64, f64)>, f64) {
    let body = in_netns(NetnsPair::path(ns), "e2e-http", || {
        let mut s = TcpStream::connect(METRICS).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "GET /metrics HTTP/1.0\r\nHost: {METRICS}\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    })
    .unwrap()
    .join()
    .unwrap();
    let value = |name: &str, label: &str| -> f64 {
        body.lines()
            .find(|l| l.starts_with(name) && l.contains(label))
            .and_then(|l| l.rsplit_once(' '))
            .map(|(_, v)| v.parse().unwrap())
            .unwrap_or(0.0)
    };
    let hooks = HOOKS
        .iter()
        .map(|h| {
            let label = format!("hook=\"{h}\"");
            (
                value("nettrace_rx_latency_seconds_count", &label),
                value("nettrace_rx_latency_seconds_sum", &label),
            )
        })
        .collect();
    let future = value(
        "nettrace_metrics_unobserved_total",
        "reason=\"future_rx_stamp\"",
    );
    (hooks, future)
}

/// Since `before`: every hook saw the round trips, with a mean latency
/// far below a second, and no stamp was taken for the future.
fn check(phase: &str, before: &(Vec<(f64, f64)>, f64), after: &(Vec<(f64, f64)>, f64)) {
    for ((hook, (c0, s0)), (c1, s1)) in HOOKS.iter().zip(&before.0).zip(&after.0) {
        let n = c1 - c0;
        assert!(n >= ROUND_TRIPS as f64, "{phase}: {hook} observed {n}");
        let mean = (s1 - s0) / n;
        assert!(
            mean < 0.1,
            "{phase}: {hook} mean latency {mean} s: the TAI offset was not subtracted"
        );
    }
    assert_eq!(
        after.1 - before.1,
        0.0,
        "{phase}: RX stamps seen as future: the offset was subtracted wrongly"
    );
}

#[test]
fn rx_latency_follows_the_kernel_tai_offset() {
    if !require_root() {
        return;
    }
    let _restore = RestoreTai(tai_offset());
    // Not the machine's own value, so that a program that kept whatever
    // the kernel had at some other time is caught.
    let first = if tai_offset() == 37 { 36 } else { 37 };
    set_tai_offset(first);

    let pair = NetnsPair::create("ntrta", 240).expect("creating namespaces");
    let mut cmd = NetnsPair::exec(&pair.a, &bin("tracer-agent"));
    cmd.args([
        "--metrics",
        METRICS,
        "--metrics-with",
        "rx",
        "--hostname",
        "tai",
    ]);
    let mut agent = Proc::spawn("tracer-agent --metrics", cmd);
    agent.wait_stderr("metrics attached", Duration::from_secs(30));

    let zero = scrape(&pair.a);
    traffic(&pair.a);
    let one = scrape(&pair.a);
    check("offset set before the start", &zero, &one);

    // A change under the running agent (a leap second, ptp4l setting the
    // offset after the agent started): the agent writes it within its
    // refresh (1 s), and each hook rereads it at its first event of the
    // next epoch. Skbs stamped meanwhile are off by the change
    // (docs/metrics.md says so): they are left out of the comparison.
    set_tai_offset(first - 27);
    agent.wait_stderr("TAI - UTC offset changed", Duration::from_secs(10));
    wait_next_epoch();
    let changed = scrape(&pair.a);
    traffic(&pair.a);
    let two = scrape(&pair.a);
    check("offset changed while running", &changed, &two);

    let (st, _) = agent.stop(libc::SIGINT, Duration::from_secs(10));
    assert!(st.success(), "{:?}", agent.stderr);
}
