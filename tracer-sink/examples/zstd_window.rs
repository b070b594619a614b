//! What the zstd window costs the sink's compression: a plain pcapng file
//! compressed the way the sink compresses (one frame, a flush of whole
//! blocks every 120 KiB at most, each coming out as one zstd block; see
//! src/pcapng/frames.rs) with each window size given, in alternating
//! passes over the same bytes, so both see the machine alike.
//!
//! zstd's streaming buffer holds the window plus one block; when the next
//! flush does not fit behind the last, it wraps, and the blocks compressed
//! while the data before the wrap is still in the window take zstd's
//! extDict path (two segments to search). With a 128 KiB window that is
//! every second flush.
//!
//! ```text
//! cargo run --release -p tracer-sink --example zstd_window -- \
//!     --input trace.pcapng --window-log 17 --window-log 20
//! ```
//! Prints, per window, the median ns per uncompressed byte and per 100-byte
//! event over the passes, and the compressed size.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Parser;
use zstd::zstd_safe::{self, CCtx, CParameter, InBuffer, OutBuffer};

#[derive(Debug, Parser)]
struct Args {
    /// A plain (uncompressed) pcapng file: the bytes to compress.
    #[arg(long)]
    input: PathBuf,
    /// zstd window logs to compare (the sink uses one).
    #[arg(long = "window-log", required = true)]
    windows: Vec<u32>,
    /// zstd level (default: the sink's).
    #[arg(long, default_value_t = tracer_sink::compression::Compression::DEFAULT_LEVEL, allow_negative_numbers = true)]
    level: i32,
    /// Passes per window, alternating.
    #[arg(long, default_value_t = 7)]
    passes: usize,
}

/// Compress `data` as one frame, flushed where the sink flushes
/// ([`tracer_sink::flush_len`]); returns the compressed size.
fn compress(data: &[u8], window_log: u32, level: i32, out: &mut Vec<u8>) -> Result<usize> {
    let mut cctx = CCtx::try_create().context("zstd context")?;
    for p in [
        CParameter::CompressionLevel(level),
        CParameter::ChecksumFlag(false),
        CParameter::ContentSizeFlag(false),
        CParameter::WindowLog(window_log),
    ] {
        cctx.set_parameter(p)
            .map_err(|c| anyhow::anyhow!(zstd_safe::get_error_name(c)))?;
    }
    let mut total = 0;
    let mut rest = data;
    let mut last = false;
    while !last {
        let n = tracer_sink::flush_len(rest);
        let (chunk, tail) = rest.split_at(n);
        rest = tail;
        last = rest.is_empty();
        let directive = if last {
            zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_end
        } else {
            zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_flush
        };
        let mut input = InBuffer::around(chunk);
        loop {
            out.clear();
            out.reserve(zstd_safe::compress_bound(chunk.len()) + 64);
            let mut output = OutBuffer::around(out);
            let left = cctx
                .compress_stream2(&mut output, &mut input, directive)
                .map_err(|c| anyhow::anyhow!(zstd_safe::get_error_name(c)))?;
            total += output.pos();
            if left == 0 && input.pos() == chunk.len() {
                break;
            }
        }
    }
    Ok(total)
}

fn main() -> Result<()> {
    let a = Args::parse();
    let data = std::fs::read(&a.input).with_context(|| format!("reading {}", a.input.display()))?;
    if data.len() < 4 || data[..4] != [0x0a, 0x0d, 0x0d, 0x0a] {
        bail!("{} is not a plain pcapng file", a.input.display());
    }
    let mut out = Vec::new();
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); a.windows.len()];
    let mut size = vec![0usize; a.windows.len()];
    for pass in 0..a.passes {
        // Rotate which window goes first, so neither always follows the other.
        for k in 0..a.windows.len() {
            let i = (k + pass) % a.windows.len();
            let t = Instant::now();
            size[i] = compress(&data, a.windows[i], a.level, &mut out)?;
            ns[i].push(t.elapsed().as_nanos() as f64 / data.len() as f64);
        }
    }
    for (i, w) in a.windows.iter().enumerate() {
        let v = &mut ns[i];
        v.sort_by(f64::total_cmp);
        let med = v[v.len() / 2];
        println!(
            "window_log {w:2}: {med:.3} ns per byte ({:.1} ns per 100 bytes), passes {:.3}-{:.3}; {} -> {} bytes ({:.2}x)",
            med * 100.0,
            v[0],
            v[v.len() - 1],
            data.len(),
            size[i],
            data.len() as f64 / size[i] as f64
        );
    }
    Ok(())
}
