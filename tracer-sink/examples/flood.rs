//! Load generator for the sink benchmark: N sender threads, each a
//! simulated agent, send valid datagrams of TX events (MTU-sized by
//! default) to a sink, flat out or paced to a total event rate, tagged
//! with `--key-file` as a keyed agent's are.
//!
//! ```text
//! cargo run --release -p tracer-sink --example flood -- \
//!     --target 127.0.0.1:7420 --senders 2 --events 2000000 --rate 1000000
//! ```
//! Prints one JSON object: events and datagrams sent, elapsed time, rate.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use clap::Parser;
use tracer_codec::{DatagramBuilder, DatagramHeader, TxEvent, MAC_LEN, WIRE_VERSION};

/// Send valid tracer datagrams to a sink as fast as asked.
#[derive(Debug, Parser)]
struct Args {
    /// Sink address.
    #[arg(long, default_value = "127.0.0.1:7420")]
    target: SocketAddr,
    /// Parallel senders (one simulated agent each).
    #[arg(long, default_value_t = 2)]
    senders: usize,
    /// Total events to send (split evenly between senders).
    #[arg(long, default_value_t = 2_000_000)]
    events: u64,
    /// UDP payload size in bytes (1472 = Ethernet MTU; up to 65507).
    #[arg(long, default_value_t = 1472)]
    datagram_size: usize,
    /// Total events per second over all senders; 0 = as fast as possible.
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Tag every datagram with this key file, as an agent with
    /// `--key-file` does (the tag is computed for every datagram sent).
    #[arg(long, value_name = "PATH")]
    key_file: Option<std::path::PathBuf>,
    /// Send through a connected socket (as an agent does) instead of
    /// naming the target on every datagram.
    #[arg(long)]
    connected: bool,
    /// When paced, send in bursts: sleep only once this far ahead of the
    /// rate (an agent drains its rings every 5 ms under load).
    #[arg(long, value_name = "MS", default_value_t = 0.2)]
    burst_ms: f64,
    /// Send up to N full datagrams per system call as UDP GSO segments,
    /// as an agent's default `--batch-send gso` does (needs --connected;
    /// 1: one datagram per call).
    #[arg(long, value_name = "N", default_value_t = 1)]
    gso: usize,
}

const RECORD: usize = 4 + TxEvent::BODY_LEN;

struct Sent {
    events: u64,
    datagrams: u64,
    send_errors: u64,
}

fn sender(
    args: &Args,
    key: Option<&tracer_auth::MacKey>,
    idx: usize,
    events: u64,
    start_ns: u64,
) -> std::io::Result<Sent> {
    let sock = UdpSocket::bind(if args.target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    })?;
    if args.connected {
        sock.connect(args.target)?;
    }
    let host = format!("flood-{idx}");
    let mut header = DatagramHeader {
        version: WIRE_VERSION,
        agent_id: (u64::from(std::process::id()) << 16) | idx as u64,
        boot_id: [idx as u8; 16],
        seq: 0,
        lost_events: 0,
        first_event_seq: 0,
        clock_source: 0,
        clock_state: 3,
        event_count: 0,
        flags: 0,
        incarnation: u64::from(std::process::id()) << 8 | idx as u64 | 1 << 63,
        sink_instance: 0,
        sent_mono_ns: 0,
        hostname: host.clone(),
    };
    // Build one full datagram as a template; patch the header and the
    // timestamps per send so the generator stays cheap.
    let builder = || {
        let b = DatagramBuilder::new(&host, args.datagram_size);
        if key.is_some() {
            b.with_mac_room()
        } else {
            b
        }
    };
    let finish = |b: &mut DatagramBuilder, h: &DatagramHeader| match key {
        Some(k) => b.finish_with_mac(h, |d| k.tag(d)),
        None => b.finish(h),
    };
    let tag_len = if key.is_some() { MAC_LEN } else { 0 };
    let mut b = builder();
    let mut ev = TxEvent {
        stage: 2,
        family: 4,
        sport: 40000 + idx as u16,
        dport: 5201,
        saddr: [10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        daddr: [10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        ..TxEvent::default()
    };
    let mut per = 0u64;
    while b.push_tx(&ev) {
        ev.cookie += 1;
        per += 1;
    }
    let template = finish(&mut b, &header);
    let hl = template.len() - tag_len - per as usize * RECORD;
    let per_sender_rate = args.rate as f64 / args.senders as f64;
    let t0 = Instant::now();
    let mut sent = Sent {
        events: 0,
        datagrams: 0,
        send_errors: 0,
    };
    let mut buf = template.clone();
    // Full datagrams waiting for one GSO send (all of the template's size).
    let gso = if args.connected {
        args.gso.clamp(1, 64)
    } else {
        1
    };
    let mut batch: Vec<u8> = Vec::with_capacity(template.len() * gso);
    let mut batched = 0usize;
    while sent.events < events {
        let n = per.min(events - sent.events);
        let len = if n == per {
            hl + per as usize * RECORD + tag_len
        } else {
            // Last, short datagram.
            let mut b = builder();
            for _ in 0..n {
                b.push_tx(&ev);
            }
            header.event_count = n as u16;
            buf = finish(&mut b, &header);
            buf.len()
        };
        buf[32..40].copy_from_slice(&header.seq.to_le_bytes());
        buf[48..56].copy_from_slice(&sent.events.to_le_bytes());
        for k in 0..n as usize {
            let ts = start_ns + (sent.events + k as u64) * 1000 + idx as u64;
            let o = hl + k * RECORD + 4 + 8;
            buf[o..o + 8].copy_from_slice(&ts.to_le_bytes());
        }
        // The tag covers what was just patched: computed per datagram, as
        // a keyed agent does.
        if let Some(k) = key {
            let t = k.tag(&buf[..len - MAC_LEN]);
            buf[len - MAC_LEN..len].copy_from_slice(&t);
        }
        if gso > 1 && n == per {
            batch.extend_from_slice(&buf[..len]);
            batched += 1;
            if batched == gso || sent.events + n >= events {
                send_retrying(&mut sent, || send_gso(&sock, &batch, len));
                batch.clear();
                batched = 0;
            }
        } else {
            if let Some(seg) = batch.len().checked_div(batched) {
                send_retrying(&mut sent, || send_gso(&sock, &batch, seg));
                batch.clear();
                batched = 0;
            }
            send_retrying(&mut sent, || {
                if args.connected {
                    sock.send(&buf[..len])
                } else {
                    sock.send_to(&buf[..len], args.target)
                }
            });
        }
        header.seq += 1;
        sent.events += n;
        sent.datagrams += 1;
        if per_sender_rate > 0.0 {
            let due = Duration::from_secs_f64(sent.events as f64 / per_sender_rate);
            let el = t0.elapsed();
            if due > el + Duration::from_secs_f64(args.burst_ms / 1e3) {
                std::thread::sleep(due - el);
            }
        }
    }
    Ok(sent)
}

/// Retry `send` until the kernel takes it (a full socket buffer), counting
/// each refusal.
fn send_retrying(sent: &mut Sent, mut send: impl FnMut() -> std::io::Result<usize>) {
    while send().is_err() {
        sent.send_errors += 1;
        std::thread::yield_now();
    }
}

/// One sendmsg of the datagrams in `buf` as UDP GSO segments of `seg`
/// bytes (the kernel cuts them apart, or a UDP_GRO receiver takes them
/// whole).
fn send_gso(sock: &UdpSocket, buf: &[u8], seg: usize) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let mut iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut control = [0u64; 4];
    // SAFETY: msghdr is plain data; zeroed is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is arithmetic.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as usize;
    // SAFETY: the control buffer holds CMSG_SPACE(2) bytes: one header and
    // its u16 fit.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_UDP;
        (*c).cmsg_type = libc::UDP_SEGMENT;
        (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg as u16);
    }
    // SAFETY: sendmsg on our socket with buffers alive for the call.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, 0) };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let key = match &args.key_file {
        Some(p) => Some(
            tracer_auth::SharedKey::load(p)
                .map_err(std::io::Error::other)?
                .mac_key(tracer_auth::Purpose::Datagram),
        ),
        None => None,
    };
    let senders = args.senders.max(1);
    let start_ns = tracer_sink::SinkClock::System.now_ns();
    let t0 = Instant::now();
    let results: Vec<std::io::Result<Sent>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..senders)
            .map(|i| {
                let share = args.events / senders as u64
                    + u64::from((i as u64) < args.events % senders as u64);
                let args = &args;
                let key = key.as_ref();
                s.spawn(move || sender(args, key, i, share, start_ns))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("sender panicked")))
            })
            .collect()
    });
    let elapsed = t0.elapsed().as_secs_f64();
    let (mut ev, mut dg, mut errs) = (0, 0, 0);
    for r in results {
        let r = r?;
        ev += r.events;
        dg += r.datagrams;
        errs += r.send_errors;
    }
    println!(
        "{{\"senders\":{senders},\"datagram_size\":{},\"events_sent\":{ev},\"datagrams_sent\":{dg},\"send_errors\":{errs},\"elapsed_s\":{elapsed:.4},\"events_per_s\":{:.0}}}",
        args.datagram_size,
        ev as f64 / elapsed
    );
    Ok(())
}
