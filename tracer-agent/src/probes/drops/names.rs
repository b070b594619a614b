//! Names the drops probe attaches to its numbers, resolved once per run on
//! this host: drop reason names from the running kernel's BTF
//! (`enum skb_drop_reason`), so a newer kernel's reasons show by name with
//! no table to update here, and kernel code addresses from /proc/kallsyms.

use std::collections::HashMap;
use std::path::Path;

use libbpf_rs::btf::{types::Enum, Btf};
use tracer_codec::drop::{padded, DROP_LOCATION_SYM_LEN};

/// Prefix the kernel puts before every drop reason but two (`SKB_CONSUMED`,
/// `SKB_NOT_DROPPED_YET`); the tracepoint prints names without it.
const REASON_PREFIX: &str = "SKB_DROP_REASON_";

/// The kernel's name of a drop reason enumerator, as the tracepoint prints
/// it: without [`REASON_PREFIX`].
pub fn short_reason_name(enumerator: &str) -> &str {
    enumerator.strip_prefix(REASON_PREFIX).unwrap_or(enumerator)
}

/// Drop reason numbers and their names.
#[derive(Debug, Clone, Default)]
pub struct DropReasons(HashMap<u32, String>);

/// Why the reason names could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReasonsError {
    /// The BTF file could not be parsed.
    #[error("reading kernel BTF {path}")]
    Btf {
        /// The file.
        path: std::path::PathBuf,
        /// The libbpf error.
        source: libbpf_rs::Error,
    },
    /// The BTF has no `enum skb_drop_reason` (kernel older than 5.17).
    #[error("kernel BTF {0} has no enum skb_drop_reason")]
    NoEnum(std::path::PathBuf),
}

impl DropReasons {
    /// Read `enum skb_drop_reason` from a kernel BTF file.
    pub fn from_btf(path: &Path) -> Result<Self, ReasonsError> {
        let btf = Btf::from_path(path).map_err(|source| ReasonsError::Btf {
            path: path.to_owned(),
            source,
        })?;
        let e: Enum<'_> = btf
            .type_by_name("skb_drop_reason")
            .ok_or_else(|| ReasonsError::NoEnum(path.to_owned()))?;
        Ok(Self::from_enumerators(e.iter().filter_map(|m| {
            Some((m.name?.to_str()?.to_owned(), u32::try_from(m.value).ok()?))
        })))
    }

    /// The table from (enumerator name, value) pairs. Marker enumerators
    /// that are not reasons (`..._MAX`, the subsystem mask) are left out;
    /// the first name of a value wins.
    pub fn from_enumerators(it: impl IntoIterator<Item = (String, u32)>) -> Self {
        let mut m = HashMap::new();
        for (name, value) in it {
            if name == "SKB_DROP_REASON_MAX" || name == "SKB_DROP_REASON_SUBSYS_MASK" {
                continue;
            }
            m.entry(value)
                .or_insert_with(|| short_reason_name(&name).to_owned());
        }
        DropReasons(m)
    }

    /// The name of `reason`, if the kernel has one.
    pub fn name(&self, reason: u32) -> Option<&str> {
        self.0.get(&reason).map(String::as_str)
    }

    /// Number of named reasons.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when no reason is named.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Kernel symbols sorted by address, for `symbol+0xoff` lookups.
#[derive(Debug, Clone, Default)]
pub struct Kallsyms {
    syms: Vec<(u64, String)>,
}

impl Kallsyms {
    /// Read /proc/kallsyms (addresses are zero unless read as root, or with
    /// kptr_restrict 0: the table is then empty and nothing resolves).
    pub fn load() -> std::io::Result<Self> {
        Ok(Self::parse(&std::fs::read_to_string("/proc/kallsyms")?))
    }

    /// Parse kallsyms text (`address type name [module]` per line). Only
    /// code symbols (types t, T, w, W) are kept: a drop location is code.
    pub fn parse(text: &str) -> Self {
        let mut syms: Vec<(u64, String)> = text
            .lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                let addr = u64::from_str_radix(it.next()?, 16).ok()?;
                let ty = it.next()?;
                let name = it.next()?;
                (addr != 0 && matches!(ty, "t" | "T" | "w" | "W")).then(|| (addr, name.to_owned()))
            })
            .collect();
        syms.sort_by_key(|(a, _)| *a);
        Kallsyms { syms }
    }

    /// `symbol+0xoff` of the symbol holding `addr` (the last symbol at or
    /// below it), `None` below the first symbol or with an empty table.
    pub fn symbolize(&self, addr: u64) -> Option<String> {
        let i = self.syms.partition_point(|(a, _)| *a <= addr);
        let (start, name) = self.syms.get(i.checked_sub(1)?)?;
        Some(format!("{name}+{:#x}", addr - start))
    }

    /// Number of symbols kept.
    pub fn len(&self) -> usize {
        self.syms.len()
    }

    /// True when nothing can be resolved.
    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }
}

/// Slots of [`LocationNames`]: more than the call sites a workload drops at.
const LOCATION_SLOTS: usize = 64;

/// `symbol+0xoff` of recent drop locations, padded as the wire carries
/// them, in a table direct-mapped by address. A workload drops at a handful
/// of call sites, and resolving one (a binary search over every kernel
/// symbol, then formatting it) cost more than the rest of a drop event:
/// 11 % of the agent's CPU at `--sample-every 100` in bench/rx-overhead.sh,
/// where most events are drops.
#[derive(Debug)]
pub struct LocationNames {
    slots: Box<[(u64, [u8; DROP_LOCATION_SYM_LEN])]>,
}

impl Default for LocationNames {
    fn default() -> Self {
        Self::new()
    }
}

impl LocationNames {
    /// An empty table. Address 0 has no name, which is what an empty slot
    /// holds.
    pub fn new() -> Self {
        LocationNames {
            slots: vec![(0, [0; DROP_LOCATION_SYM_LEN]); LOCATION_SLOTS].into_boxed_slice(),
        }
    }

    /// The padded name of `addr`, resolved through `syms` when its slot
    /// holds another address.
    pub fn name(&mut self, syms: &Kallsyms, addr: u64) -> [u8; DROP_LOCATION_SYM_LEN] {
        // Multiplicative hashing: nearby call sites land in different slots.
        let shift = 64 - LOCATION_SLOTS.trailing_zeros();
        let i = (addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> shift) as usize;
        let slot = &mut self.slots[i];
        if slot.0 != addr {
            *slot = (addr, padded(&syms.symbolize(addr).unwrap_or_default()));
        }
        slot.1
    }
}

/// Reason and location names of this host, resolved once per run.
#[derive(Debug, Clone, Default)]
pub struct Names {
    /// `enum skb_drop_reason` of the running kernel.
    pub reasons: DropReasons,
    /// /proc/kallsyms.
    pub kallsyms: Kallsyms,
}

impl Names {
    /// Read both; either one missing leaves its names empty (events then
    /// carry numbers only), with a warning: drops are still worth seeing.
    pub fn load(btf: &Path) -> Self {
        let reasons = DropReasons::from_btf(btf).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "drop reasons will have no names");
            DropReasons::default()
        });
        let kallsyms = Kallsyms::load().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot read /proc/kallsyms: drop locations stay addresses");
            Kallsyms::default()
        });
        if kallsyms.is_empty() {
            tracing::warn!(
                "/proc/kallsyms shows no addresses (not root?): drop locations stay addresses"
            );
        }
        Names { reasons, kallsyms }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_the_prefix_only_where_there_is_one() {
        assert_eq!(short_reason_name("SKB_DROP_REASON_NO_SOCKET"), "NO_SOCKET");
        assert_eq!(short_reason_name("SKB_CONSUMED"), "SKB_CONSUMED");
    }

    #[test]
    fn table_skips_markers_and_keeps_the_first_name() {
        let r = DropReasons::from_enumerators([
            ("SKB_CONSUMED".to_owned(), 1),
            ("SKB_DROP_REASON_NO_SOCKET".to_owned(), 3),
            ("SKB_DROP_REASON_ALIAS".to_owned(), 3),
            ("SKB_DROP_REASON_MAX".to_owned(), 128),
        ]);
        assert_eq!(r.name(3), Some("NO_SOCKET"));
        assert_eq!(r.name(1), Some("SKB_CONSUMED"));
        assert_eq!(r.name(128), None);
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn reads_this_kernels_reasons() {
        let path = Path::new("/sys/kernel/btf/vmlinux");
        if !path.exists() {
            return; // no kernel BTF on this build host
        }
        let r = DropReasons::from_btf(path).unwrap();
        assert_eq!(r.name(2), Some("NOT_SPECIFIED"));
        assert!(r.len() > 50, "{} reasons", r.len());
        let want = ["NO_SOCKET", "NETFILTER_DROP"];
        for w in want {
            assert!((0..1000).any(|v| r.name(v) == Some(w)), "{w} missing");
        }
    }

    #[test]
    fn cached_location_names_are_the_resolved_ones() {
        let k = Kallsyms::parse(
            "ffffffff81000000 T a_fn\n\
             ffffffff81000100 T b_fn\n\
             ffffffff81002000 t c_fn\n",
        );
        let mut names = LocationNames::new();
        // 200 addresses in 64 slots: hits, misses and evictions, in an
        // order that revisits them; 0 and an address below every symbol
        // have no name.
        let addrs: Vec<u64> = (0..200u64)
            .map(|i| 0xffff_ffff_8100_0000 + i * 0x29)
            .chain([0, 0x1000])
            .collect();
        let mut x = 7usize;
        for _ in 0..5000 {
            x = (x * 1_103_515_245 + 12_345) % 2_147_483_648;
            let a = addrs[x % addrs.len()];
            let want: [u8; DROP_LOCATION_SYM_LEN] = padded(&k.symbolize(a).unwrap_or_default());
            assert_eq!(names.name(&k, a), want, "{a:#x}");
        }
        assert_eq!(names.name(&k, 0), [0; DROP_LOCATION_SYM_LEN]);
    }

    #[test]
    fn symbolizes_by_the_enclosing_symbol() {
        let k = Kallsyms::parse(
            "ffffffff81000100 T b_fn\n\
             ffffffff81000000 T a_fn\n\
             ffffffff81000080 D some_data\n\
             0000000000000000 T hidden\n\
             ffffffff81000200 t c_fn\t[mod]\n\
             garbage line\n",
        );
        assert_eq!(k.len(), 3);
        assert_eq!(k.symbolize(0xffffffff81000000).as_deref(), Some("a_fn+0x0"));
        assert_eq!(
            k.symbolize(0xffffffff810000ff).as_deref(),
            Some("a_fn+0xff")
        );
        assert_eq!(k.symbolize(0xffffffff81000105).as_deref(), Some("b_fn+0x5"));
        assert_eq!(
            k.symbolize(0xffffffff81000300).as_deref(),
            Some("c_fn+0x100")
        );
        assert_eq!(k.symbolize(0xffffffff80ffffff), None);
        assert_eq!(Kallsyms::default().symbolize(0x1234), None);
    }
}
