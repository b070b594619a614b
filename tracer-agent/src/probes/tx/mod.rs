//! The TX timestamping probe (ebpf/tx_tstamp.bpf.c): load, attach to a
//! cgroup, read its counters, and decode its records.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};

use super::slots::{Drained, SlotRing};
use tracer_codec::TxEvent;

#[allow(
    clippy::all,
    clippy::pedantic,
    missing_docs,
    dead_code,
    non_camel_case_types,
    non_snake_case,
    unused
)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/tx_tstamp.skel.rs"));
}

use skel::types::tx_record;
pub use skel::TxTstampSkel;

/// `enum record_kind` value of TX records (ebpf/include/tracer.h).
const RECORD_TX: u16 = 1;

// The Rust mirror comes from the object's BTF; these pin the layout the
// decoder and the docs assume, so a header edit cannot drift silently.
const _: () = assert!(std::mem::size_of::<tx_record>() == 112);
const _: () = assert!(std::mem::offset_of!(tx_record, mono_ns) == 8);
const _: () = assert!(std::mem::offset_of!(tx_record, comm) == 96);

/// Why the probe could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Opening or loading the BPF object failed.
    #[error("loading the TX timestamping BPF program failed: {0}")]
    Load(#[source] libbpf_rs::Error),
    /// The cgroup directory could not be opened.
    #[error("cannot open cgroup directory {path}: {source}")]
    Cgroup {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Attaching to the cgroup failed.
    #[error("attaching the sockops program to cgroup {path} failed: {source}")]
    Attach {
        /// The directory.
        path: PathBuf,
        /// The libbpf error.
        source: libbpf_rs::Error,
    },
    /// Reading a map failed.
    #[error("reading BPF map {map}: {source}")]
    Map {
        /// Map name.
        map: &'static str,
        /// The libbpf error.
        source: libbpf_rs::Error,
    },
}

/// Load-time configuration (BPF `.rodata`).
#[derive(Debug, Clone)]
pub struct TxProbeConfig {
    /// cgroup v2 directory whose sockets are traced (and its descendants).
    pub cgroup: PathBuf,
    /// netns inode to trace; 0 traces every namespace.
    pub target_netns: u32,
    /// Tag one sendmsg in N.
    pub sample_every: u32,
    /// Record slots per CPU (power of two).
    pub slots_per_cpu: u32,
}

/// Counters kept by the BPF program (summed over CPUs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TxCounters {
    /// Records the probe could not place (no slot): lost in the kernel.
    pub ringbuf_lost: u64,
    /// Sockets where enabling TX timestamping failed.
    pub setsockopt_errors: u64,
    /// sendmsg calls whose skb could not be tagged.
    pub tag_errors: u64,
    /// Sockets enabled for TX timestamping.
    pub sockets: u64,
    /// sendmsg calls of traced sockets seen while sampling
    /// (`--sample-every` > 1); one in N of them was tagged.
    pub sendmsg_seen: u64,
}

/// A loaded and attached TX probe. Dropping it detaches the program.
pub struct TxProbe<'obj> {
    skel: TxTstampSkel<'obj>,
    link: Option<Link>,
    ring: SlotRing,
}

impl<'obj> TxProbe<'obj> {
    /// Open, configure, load and attach the probe. `object` holds the BPF
    /// object for the probe's lifetime.
    pub fn load(
        object: &'obj mut MaybeUninit<OpenObject>,
        cfg: &TxProbeConfig,
    ) -> Result<Self, ProbeError> {
        let builder = skel::TxTstampSkelBuilder::default();
        let mut open = builder.open(object).map_err(ProbeError::Load)?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.target_netns = cfg.target_netns;
            ro.sample_every = cfg.sample_every.max(1);
            ro.slots_per_cpu = cfg.slots_per_cpu;
        }
        let ncpu = libbpf_rs::num_possible_cpus().map_err(ProbeError::Load)?;
        let entries = (ncpu as u64 * u64::from(cfg.slots_per_cpu)).min(u64::from(u32::MAX)) as u32;
        open.maps
            .slots
            .set_max_entries(entries)
            .map_err(ProbeError::Load)?;
        let skel = open.load().map_err(ProbeError::Load)?;
        let heads = read_heads(&skel)?;
        let ring = SlotRing::new(
            skel.maps.slots.as_fd(),
            std::mem::size_of::<tx_record>(),
            cfg.slots_per_cpu,
            &heads,
        )
        .map_err(|source| ProbeError::Map {
            map: "slots",
            source: libbpf_rs::Error::from(source),
        })?;
        let dir = std::fs::File::open(&cfg.cgroup).map_err(|source| ProbeError::Cgroup {
            path: cfg.cgroup.clone(),
            source,
        })?;
        let link = skel
            .progs
            .tx_tstamp
            .attach_cgroup(dir.as_raw_fd())
            .map_err(|source| ProbeError::Attach {
                path: cfg.cgroup.clone(),
                source,
            })?;
        Ok(TxProbe {
            skel,
            link: Some(link),
            ring,
        })
    }

    /// Hand every record written since the last drain to `f`.
    pub fn drain(&mut self, f: impl FnMut(&[u8])) -> Result<Drained, ProbeError> {
        let heads = read_heads(&self.skel)?;
        Ok(self.ring.drain(&heads, f))
    }

    /// Program fd (for bpf_stats).
    pub fn prog_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.skel.progs.tx_tstamp.as_fd()
    }

    /// Current counter values.
    pub fn counters(&self) -> Result<TxCounters, ProbeError> {
        let map = &self.skel.maps.counters;
        let read = |idx: u32| -> Result<u64, ProbeError> {
            let per_cpu = map
                .lookup_percpu(&idx.to_ne_bytes(), MapFlags::ANY)
                .map_err(|source| ProbeError::Map {
                    map: "counters",
                    source,
                })?
                .unwrap_or_default();
            Ok(per_cpu
                .iter()
                .filter_map(|v| {
                    v.get(..8)
                        .map(|b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
                })
                .sum())
        };
        Ok(TxCounters {
            ringbuf_lost: read(0)?,
            setsockopt_errors: read(1)?,
            tag_errors: read(2)?,
            sockets: read(3)?,
            sendmsg_seen: read(4)?,
        })
    }

    /// Detach now (also done on drop).
    pub fn detach(&mut self) {
        self.link.take();
    }
}

/// The per-CPU producer counters.
fn read_heads(skel: &TxTstampSkel<'_>) -> Result<Vec<u64>, ProbeError> {
    let per_cpu = skel
        .maps
        .heads
        .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
        .map_err(|source| ProbeError::Map {
            map: "heads",
            source,
        })?
        .unwrap_or_default();
    Ok(per_cpu
        .iter()
        .map(|v| {
            v.get(..8)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_ne_bytes)
        })
        .collect())
}

/// A record the probe wrote, decoded.
#[derive(Debug, Clone, Copy)]
pub struct TxRecord(tx_record);

/// Why a probe record was not decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Shorter than its header claims or than a TX record.
    #[error("short record: {0} bytes")]
    Short(usize),
    /// A kind this agent does not know.
    #[error("unknown record kind {0}")]
    UnknownKind(u16),
}

impl TxRecord {
    /// Decode a probe record; never panics on bad input.
    pub fn decode(data: &[u8]) -> Result<Self, RecordError> {
        if data.len() < std::mem::size_of::<tx_record>() {
            return Err(RecordError::Short(data.len()));
        }
        // SAFETY: the length was checked; read_unaligned copes with any
        // alignment, and tx_record is plain old data (every bit pattern valid).
        let rec: tx_record = unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) };
        if rec.hdr.kind != RECORD_TX {
            return Err(RecordError::UnknownKind(rec.hdr.kind));
        }
        Ok(TxRecord(rec))
    }

    /// Raw monotonic stamp.
    pub fn mono_ns(&self) -> u64 {
        self.0.mono_ns
    }

    /// Stage value.
    pub fn stage(&self) -> u8 {
        self.0.stage
    }

    /// The wire event, with `global_ns` filled in by the caller's clock.
    pub fn to_event(&self, global_ns: u64) -> TxEvent {
        let r = &self.0;
        let mut comm = [0u8; 16];
        for (d, s) in comm.iter_mut().zip(r.comm.iter()) {
            *d = *s as u8;
        }
        TxEvent {
            mono_ns: r.mono_ns,
            global_ns,
            hw_ns: r.hw_ns,
            cookie: r.cookie,
            tskey: r.tskey,
            seq: r.seq,
            netns: r.netns,
            cpu: r.cpu,
            pid: r.pid,
            tid: r.tid,
            stage: r.stage,
            family: r.family,
            sport: r.sport,
            dport: r.dport,
            saddr: r.saddr,
            daddr: r.daddr,
            comm,
        }
    }
}

/// True when `btf` (a kernel BTF blob) names the kfunc BPF TX timestamping
/// needs (Linux >= 6.15). A string search is enough: the name is unique.
pub fn btf_has_tx_timestamping(btf: &Path) -> std::io::Result<bool> {
    let data = std::fs::read(btf)?;
    let needle = b"\0bpf_sock_ops_enable_tx_tstamp\0";
    Ok(data.windows(needle.len()).any(|w| w == needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> tx_record {
        tx_record {
            hdr: skel::types::record_hdr {
                kind: RECORD_TX,
                len: 112,
                commit: 1,
            },
            mono_ns: 5,
            cookie: 9,
            tskey: 77,
            stage: 2,
            family: 4,
            sport: 1,
            dport: 2,
            comm: [b'a' as i8; 16],
            ..Default::default()
        }
    }

    fn bytes(r: &tx_record) -> Vec<u8> {
        // SAFETY: tx_record is repr(C) plain data; we view its bytes.
        unsafe {
            std::slice::from_raw_parts((r as *const tx_record).cast::<u8>(), size_of::<tx_record>())
        }
        .to_vec()
    }

    #[test]
    fn decode_unaligned_and_convert() {
        let mut buf = vec![0u8];
        buf.extend(bytes(&sample()));
        let rec = TxRecord::decode(&buf[1..]).unwrap();
        let ev = rec.to_event(123);
        assert_eq!(
            (ev.mono_ns, ev.global_ns, ev.cookie, ev.tskey, ev.stage),
            (5, 123, 9, 77, 2)
        );
        assert_eq!(&ev.comm, b"aaaaaaaaaaaaaaaa");
    }

    #[test]
    fn decode_rejects_short_and_unknown() {
        let b = bytes(&sample());
        assert_eq!(
            TxRecord::decode(&b[..50]).unwrap_err(),
            RecordError::Short(50)
        );
        let mut s = sample();
        s.hdr.kind = 9;
        assert_eq!(
            TxRecord::decode(&bytes(&s)).unwrap_err(),
            RecordError::UnknownKind(9)
        );
    }

    #[test]
    fn btf_check_finds_kfunc_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let without = dir.path().join("old");
        std::fs::write(&without, b"\0bpf_sock_ops_cb_flags_set\0").unwrap();
        assert!(!btf_has_tx_timestamping(&without).unwrap());
        let with = dir.path().join("new");
        std::fs::write(&with, b"x\0bpf_sock_ops_enable_tx_tstamp\0y").unwrap();
        assert!(btf_has_tx_timestamping(&with).unwrap());
    }
}
