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
        loop {
            let r = if args.connected {
                sock.send(&buf[..len])
            } else {
                sock.send_to(&buf[..len], args.target)
            };
            match r {
                Ok(_) => break,
                Err(_) => {
                    sent.send_errors += 1;
                    std::thread::yield_now();
                }
            }
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
