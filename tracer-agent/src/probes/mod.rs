//! BPF probes. Each probe's BPF program is `ebpf/<name>.bpf.c` at the
//! workspace root (built by build.rs into a skeleton) and the Rust that
//! loads it is one folder here; every probe implements [`Probe`], and
//! [`PROBES`] is the registry `--probes` selects from. Adding a probe:
//! `ebpf/<name>.bpf.c`, a new folder `probes/<name>/` with its `mod.rs`
//! (exporting a [`ProbeSpec`]), its `mod` line below and its line in
//! [`PROBES`].
//!
//! The shared C headers are in `ebpf/include/`: `tracer.h` (records,
//! enums) and `kernel.h` (the few kernel types the probes read).

use std::mem::MaybeUninit;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;

use libbpf_rs::OpenObject;
use tracer_codec::{DropEvent, RxEvent, TcpEvent, TxEvent};

use crate::preflight::PreflightError;

pub mod drops;
pub mod rx;
/// The `--sample-every` rule, shared with the matcher through the codec
/// (the spec is `ebpf/include/sample.h`).
pub use tracer_codec::sample;
#[cfg(test)]
mod skb_flow;
pub mod slots;
pub mod tcp;
pub mod tx;

pub use slots::Drained;

/// What a BPF header needs to compile as host C: the kernel's integer
/// types, `__always_inline`, the byte-order helpers of bpf_endian.h, plain
/// pointer casts for `bpf_core_cast`, and writable `.rodata` configuration.
/// Not <arpa/inet.h>: its IPPROTO_* would clash with packet.h's.
#[cfg(test)]
const HOST_C_PRELUDE: &str = r#"
#include <linux/types.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define bpf_ntohs(x) __builtin_bswap16(x)
#define bpf_ntohl(x) __builtin_bswap32(x)
#define bpf_htonl(x) __builtin_bswap32(x)
#else
#define bpf_ntohs(x) (x)
#define bpf_ntohl(x) (x)
#define bpf_htonl(x) (x)
#endif
#define SKB_FLOW_CAST(p, type) ((const type *)(p))
#define FILTER_CONFIG_QUAL
"#;

/// Build `c_source` (a test program that includes shared BPF headers),
/// after [`HOST_C_PRELUDE`], with the host's C compiler as the kernel reads
/// packets (through header structs, no strict aliasing), feed it `input`
/// and return its output: how the tests check sample.h, skb_flow.h,
/// filter.h and self_traffic.h as plain C.
#[cfg(test)]
pub(crate) fn run_header_program(c_source: &str, input: &str) -> String {
    use std::io::Write;
    // The build already needs clang for the BPF side.
    let cc = ["cc", "clang-19", "clang"]
        .into_iter()
        .find(|c| {
            std::process::Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("no host C compiler (cc, clang-19, clang) to check the BPF headers against");
    let dir = tempfile::tempdir().unwrap();
    let (src, exe) = (dir.path().join("t.c"), dir.path().join("t"));
    std::fs::write(&src, format!("{HOST_C_PRELUDE}{c_source}")).unwrap();
    let include = concat!(env!("CARGO_MANIFEST_DIR"), "/../ebpf/include");
    let out = std::process::Command::new(cc)
        .args(["-std=gnu11", "-O2", "-Wall", "-Werror"])
        .args(["-fno-strict-aliasing", "-I", include, "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "compiling a BPF header as C: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut child = std::process::Command::new(&exe)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the header's test program failed");
    String::from_utf8(out.stdout).unwrap()
}

/// Every probe this agent knows, in the order they are listed and loaded.
pub static PROBES: &[ProbeSpec] = &[tx::SPEC, rx::SPEC, drops::SPEC, tcp::SPEC];

/// Settings shared by every probe; each takes what it needs.
#[derive(Debug, Clone)]
pub struct ProbeConfig {
    /// cgroup v2 directory whose sockets are traced (and its descendants).
    pub cgroup: PathBuf,
    /// netns inode to trace; 0 traces every namespace.
    pub target_netns: u32,
    /// Tag one sendmsg in N.
    pub sample_every: u32,
    /// Record slots per CPU in each probe's ring (power of two).
    pub slots_per_cpu: u32,
    /// Kernel BTF, to check for the kernel features a probe needs.
    pub btf: PathBuf,
    /// `--filter`: flows to record (empty: all), written into every
    /// probe's `.rodata` (ebpf/include/filter.h) with
    /// [`crate::write_flow_filter!`].
    pub filter: crate::filter::FlowFilter,
    /// nettrace's own traffic, excluded in BPF (ebpf/include/self_traffic.h)
    /// by the probes that can see it, written with
    /// [`crate::write_self_traffic!`]; empty with `--trace-self`.
    pub self_traffic: crate::self_traffic::SelfTraffic,
}

/// Opens, configures and loads one probe (not attached yet). `object` holds
/// the BPF object for the probe's lifetime.
pub type OpenFn = for<'obj> fn(
    &'obj mut MaybeUninit<OpenObject>,
    &ProbeConfig,
) -> Result<Box<dyn Probe + 'obj>, ProbeError>;

/// A registry entry: how to check for, and open, one probe.
#[derive(Debug)]
pub struct ProbeSpec {
    /// Name on the command line (`--probes NAME`).
    pub name: &'static str,
    /// One line for `--help`.
    pub about: &'static str,
    /// Preflight: fails, with an operator-worded message, when this kernel
    /// cannot run the probe. Runs before anything is loaded.
    pub check: fn(&ProbeConfig) -> Result<(), PreflightError>,
    /// Open, configure and load.
    pub open: OpenFn,
}

/// A probe name `--probes` does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown probe {name:?}: known probes are {}", known_probe_names())]
pub struct UnknownProbe {
    /// The name asked for.
    pub name: String,
}

/// The known probes' names, comma separated (for messages and `--help`).
pub fn known_probe_names() -> String {
    PROBES.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
}

/// The registry entry named `name`.
pub fn probe_by_name(name: &str) -> Result<&'static ProbeSpec, UnknownProbe> {
    PROBES
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| UnknownProbe { name: name.into() })
}

/// The probes named in a `--probes` list (comma separated), each once, in
/// registry order. An empty name is refused like an unknown one.
pub fn select_probes(list: &str) -> Result<Vec<&'static ProbeSpec>, UnknownProbe> {
    let wanted = list
        .split(',')
        .map(|n| probe_by_name(n.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(in_registry_order(&wanted))
}

/// `wanted` without repeats, in registry order (the order probes load in).
pub fn in_registry_order(wanted: &[&'static ProbeSpec]) -> Vec<&'static ProbeSpec> {
    PROBES
        .iter()
        .filter(|p| wanted.iter().any(|w| w.name == p.name))
        .collect()
}

/// `--help` text of `--probes`: every known probe with its one line.
pub fn probes_help() -> String {
    let mut s = String::from("Probes to load, comma separated. Known probes:");
    for p in PROBES {
        s.push_str(&format!("\n  {:<6} {}", p.name, p.about));
    }
    s
}

/// Why a probe could not be set up or read.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Opening or loading the BPF object failed.
    #[error("loading the {probe} probe's BPF program failed")]
    Load {
        /// Probe name.
        probe: &'static str,
        /// The libbpf error.
        source: libbpf_rs::Error,
    },
    /// The cgroup directory could not be opened.
    #[error("cannot open cgroup directory {path}")]
    Cgroup {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Attaching to the cgroup failed.
    #[error("attaching the {probe} probe to cgroup {path} failed")]
    Attach {
        /// Probe name.
        probe: &'static str,
        /// The directory.
        path: PathBuf,
        /// The libbpf error.
        source: libbpf_rs::Error,
    },
    /// Reading or mapping a map failed.
    #[error("reading BPF map {map} of the {probe} probe")]
    Map {
        /// Probe name.
        probe: &'static str,
        /// Map name.
        map: &'static str,
        /// The libbpf error.
        source: libbpf_rs::Error,
    },
}

/// Why a record read from a probe's ring was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Shorter than the record it must hold.
    #[error("short record: {0} bytes")]
    Short(usize),
    /// A kind this agent does not know.
    #[error("unknown record kind {0}")]
    UnknownKind(u16),
    /// `hdr.len` differs from the size of its kind's record.
    #[error("record length {got}, expected {want}")]
    BadLen {
        /// `hdr.len` as written.
        got: u16,
        /// The size of the record kind.
        want: usize,
    },
    /// A stage value the wire format does not define.
    #[error("unknown stage {0}")]
    UnknownStage(u8),
    /// An address family other than 4 or 6.
    #[error("address family {0}, expected 4 or 6")]
    BadFamily(u8),
}

/// Counters kept by the probes' BPF programs, summed over CPUs and over
/// probes. A probe leaves the ones it does not keep at 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProbeCounters {
    /// Records a probe could not place (no slot): lost in the kernel.
    pub ringbuf_lost: u64,
    /// Sockets where enabling TX timestamping failed.
    pub setsockopt_errors: u64,
    /// sendmsg calls whose skb could not be tagged.
    pub tag_errors: u64,
    /// Sockets enabled for TX timestamping.
    pub sockets: u64,
    /// sendmsg calls of traced sockets seen while sampling
    /// (`--sample-every` > 1); those ending in a sampled granule were
    /// tagged (about one in N).
    pub sendmsg_seen: u64,
    /// RX skbs with an IP ethertype whose header did not read back as
    /// IPv4/IPv6 (at stack entry, or COPY of a socketless skb): counted,
    /// not recorded.
    pub rx_read_errors: u64,
    /// skbs freed with a drop reason, in any namespace (before the netns
    /// filter): the drops probe's work, not its output.
    pub drops_seen: u64,
    /// Drops with neither device nor socket, so no namespace: recorded
    /// only when every namespace is traced.
    pub drops_unattributed: u64,
}

impl std::ops::AddAssign for ProbeCounters {
    fn add_assign(&mut self, o: Self) {
        self.ringbuf_lost += o.ringbuf_lost;
        self.setsockopt_errors += o.setsockopt_errors;
        self.tag_errors += o.tag_errors;
        self.sockets += o.sockets;
        self.sendmsg_seen += o.sendmsg_seen;
        self.rx_read_errors += o.rx_read_errors;
        self.drops_seen += o.drops_seen;
        self.drops_unattributed += o.drops_unattributed;
    }
}

/// One event a probe read, already on the global time axis. A new event
/// kind is one more variant here; collectors match what they expect.
#[derive(Debug, Clone, Copy)]
pub enum ProbeEvent<'a> {
    /// A TX timestamping event.
    Tx(&'a TxEvent),
    /// An RX stage event.
    Rx(&'a RxEvent),
    /// An skb drop event.
    Drop(&'a DropEvent),
    /// A TCP anomaly event.
    Tcp(&'a TcpEvent),
}

/// Where a probe's drain puts what it read: events, already on the global
/// time axis, and the records it refused.
pub trait Collector {
    /// A raw CLOCK_MONOTONIC stamp as this host's clock reads it: the stamp
    /// itself, unless a simulated oscillator stands for this host's clock
    /// (`--simulate-oscillator`). Events carry, and convert, this value.
    fn local_mono(&mut self, raw_ns: u64) -> u64 {
        raw_ns
    }
    /// A raw CLOCK_REALTIME stamp (an skb's software RX stamp) as this
    /// host's realtime clock reads it (see [`Collector::local_mono`]).
    fn local_realtime(&mut self, raw_ns: u64) -> u64 {
        raw_ns
    }
    /// A CLOCK_MONOTONIC stamp, as [`Collector::local_mono`] returns it, on
    /// the global time axis.
    fn global_ns(&self, mono_ns: u64) -> u64;
    /// A CLOCK_REALTIME stamp, as [`Collector::local_realtime`] returns it,
    /// on the global time axis, through the REALTIME - MONOTONIC offset of
    /// this drain.
    fn realtime_to_global_ns(&self, realtime_ns: u64) -> u64;
    /// One event.
    fn event(&mut self, ev: ProbeEvent<'_>);
    /// A record that failed validation: counted as lost, not sent.
    fn bad_record(&mut self, probe: &'static str, err: RecordError);
}

/// A loaded probe. Dropping it detaches and unloads its programs.
pub trait Probe {
    /// Its registry name.
    fn name(&self) -> &'static str;
    /// Attach its programs; events start flowing.
    fn attach(&mut self) -> Result<(), ProbeError>;
    /// Hand every record written since the last drain to `out`.
    fn drain(&mut self, out: &mut dyn Collector) -> Result<Drained, ProbeError>;
    /// Current values of its BPF counters.
    fn counters(&self) -> Result<ProbeCounters, ProbeError>;
    /// Its loaded programs (for ids and bpf_stats run times).
    fn programs(&self) -> Vec<BorrowedFd<'_>>;
    /// Detach now (also done on drop); records already written stay readable.
    fn detach(&mut self);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selects_known_probes_once_in_registry_order() {
        let names = |l: &str| -> Vec<&str> {
            select_probes(l)
                .unwrap()
                .into_iter()
                .map(|p| p.name)
                .collect()
        };
        assert_eq!(names("tx"), ["tx"]);
        assert_eq!(names("tx, tx"), ["tx"]);
        assert_eq!(names("rx,tx"), ["tx", "rx"]);
    }

    #[test]
    fn an_unknown_name_lists_the_known_ones() {
        let e = select_probes("tx,bogus").unwrap_err();
        assert_eq!(e.name, "bogus");
        let msg = e.to_string();
        assert!(msg.contains("unknown probe \"bogus\""), "{msg}");
        for p in PROBES {
            assert!(msg.contains(p.name), "{msg} lacks {}", p.name);
        }
        assert_eq!(select_probes("").unwrap_err().name, "");
    }

    #[test]
    fn registry_names_are_unique_and_plain() {
        for (i, p) in PROBES.iter().enumerate() {
            assert!(!p.name.is_empty() && !p.name.contains([',', ' ']));
            assert!(PROBES[i + 1..].iter().all(|q| q.name != p.name));
        }
    }
}
