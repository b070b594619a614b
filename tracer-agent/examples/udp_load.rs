//! Fixed-rate UDP traffic for bench/cpucost-overhead.sh, through the very
//! calls the CPU cost accounting charges: `send` sends datagrams with
//! sendto (a connected socket's send) at a fixed rate, in 1 ms bursts;
//! `recv` reads them with recvfrom until the sender has been silent for a
//! second. Each prints one JSON object with its count. A fixed amount of
//! work per second, so that what the machine's CPU does beyond it is the
//! cost of what watches it.
//!
//!     udp_load recv --bind 10.0.0.2:7791
//!     udp_load send --target 10.0.0.2:7791 --rate 100000 --secs 5 --size 1000

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

/// Fixed-rate UDP sender and receiver.
#[derive(Debug, Parser)]
struct Args {
    #[command(subcommand)]
    role: Role,
}

#[derive(Debug, Subcommand)]
enum Role {
    /// Send at a fixed rate.
    Send {
        /// Receiver address.
        #[arg(long, value_parser = tracer_cli::host_port)]
        target: SocketAddr,
        /// Datagrams per second.
        #[arg(long, default_value = "100000", value_parser = tracer_cli::int(1u64, 10_000_000))]
        rate: u64,
        /// How long, seconds.
        #[arg(long, default_value = "5", value_parser = tracer_cli::secs(0.1, 3600.0))]
        secs: Duration,
        /// Payload bytes.
        #[arg(long, default_value = "1000", value_parser = tracer_cli::int(1usize, 65_507))]
        size: usize,
    },
    /// Receive until the sender has been silent for a second.
    Recv {
        /// Address to bind.
        #[arg(long, value_parser = tracer_cli::listen_addr)]
        bind: SocketAddr,
        /// Give up after this long without a first datagram, seconds.
        #[arg(long, default_value = "60", value_parser = tracer_cli::secs(1.0, 3600.0))]
        wait: Duration,
    },
}

fn main() -> std::io::Result<()> {
    match Args::parse().role {
        Role::Send {
            target,
            rate,
            secs,
            size,
        } => send(target, rate, secs, size),
        Role::Recv { bind, wait } => recv(bind, wait),
    }
}

/// `rate` datagrams a second for `secs`: every millisecond, as many as
/// are due by then (errors, such as a full socket buffer, count as not
/// sent).
fn send(target: SocketAddr, rate: u64, secs: Duration, size: usize) -> std::io::Result<()> {
    let sock = UdpSocket::bind(if target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    })?;
    sock.connect(target)?;
    let buf = vec![0x5au8; size];
    let start = Instant::now();
    let (mut due, mut sent, mut failed) = (0u64, 0u64, 0u64);
    while start.elapsed() < secs {
        let target_count = (start.elapsed().as_secs_f64() * rate as f64) as u64;
        while due < target_count {
            match sock.send(&buf) {
                Ok(_) => sent += 1,
                Err(_) => failed += 1,
            }
            due += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    println!(
        "{}",
        serde_json::json!({"sent": sent, "failed": failed, "secs": start.elapsed().as_secs_f64()})
    );
    Ok(())
}

/// Count datagrams until one second passes without any (after the first).
fn recv(bind: SocketAddr, wait: Duration) -> std::io::Result<()> {
    let sock = UdpSocket::bind(bind)?;
    let mut buf = vec![0u8; 65_536];
    sock.set_read_timeout(Some(wait))?;
    let mut n = 0u64;
    let mut bytes = 0u64;
    loop {
        match sock.recv(&mut buf) {
            Ok(len) => {
                n += 1;
                bytes += len as u64;
                if n == 1 {
                    sock.set_read_timeout(Some(Duration::from_secs(1)))?;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break
            }
            Err(e) => return Err(e),
        }
    }
    println!("{}", serde_json::json!({"received": n, "bytes": bytes}));
    Ok(())
}
