//! BPF probes. Each probe's BPF program is `ebpf/<name>.bpf.c` at the
//! workspace root (built by build.rs into a skeleton) and its Rust side is
//! one folder here: a [`core::ProbeKind`] (spec, decoder, counters) that the
//! one probe core (`core.rs`) turns into a loaded [`Probe`]; [`PROBES`] is
//! the registry `--probes` selects from. Adding a probe:
//! `ebpf/<name>.bpf.c`, a new folder `probes/<name>/` with its `mod.rs`
//! (a `ProbeKind` and its `SPEC = core::spec::<Kind>()`), its `mod` line
//! below and its line in [`PROBES`].
//!
//! The shared C headers are in `ebpf/include/`: `tracer.h` (records,
//! enums), `slot_ring.h` (the maps every probe has) and `kernel.h` (the few
//! kernel types the probes read).

pub mod core;
pub mod drops;
pub mod heads;
pub mod interface;
mod mapping;
pub mod memfd_slots;
pub mod rx;
/// The `--sample-every` rule, shared with the matcher through the codec
/// (the spec is `ebpf/include/sample.h`).
pub use tracer_codec::sample;
#[cfg(test)]
mod skb_flow;
pub mod slots;
pub mod tcp;
#[cfg(test)]
pub mod testing;
pub mod tx;

pub use interface::{
    Collector, OpenFn, Probe, ProbeConfig, ProbeCounters, ProbeError, ProbeEvent, ProbeSpec,
};
pub use slots::{Drained, RecordError};

/// Every probe this agent knows, in the order they are listed and loaded.
pub static PROBES: &[ProbeSpec] = &[tx::SPEC, rx::SPEC, drops::SPEC, tcp::SPEC];

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

    /// Every probe of the registry opens, loads, attaches, drains, counts,
    /// lists its programs and detaches through the probe core: the names the
    /// Rust side gives (programs, maps) are the C side's. Needs root and a
    /// cgroup v2 mount: without them it fails under CI=true and is
    /// counted as skipped elsewhere. The tx probe attaches to a cgroup of
    /// its own, with no process in it.
    #[test]
    fn every_probe_runs_through_the_core_as_root() {
        if !tracer_e2e::skip::require_root() {
            return;
        }
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
        let Some(root) = mounts
            .lines()
            .map(|l| l.split(' ').collect::<Vec<_>>())
            .find(|f| f.get(2) == Some(&"cgroup2"))
            .map(|f| std::path::PathBuf::from(f[1]))
        else {
            tracer_e2e::skip::skip("no cgroup v2 mount");
            return;
        };
        let cgroup = root.join(format!("ntr-probe-core-{}", std::process::id()));
        std::fs::create_dir(&cgroup).unwrap();
        let cfg = ProbeConfig {
            cgroup: cgroup.clone(),
            target_netns: 0,
            sample_every: 1,
            slots_per_cpu: 64,
            btf: "/sys/kernel/btf/vmlinux".into(),
            filter: Default::default(),
            self_traffic: Default::default(),
        };
        let mut ran = Vec::new();
        for spec in PROBES {
            if let Err(e) = (spec.check)(&cfg) {
                eprintln!("{} skipped: {e}", spec.name);
                continue;
            }
            let mut object = std::mem::MaybeUninit::uninit();
            let mut p = (spec.open)(&mut object, &cfg).unwrap();
            assert_eq!(p.name(), spec.name);
            p.attach().unwrap();
            assert!(!p.programs().is_empty(), "{}", spec.name);
            p.doorbell().unwrap();
            p.counters().unwrap();
            p.drain(&mut testing::Seen::default()).unwrap();
            p.detach();
            ran.push(spec.name);
        }
        std::fs::remove_dir(&cgroup).unwrap();
        assert!(ran.contains(&"drops") && ran.contains(&"tcp"), "{ran:?}");
    }
}
