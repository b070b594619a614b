//! The floor under the sink's ingest figures: the least a receiver of the
//! agents' datagrams can do on this machine. It reads datagrams as the
//! sink does (`recvmmsg`, one wakeup a millisecond under load) and counts
//! the events their headers declare; with `--output` it also appends
//! every datagram as received to one file there, in 1 MiB writes. It
//! validates, orders and encodes nothing. bench/sink-ingest.sh runs it in
//! the sink's place (`SINK_BIN`); it takes the sink's options the bench
//! passes and prints the sink's final stats line (events received as
//! `events_written`).
//!
//! ```text
//! cargo run --release -p tracer-sink --example null_sink -- \
//!     --listen 127.0.0.1:7420 [--output DIR] [--discard]
//! ```

use std::fs::File;
use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;

/// A receiver that only reads (and optionally stores) datagrams.
#[derive(Debug, Parser)]
struct Args {
    /// Address to receive on.
    #[arg(long, default_value = "127.0.0.1:7420")]
    listen: SocketAddr,
    /// Directory to append the datagrams to (one file).
    #[arg(long)]
    output: Option<PathBuf>,
    /// Read only, write nothing (even with `--output`).
    #[arg(long)]
    discard: bool,
    /// Accepted for the bench's command line; the stats line is JSON.
    #[arg(long)]
    json: bool,
    /// Accepted for the bench's command line; ignored.
    #[arg(long, default_value = "0")]
    stats_interval: String,
}

/// Datagrams per `recvmmsg`.
const BATCH: usize = 32;
/// Largest UDP payload.
const MAX_DATAGRAM: usize = 65_536;
/// Sleep after a read that did not fill a batch (as the sink lingers).
const LINGER: Duration = Duration::from_millis(1);

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn main() -> std::io::Result<()> {
    let args = Args::parse();
    // SAFETY: the handler only stores to an atomic (async-signal-safe).
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    let sock = UdpSocket::bind(args.listen)?;
    let fd = sock.as_raw_fd();
    let rcvbuf: libc::c_int = 32 << 20;
    // SAFETY: setsockopt with a pointer to a live c_int and its size.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&rcvbuf as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    // Wake up now and then to see a stop signal.
    sock.set_read_timeout(Some(Duration::from_millis(100)))?;
    let mut out = match (&args.output, args.discard) {
        (Some(dir), false) => {
            std::fs::create_dir_all(dir)?;
            Some(File::create(dir.join("null-sink.raw"))?)
        }
        _ => None,
    };
    eprintln!("null-sink started listen={}", args.listen);
    let started = Instant::now();
    let mut bufs = vec![0u8; BATCH * MAX_DATAGRAM];
    // SAFETY: all-zero is a valid value of these plain C structs.
    let mut iovs: Vec<libc::iovec> = vec![unsafe { std::mem::zeroed() }; BATCH];
    // SAFETY: as above.
    let mut hdrs: Vec<libc::mmsghdr> = vec![unsafe { std::mem::zeroed() }; BATCH];
    for (i, (iov, h)) in iovs.iter_mut().zip(hdrs.iter_mut()).enumerate() {
        *iov = libc::iovec {
            iov_base: bufs[i * MAX_DATAGRAM..].as_mut_ptr().cast(),
            iov_len: MAX_DATAGRAM,
        };
        h.msg_hdr.msg_iov = iov;
        h.msg_hdr.msg_iovlen = 1;
    }
    let mut pending: Vec<u8> = Vec::with_capacity(2 << 20);
    let (mut datagrams, mut events) = (0u64, 0u64);
    let mut draining = false;
    loop {
        if STOP.load(Ordering::Relaxed) && !draining {
            draining = true;
            sock.set_nonblocking(true)?;
        }
        // SAFETY: `hdrs` holds BATCH headers whose iovecs point into
        // `bufs` (MAX_DATAGRAM bytes each), all live and unmoved since they
        // were set up; the kernel writes only msg_len and msg_flags.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                hdrs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if n <= 0 {
            if draining {
                break;
            }
            continue;
        }
        let n = n as usize;
        for (i, h) in hdrs.iter().take(n).enumerate() {
            let d = &bufs[i * MAX_DATAGRAM..i * MAX_DATAGRAM + h.msg_len as usize];
            datagrams += 1;
            // event_count: u16 at offset 58 of the datagram header.
            if let Some(c) = d.get(58..60) {
                events += u64::from(u16::from_le_bytes([c[0], c[1]]));
            }
            if out.is_some() {
                pending.extend_from_slice(d);
            }
        }
        if let Some(f) = out.as_mut() {
            if pending.len() >= 1 << 20 {
                f.write_all(&pending)?;
                pending.clear();
            }
        }
        if n < BATCH && !draining {
            std::thread::sleep(LINGER);
        }
    }
    if let Some(f) = out.as_mut() {
        f.write_all(&pending)?;
    }
    println!(
        "{{\"uptime_s\":{:.3},\"datagrams_received\":{datagrams},\"events_written\":{events}}}",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
