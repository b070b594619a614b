//! How much CPU the kernel spends moving packets, per CPU and
//! [`Category`] (Netto-style accounting): NET_RX and NET_TX softirqs, and
//! socket send and receive calls charged only their own time. The BPF side
//! is `ebpf/cpucost.bpf.c` (hooks, design and blind spots in its header
//! comment) with its bookkeeping in `ebpf/include/cpucost.h`; here, loading
//! and attaching it ([`CpuCost::start`]) and reading its per-CPU totals
//! ([`CpuCost::read`]). Unlike the probes it writes no records: it is read,
//! not drained, so it does not go through the probe core.

mod reading;

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::PathBuf;
use std::time::Instant;

use libbpf_rs::{Link, MapCore, MapFlags, MapHandle, Object, ObjectBuilder};

pub use reading::{
    Anomalies, Category, CpuCostDelta, CpuCostReading, N_CATEGORIES, N_SOFTIRQS, SOFTIRQ_NAMES,
};

crate::bpf_skeleton!("cpucost");

use skel::types::{cc_category, cc_counter, cc_softirq, cpucost_cpu, rodata};

/// The compiled BPF object build.rs made from `ebpf/cpucost.bpf.c`, opened
/// from memory by [`CpuCost::start`] so that the loaded object is owned by
/// the [`CpuCost`] (the skeleton's would borrow storage from its caller);
/// the skeleton supplies the C types.
const OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cpucost.bpf.o"));

// The Rust categories and table sizes are cpucost.h's.
const _: () = {
    assert!(Category::NetRx as u32 == cc_category::CC_NET_RX.0);
    assert!(Category::NetTx as u32 == cc_category::CC_NET_TX.0);
    assert!(Category::SockSend as u32 == cc_category::CC_SOCK_SEND.0);
    assert!(Category::SockRecv as u32 == cc_category::CC_SOCK_RECV.0);
    assert!(N_CATEGORIES as u32 == cc_category::CC_CAT_MAX.0);
    assert!(N_SOFTIRQS as u32 == cc_softirq::CC_NR_VECTORS.0);
    assert!(cc_softirq::CC_NET_RX_SOFTIRQ.0 == 3 && cc_softirq::CC_NET_TX_SOFTIRQ.0 == 2);
    // Anomalies has a field per counter.
    assert!(cc_counter::CC_CTR_MAX.0 == 7);
};

/// The programs (name in the C source, tracepoint), in attach order: the
/// hook that ends an interval before the one that opens it, so that every
/// interval opened has its end seen; the task switch before the call
/// entry, so that a call opened can be kept across a switch. Detached in
/// the reverse order.
const PROGRAMS: [(&str, &str); 5] = [
    ("cc_softirq_exit_prog", "softirq_exit"),
    ("cc_softirq_entry_prog", "softirq_entry"),
    ("cc_sys_exit", "sys_exit"),
    ("cc_sched_switch", "sched_switch"),
    ("cc_sys_enter", "sys_enter"),
];

/// The tracepoints, for the check against the kernel's BTF.
const TRACEPOINTS: [&str; 5] = [
    PROGRAMS[0].1,
    PROGRAMS[1].1,
    PROGRAMS[2].1,
    PROGRAMS[3].1,
    PROGRAMS[4].1,
];

/// Why the accounting cannot start or be read, worded for the operator.
#[derive(Debug, thiserror::Error)]
pub enum CpuCostError {
    /// Missing privileges.
    #[error(
        "insufficient privileges: the CPU cost accounting loads BPF programs, which needs \
         CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN); missing: {}. Run as root (sudo) or \
         grant those capabilities",
        .missing.join(", ")
    )]
    Privileges {
        /// Names of the missing capabilities.
        missing: Vec<&'static str>,
    },
    /// The kernel lacks a tracepoint the accounting attaches to.
    #[error(
        "this kernel ({release}) lacks the tracepoint(s) {} the CPU cost accounting \
         attaches to (no btf_trace_* type in {btf}); it needs irq:softirq_entry/exit, \
         raw_syscalls:sys_enter/exit and sched:sched_switch as BTF tracepoints",
        .missing.join(", ")
    )]
    MissingHook {
        /// uname release.
        release: String,
        /// BTF file searched.
        btf: PathBuf,
        /// The missing tracepoints.
        missing: Vec<&'static str>,
    },
    /// No kernel BTF to check the hooks against.
    #[error("cannot read kernel BTF {btf} ({error}); the kernel needs CONFIG_DEBUG_INFO_BTF=y")]
    NoBtf {
        /// BTF file.
        btf: PathBuf,
        /// The OS error (in the message, where the operator reads it).
        error: std::io::Error,
    },
    /// The socket calls are recognised by x86_64 syscall numbers.
    #[error(
        "the CPU cost accounting recognises socket calls by their x86_64 syscall numbers; \
         this is {arch}"
    )]
    UnsupportedArch {
        /// std::env::consts::ARCH.
        arch: &'static str,
    },
    /// Opening or loading the BPF object failed (the verifier's log is in
    /// the source).
    #[error("loading the CPU cost accounting's BPF programs failed")]
    Load {
        /// The libbpf error.
        source: libbpf_rs::Error,
    },
    /// The object lacks a program or map this module names (the C and the
    /// Rust disagree).
    #[error("the CPU cost accounting's BPF object has no {what} named {name}")]
    Missing {
        /// "map" or "program".
        what: &'static str,
        /// The name looked for.
        name: &'static str,
    },
    /// Attaching one program failed.
    #[error(
        "attaching the CPU cost accounting's program {program} to tracepoint {tracepoint} failed"
    )]
    Attach {
        /// Program name.
        program: &'static str,
        /// Tracepoint name.
        tracepoint: &'static str,
        /// The libbpf error.
        source: libbpf_rs::Error,
    },
    /// Reading the per-CPU totals failed.
    #[error("reading the CPU cost accounting's per-CPU totals failed")]
    Read {
        /// The libbpf error.
        source: libbpf_rs::Error,
    },
}

/// How the accounting runs.
#[derive(Debug, Clone)]
pub struct CpuCostConfig {
    /// A process (tgid) whose socket calls are not counted, such as the
    /// agent itself (`std::process::id()`), which never traces itself
    /// unless asked; None counts every process. Softirqs are per CPU and
    /// always counted, whoever raised them.
    pub exclude_pid: Option<u32>,
    /// The kernel BTF the hooks are checked against.
    pub btf: PathBuf,
}

impl Default for CpuCostConfig {
    fn default() -> Self {
        CpuCostConfig {
            exclude_pid: None,
            btf: PathBuf::from("/sys/kernel/btf/vmlinux"),
        }
    }
}

/// The accounting, loaded and attached. Dropping it detaches every program
/// and frees the maps.
#[derive(Debug)]
pub struct CpuCost {
    /// In attach order; detached last to first by Drop, before the object
    /// goes.
    links: Vec<Link>,
    /// The per-CPU state and totals (`cpus` in the C).
    cpus: MapHandle,
    object: Object,
    started: Instant,
}

impl CpuCost {
    /// Check, open, load and attach every program, counting every process.
    pub fn start() -> Result<Self, CpuCostError> {
        Self::start_with(&CpuCostConfig::default())
    }

    /// As [`CpuCost::start`], as `cfg` says.
    pub fn start_with(cfg: &CpuCostConfig) -> Result<Self, CpuCostError> {
        if std::env::consts::ARCH != "x86_64" {
            return Err(CpuCostError::UnsupportedArch {
                arch: std::env::consts::ARCH,
            });
        }
        let missing = crate::preflight::missing_bpf_capabilities();
        if !missing.is_empty() {
            return Err(CpuCostError::Privileges { missing });
        }
        match crate::preflight::btf_missing_tracepoints(&cfg.btf, &TRACEPOINTS) {
            Ok(missing) if missing.is_empty() => {}
            Ok(missing) => {
                return Err(CpuCostError::MissingHook {
                    release: crate::preflight::kernel_release(),
                    btf: cfg.btf.clone(),
                    missing,
                })
            }
            Err(error) => {
                return Err(CpuCostError::NoBtf {
                    btf: cfg.btf.clone(),
                    error,
                })
            }
        }
        let object = load(cfg)?;
        let map = object
            .maps()
            .find(|m| m.name() == "cpus")
            .ok_or(CpuCostError::Missing {
                what: "map",
                name: "cpus",
            })?;
        let cpus = MapHandle::try_from(&map).map_err(|source| CpuCostError::Read { source })?;
        let mut cost = CpuCost {
            links: Vec::with_capacity(PROGRAMS.len()),
            cpus,
            object,
            started: Instant::now(),
        };
        for (program, tracepoint) in PROGRAMS {
            let prog = cost
                .object
                .progs_mut()
                .find(|p| p.name() == program)
                .ok_or(CpuCostError::Missing {
                    what: "program",
                    name: program,
                })?;
            let link = prog.attach().map_err(|source| CpuCostError::Attach {
                program,
                tracepoint,
                source,
            })?;
            cost.links.push(link);
        }
        // The totals count from here on (the maps start at zero).
        cost.started = Instant::now();
        Ok(cost)
    }

    /// The per-CPU totals now, cumulative since [`CpuCost::started`].
    pub fn read(&self) -> Result<CpuCostReading, CpuCostError> {
        read_totals(&self.cpus)
    }

    /// A reader of the totals that another thread can own (the `/metrics`
    /// endpoint): a handle of the map only, valid while this is attached
    /// (afterwards it reads the last totals).
    pub fn reader(&self) -> Result<CpuCostReader, CpuCostError> {
        let cpus =
            MapHandle::try_from(&self.cpus).map_err(|source| CpuCostError::Read { source })?;
        Ok(CpuCostReader { cpus })
    }

    /// The names of its programs (as in the C source and in `bpftool prog`,
    /// truncated there to 15 bytes) with their tracepoints, in attach order.
    pub fn program_names() -> [(&'static str, &'static str); 5] {
        PROGRAMS
    }

    /// When the last program was attached: the totals count from about
    /// here (from the first attach, a few ms earlier, for the first hooks).
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Its loaded programs, for their ids and bpf_stats run times
    /// ([`crate::stats::bpf_prog_info`]), in the order of
    /// [`CpuCost::program_names`].
    pub fn programs(&self) -> Vec<BorrowedFd<'_>> {
        PROGRAMS
            .iter()
            .filter_map(|(name, _)| self.object.progs().find(|p| p.name() == *name))
            .map(|p| {
                let fd = p.as_fd().as_raw_fd();
                // SAFETY: the fd is the program's, owned by `self.object`;
                // it stays open until the object is dropped, which the
                // borrow of `self` prevents.
                unsafe { BorrowedFd::borrow_raw(fd) }
            })
            .collect()
    }
}

impl Drop for CpuCost {
    fn drop(&mut self) {
        // Reverse attach order: the call entry first, the ends last.
        while let Some(link) = self.links.pop() {
            drop(link);
        }
    }
}

/// Reads the accounting's totals through a handle of its `cpus` map.
#[derive(Debug)]
pub struct CpuCostReader {
    cpus: MapHandle,
}

impl CpuCostReader {
    /// As [`CpuCost::read`].
    pub fn read(&self) -> Result<CpuCostReading, CpuCostError> {
        read_totals(&self.cpus)
    }
}

/// The per-CPU totals in `cpus` now.
fn read_totals(cpus: &MapHandle) -> Result<CpuCostReading, CpuCostError> {
    let values = cpus
        .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
        .map_err(|source| CpuCostError::Read { source })?;
    let taken = Instant::now();
    let values = values.ok_or_else(|| CpuCostError::Read {
        source: libbpf_rs::Error::from(std::io::Error::from(std::io::ErrorKind::NotFound)),
    })?;
    let cpus: Vec<cpucost_cpu> = values.iter().map(|v| parse_cpu(v)).collect();
    Ok(reading_of(&cpus, taken))
}

/// Open the object, write the configuration into its `.rodata`, load it.
fn load(cfg: &CpuCostConfig) -> Result<Object, CpuCostError> {
    let load_err = |source| CpuCostError::Load { source };
    let mut open = ObjectBuilder::default()
        .open_memory(OBJECT)
        .map_err(load_err)?;
    let mut ro = open
        .maps_mut()
        .find(|m| m.name().to_string_lossy().ends_with(".rodata"))
        .ok_or(CpuCostError::Missing {
            what: "map",
            name: ".rodata",
        })?;
    let init = ro.initial_value_mut().ok_or(CpuCostError::Missing {
        what: "map",
        name: ".rodata",
    })?;
    write_rodata(init, cfg).ok_or(CpuCostError::Missing {
        what: "map",
        name: ".rodata",
    })?;
    open.load().map_err(load_err)
}

/// Write the settings into `.rodata`'s initial bytes (laid out as the
/// skeleton's `rodata`); None if they are too short for it.
fn write_rodata(init: &mut [u8], cfg: &CpuCostConfig) -> Option<()> {
    if init.len() < size_of::<rodata>() {
        return None;
    }
    let off = std::mem::offset_of!(rodata, exclude_tgid);
    let tgid = cfg.exclude_pid.unwrap_or(0);
    init.get_mut(off..off + 4)?
        .copy_from_slice(&tgid.to_ne_bytes());
    Some(())
}

/// One CPU's value of the `cpus` map; zeros if short (never: the kernel
/// hands back whole values).
fn parse_cpu(bytes: &[u8]) -> cpucost_cpu {
    if bytes.len() < size_of::<cpucost_cpu>() {
        return cpucost_cpu::default();
    }
    // SAFETY: cpucost_cpu is the skeleton's copy of a C struct of integers
    // and arrays of integers, so every bit pattern is a valid value; the
    // length is checked above and read_unaligned needs no alignment.
    unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<cpucost_cpu>()) }
}

/// The reading the CPUs' values make.
fn reading_of(cpus: &[cpucost_cpu], taken: Instant) -> CpuCostReading {
    let ctr = |i: cc_counter| -> u64 { cpus.iter().map(|c| c.counters[i.0 as usize]).sum() };
    CpuCostReading {
        per_cpu: cpus.iter().map(|c| c.ns).collect(),
        taken,
        softirq_per_cpu: cpus.iter().map(|c| c.softirq_ns).collect(),
        softirq_runs_per_cpu: cpus.iter().map(|c| c.softirq_runs).collect(),
        anomalies: Anomalies {
            calls_unseen: ctr(cc_counter::CC_CTR_CALL_UNSEEN),
            calls_reopened: ctr(cc_counter::CC_CTR_CALL_REOPENED),
            softirqs_unmatched: ctr(cc_counter::CC_CTR_SOFTIRQ_UNMATCHED),
            nested: ctr(cc_counter::CC_CTR_NESTED),
            stash_lost: ctr(cc_counter::CC_CTR_STASH_LOST),
            switch_in_softirq: ctr(cc_counter::CC_CTR_SWITCH_IN_SOFTIRQ),
            untraced_switches: ctr(cc_counter::CC_CTR_UNTRACED_SWITCH),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Runs a script of one CPU's events through ebpf/include/cpucost.h,
    /// compiled for the host: `E vec t` softirq entry, `X vec t` its exit,
    /// `S call t` a socket call's entry (1 send, 2 recv), `R t` its exit,
    /// `O t` a switch away (prints the call to keep), `I call t` a switch
    /// in, `P` prints the totals and counters, `Z` starts afresh.
    const C_EVAL: &str = r#"
#include "cpucost.h"
int main(void) {
	struct cpucost_cpu c;
	unsigned a;
	unsigned long long t, task;
	char op;
	memset(&c, 0, sizeof(c));
	while (scanf(" %c", &op) == 1) {
		switch (op) {
		case 'E': if (scanf("%u %llu", &a, &t) != 2) return 1; cc_softirq_entry(&c, a, t); break;
		case 'X': if (scanf("%u %llu", &a, &t) != 2) return 1; cc_softirq_exit(&c, a, t); break;
		case 'S': if (scanf("%u %llu %llu", &a, &t, &task) != 3) return 1; cc_call_enter(&c, a, t, task); break;
		case 'R': if (scanf("%llu %llu", &t, &task) != 2) return 1; if (!cc_call_exit(&c, t, task)) printf("stale\n"); break;
		case 'O': if (scanf("%llu %llu", &t, &task) != 2) return 1; printf("keep %u\n", cc_switch_out(&c, t, task)); break;
		case 'I': if (scanf("%u %llu %llu", &a, &t, &task) != 3) return 1; cc_switch_in(&c, a, t, task); break;
		case 'P':
			printf("ns");
			for (int i = 0; i < CC_CAT_MAX; i++) printf(" %llu", c.ns[i]);
			printf(" softirq");
			for (int i = 0; i < CC_NR_VECTORS; i++) printf(" %llu", c.softirq_ns[i]);
			printf(" counters");
			for (int i = 0; i < CC_CTR_MAX; i++) printf(" %llu", c.counters[i]);
			printf("\n");
			break;
		case 'Z': memset(&c, 0, sizeof(c)); break;
		default: return 1;
		}
	}
	return 0;
}
"#;

    /// Counters of a CPU (`enum cc_counter`).
    const N_COUNTERS: usize = cc_counter::CC_CTR_MAX.0 as usize;

    /// The totals a script ends with.
    #[derive(Debug, PartialEq, Eq)]
    struct Totals {
        ns: [u64; N_CATEGORIES],
        softirq: [u64; N_SOFTIRQS],
        counters: [u64; N_COUNTERS],
    }

    /// The outputs of `script` (+ a final `P`): its `keep N` and `stale`
    /// lines, and the totals.
    fn run(script: &str) -> (Vec<String>, Totals) {
        run_many(&[script.to_owned()]).pop().unwrap()
    }

    /// [`run`] of each script, in one run of the program (one compile).
    fn run_many(scripts: &[String]) -> Vec<(Vec<String>, Totals)> {
        let input: String = scripts.iter().map(|s| format!("{s}\nP\nZ\n")).collect();
        let out = crate::host_c::run_header_program(C_EVAL, &input);
        let mut results = Vec::new();
        let mut events = Vec::new();
        for line in out.lines() {
            if line.starts_with("keep ") || line == "stale" {
                events.push(line.to_owned());
                continue;
            }
            let v: Vec<u64> = line
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            assert_eq!(v.len(), N_CATEGORIES + N_SOFTIRQS + N_COUNTERS, "{line}");
            let totals = Totals {
                ns: v[..4].try_into().unwrap(),
                softirq: v[4..14].try_into().unwrap(),
                counters: v[14..].try_into().unwrap(),
            };
            results.push((std::mem::take(&mut events), totals));
        }
        assert_eq!(results.len(), scripts.len());
        results
    }

    const RX: usize = Category::NetRx as usize;
    const TX: usize = Category::NetTx as usize;
    const SEND: usize = Category::SockSend as usize;
    const RECV: usize = Category::SockRecv as usize;
    const NESTED: usize = cc_counter::CC_CTR_NESTED.0 as usize;
    const UNSEEN: usize = cc_counter::CC_CTR_CALL_UNSEEN.0 as usize;
    const UNMATCHED: usize = cc_counter::CC_CTR_SOFTIRQ_UNMATCHED.0 as usize;
    const REOPENED: usize = cc_counter::CC_CTR_CALL_REOPENED.0 as usize;
    const UNTRACED: usize = cc_counter::CC_CTR_UNTRACED_SWITCH.0 as usize;

    // Scripts: task 1 and task 2 are the tasks; `S call t task`, `R t
    // task`, `O t prev`, `I call t next` (see C_EVAL).

    #[test]
    fn a_softirq_inside_a_call_is_charged_to_itself_only() {
        // sendto 100..1000 with the receiver's NET_RX at 300..500 and a
        // timer softirq at 700..750 inside it.
        let (_, t) = run("S 1 100 1\nE 3 300\nX 3 500\nE 1 700\nX 1 750\nR 1000 1");
        assert_eq!(t.ns, [200, 0, 900 - 200 - 50, 0]);
        assert_eq!(t.softirq[3], 200);
        assert_eq!(t.softirq[1], 50);
        assert_eq!(t.counters, [0; N_COUNTERS]);
        let (_, t) = run("S 2 0 1\nE 2 10\nX 2 30\nR 100 1");
        assert_eq!(t.ns, [0, 20, 0, 80]);
    }

    #[test]
    fn a_switch_closes_the_call_and_the_task_reopens_it() {
        // Task 1's recvfrom blocks at 100; task 2 runs (no call) 100..1000;
        // task 1 comes back with its call and returns at 1100.
        let (ev, t) = run("S 2 0 1\nO 100 1\nI 0 100 2\nO 1000 2\nI 2 1000 1\nR 1100 1");
        assert_eq!(ev, ["keep 2", "keep 0"]);
        assert_eq!(t.ns, [0, 0, 0, 200]);
        assert_eq!(t.counters, [0; N_COUNTERS]);
        // A softirq while the other task runs is not the call's.
        let (_, t) =
            run("S 2 0 1\nO 100 1\nI 0 100 2\nE 3 400\nX 3 600\nO 1000 2\nI 2 1000 1\nR 1100 1");
        assert_eq!(t.ns, [200, 0, 0, 200]);
    }

    #[test]
    fn what_began_before_the_attach_is_not_charged() {
        // A call's exit and a softirq's exit with no entry seen.
        let (_, t) = run("R 100 1\nX 3 200\nS 1 300 1\nR 400 1");
        assert_eq!(t.ns, [0, 0, 100, 0]);
        assert_eq!(t.softirq, [0; N_SOFTIRQS]);
        assert_eq!((t.counters[UNSEEN], t.counters[UNMATCHED]), (1, 1));
        // A call whose exit was missed: the new one starts afresh.
        let (_, t) = run("S 1 0 1\nE 3 10\nX 3 20\nS 2 50 1\nR 80 1");
        assert_eq!(t.ns, [10, 0, 10, 30]);
        assert_eq!(t.counters[REOPENED], 1);
    }

    #[test]
    fn an_unreported_switch_hands_no_call_to_the_next_task() {
        // Task 1 blocks in recvfrom (kept); task 2 runs and sends; task 1
        // runs again with no switch reported and returns: task 2's send
        // ends at nothing task 2 did, task 1's recv is unseen and its kept
        // call stale.
        let (ev, t) = run("S 2 0 1\nO 10 1\nI 0 10 2\nS 1 20 2\nR 500 1");
        assert_eq!(ev, ["keep 2", "stale"]);
        assert_eq!(t.ns, [0, 0, 0, 10]);
        assert_eq!((t.counters[UNTRACED], t.counters[UNSEEN]), (1, 1));
        // The same at a call's entry and at a switch: the other task's
        // call is neither charged on nor kept for prev (three unreported
        // switches: to task 1, to task 2, to task 1).
        let (ev, t) = run("S 1 0 2\nS 2 100 1\nR 150 1\nS 1 200 2\nO 300 1");
        assert_eq!(ev, ["keep 0"]);
        assert_eq!(t.ns, [0, 0, 0, 50]);
        assert_eq!(t.counters[UNTRACED], 3);
        // The first event on a CPU adopts the running task silently.
        let (_, t) = run("S 1 0 7\nR 10 7");
        assert_eq!(t.counters, [0; N_COUNTERS]);
    }

    #[test]
    fn nesting_never_charges_the_same_time_twice() {
        // sys_exit read the clock at 500, then a softirq 510..600 ran
        // before it updated the state: the call ends at 510, not at 500
        // minus the softirq.
        let (_, t) = run("S 1 100 1\nE 3 510\nX 3 600\nR 500 1");
        assert_eq!(t.ns, [90, 0, 410, 0]);
        assert_eq!(t.counters[NESTED], 1);
        // sys_enter read 100, a softirq 110..200 ran before it stored:
        // the call starts at the softirq's end.
        let (_, t) = run("E 3 110\nX 3 200\nS 1 100 1\nR 300 1");
        assert_eq!(t.ns, [90, 0, 100, 0]);
        assert_eq!(t.counters[NESTED], 0);
    }

    #[test]
    fn vectors_past_the_table_pause_but_are_not_kept() {
        let (_, t) = run("S 1 0 1\nE 12 10\nX 12 20\nR 30 1");
        assert_eq!(t.ns, [0, 0, 20, 0]);
        assert_eq!(t.softirq, [0; N_SOFTIRQS]);
    }

    /// One CPU, three tasks (1, 2, 3), random events at random times
    /// (every switch reported), checked against a model that charges each
    /// stretch between two events to what ran in it; and the sum never
    /// exceeds the time elapsed.
    #[test]
    fn random_timelines_match_a_model() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut cases = Vec::new();
        for _ in 0..200 {
            let mut script = String::new();
            let mut want = Totals {
                ns: [0; N_CATEGORIES],
                softirq: [0; N_SOFTIRQS],
                counters: [0; N_COUNTERS],
            };
            let mut calls = [0u32; 3]; // per task: 0, 1 send, 2 recv
            let mut cur = 0usize;
            let mut softirq: Option<u32> = None;
            let mut events = Vec::new();
            let mut t = 1000u64;
            for _ in 0..300 {
                let dt = rng.random_range(1..100u64);
                // The stretch [t, t + dt) belongs to what runs now.
                match softirq {
                    Some(v) => {
                        if (v as usize) < N_SOFTIRQS {
                            want.softirq[v as usize] += dt;
                        }
                        match v {
                            3 => want.ns[RX] += dt,
                            2 => want.ns[TX] += dt,
                            _ => {}
                        }
                    }
                    None => match calls[cur] {
                        1 => want.ns[SEND] += dt,
                        2 => want.ns[RECV] += dt,
                        _ => {}
                    },
                }
                t += dt;
                let task = cur + 1;
                if let Some(v) = softirq.take() {
                    script.push_str(&format!("X {v} {t}\n"));
                    continue;
                }
                match rng.random_range(0..4) {
                    0 => {
                        let v = rng.random_range(0..12u32);
                        softirq = Some(v);
                        script.push_str(&format!("E {v} {t}\n"));
                    }
                    1 if calls[cur] == 0 => {
                        calls[cur] = rng.random_range(1..=2);
                        script.push_str(&format!("S {} {t} {task}\n", calls[cur]));
                    }
                    1 => {
                        calls[cur] = 0;
                        script.push_str(&format!("R {t} {task}\n"));
                    }
                    _ => {
                        events.push(format!("keep {}", calls[cur]));
                        cur = (cur + rng.random_range(1..3)) % 3;
                        script.push_str(&format!(
                            "O {t} {task}\nI {} {t} {}\n",
                            calls[cur],
                            cur + 1
                        ));
                    }
                }
            }
            cases.push((script, events, want, t - 1000));
        }
        let scripts: Vec<String> = cases.iter().map(|c| c.0.clone()).collect();
        for ((got_events, got), (script, events, want, elapsed)) in
            run_many(&scripts).into_iter().zip(&cases)
        {
            assert_eq!(&got_events, events);
            assert_eq!(&got, want, "{script}");
            let softirqs_and_calls: u64 =
                got.softirq.iter().sum::<u64>() + got.ns[SEND] + got.ns[RECV];
            assert!(softirqs_and_calls <= *elapsed);
        }
    }

    #[test]
    fn a_cpu_value_reads_into_a_reading() {
        let mut c = cpucost_cpu {
            ns: [1, 2, 3, 4],
            ..Default::default()
        };
        c.softirq_ns[3] = 1;
        c.counters[UNSEEN] = 5;
        c.counters[cc_counter::CC_CTR_STASH_LOST.0 as usize] = 2;
        // SAFETY: a plain C struct of integers viewed as its bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                std::ptr::from_ref(&c).cast::<u8>(),
                size_of::<cpucost_cpu>(),
            )
        };
        let mut odd = vec![0u8];
        odd.extend_from_slice(bytes);
        let parsed = parse_cpu(&odd[1..]);
        assert_eq!(parsed.ns, [1, 2, 3, 4]);
        assert_eq!(parse_cpu(&odd[1..9]).ns, [0; 4]);
        let r = reading_of(&[parsed, parsed], Instant::now());
        assert_eq!(r.per_cpu, vec![[1, 2, 3, 4]; 2]);
        assert_eq!(r.total(Category::SockRecv), 8);
        assert_eq!(r.softirq_total(3), 2);
        assert_eq!(r.anomalies.calls_unseen, 10);
        assert_eq!(r.anomalies.stash_lost, 4);
    }

    #[test]
    fn the_configuration_lands_in_rodata() {
        let mut init = vec![0u8; size_of::<rodata>()];
        let cfg = CpuCostConfig {
            exclude_pid: Some(0x0102_0304),
            ..CpuCostConfig::default()
        };
        write_rodata(&mut init, &cfg).unwrap();
        let off = std::mem::offset_of!(rodata, exclude_tgid);
        assert_eq!(init[off..off + 4], 0x0102_0304u32.to_ne_bytes());
        assert!(write_rodata(&mut [], &cfg).is_none());
    }

    #[test]
    fn errors_say_what_to_do() {
        let e = CpuCostError::Privileges {
            missing: vec!["CAP_BPF", "CAP_PERFMON"],
        };
        assert!(e
            .to_string()
            .contains("missing: CAP_BPF, CAP_PERFMON. Run as root"));
        let e = CpuCostError::MissingHook {
            release: "5.4".into(),
            btf: "/sys/kernel/btf/vmlinux".into(),
            missing: vec!["sched_switch"],
        };
        assert!(e
            .to_string()
            .contains("(5.4) lacks the tracepoint(s) sched_switch"));
    }

    #[test]
    fn a_missing_btf_file_is_reported_before_any_load() {
        let cfg = CpuCostConfig {
            btf: "/nonexistent/vmlinux".into(),
            ..CpuCostConfig::default()
        };
        // Without privileges the check stops earlier, with its own error.
        match CpuCost::start_with(&cfg) {
            Err(CpuCostError::NoBtf { btf, .. }) => assert_eq!(btf, cfg.btf),
            Err(CpuCostError::Privileges { .. }) => {}
            other => panic!("{other:?}"),
        }
    }
}
