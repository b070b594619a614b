//! Sampling by TCP byte range (`--sample-every N`): the Rust twin of
//! `bpf/include/sample.h`, which specifies the rule the tx and rx probes
//! apply in BPF (read it there). The agent takes the threshold it writes into
//! each probe's `.rodata` from here; the tests below compile the header with
//! the host's C compiler and require both to agree bit for bit.

/// A granule is `1 << GRANULE_SHIFT` bytes of one direction's sequence space.
pub const GRANULE_SHIFT: u32 = 16;
/// Longest range (in granules) checked one by one; longer ones are kept.
pub const MAX_GRANULES: u32 = 16;
/// Threshold that keeps everything (`--sample-every 1`).
pub const ALL: u64 = 1 << 32;

/// Threshold for one in `every`: `nt_sample_threshold`.
pub fn threshold(every: u32) -> u64 {
    if every <= 1 {
        ALL
    } else {
        ALL / u64::from(every)
    }
}

fn mix(h: u64, v: u64) -> u64 {
    (h ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

fn fmix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

fn mix_addr(h: u64, a: &[u8; 16]) -> u64 {
    let w = |i: usize| u64::from(u32::from_be_bytes([a[i], a[i + 1], a[i + 2], a[i + 3]]));
    let (mut w0, w1, mut w2, mut w3) = (w(0), w(4), w(8), w(12));
    if w0 == 0 && w1 == 0 && w2 == 0xffff {
        // ::ffff:a.b.c.d hashes as the IPv4 address it maps.
        w0 = w3;
        w2 = 0;
        w3 = 0;
    }
    mix(mix(h, (w0 << 32) | w1), (w2 << 32) | w3)
}

/// Hash of a flow in the data's direction (sender -> receiver), addresses
/// as the records hold them (IPv4 in the first 4 bytes, network order),
/// ports in host order: `nt_sample_flow`.
pub fn flow(saddr: &[u8; 16], daddr: &[u8; 16], sport: u16, dport: u16) -> u64 {
    let h = mix_addr(mix_addr(0, saddr), daddr);
    mix(h, (u64::from(sport) << 16) | u64::from(dport))
}

/// Is this granule of the flow sampled: `nt_sample_granule`.
pub fn granule(flow: u64, granule: u32, threshold: u64) -> bool {
    (fmix(flow ^ u64::from(granule)) >> 32) < threshold
}

/// Is the byte at `seq` sampled: `nt_sample_byte`.
pub fn byte(flow: u64, seq: u32, threshold: u64) -> bool {
    granule(flow, seq >> GRANULE_SHIFT, threshold)
}

/// Does `[seq, end_seq)` hold a sampled byte: `nt_sample_range`.
pub fn range(flow: u64, seq: u32, end_seq: u32, threshold: u64) -> bool {
    let first = seq >> GRANULE_SHIFT;
    if end_seq == seq {
        return granule(flow, first, threshold);
    }
    let start = seq & !((1u32 << GRANULE_SHIFT) - 1);
    let n = (end_seq.wrapping_sub(1).wrapping_sub(start) >> GRANULE_SHIFT) + 1;
    if n > MAX_GRANULES {
        return true;
    }
    let mask = (1u32 << (32 - GRANULE_SHIFT)) - 1;
    (0..n).any(|i| granule(flow, first.wrapping_add(i) & mask, threshold))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: [u8; 4]) -> [u8; 16] {
        let mut r = [0u8; 16];
        r[..4].copy_from_slice(&a);
        r
    }

    fn mapped(a: [u8; 4]) -> [u8; 16] {
        let mut r = [0u8; 16];
        r[10] = 0xff;
        r[11] = 0xff;
        r[12..].copy_from_slice(&a);
        r
    }

    /// Hand-kept vectors, computed from sample.h with the host's cc (the
    /// test below recomputes them): a change of the rule shows here first.
    #[test]
    fn fixed_vectors() {
        assert_eq!(threshold(1), ALL);
        assert_eq!(threshold(0), ALL);
        assert_eq!(threshold(10), 429_496_729);
        let f = flow(&v4([10, 9, 0, 1]), &v4([10, 9, 0, 2]), 40000, 5201);
        assert_eq!(f, 0x05e8_25bd_e982_e6a5);
        let kept: Vec<u32> = (0..64).filter(|g| granule(f, *g, threshold(10))).collect();
        assert_eq!(kept, [13, 17, 22, 24, 25, 43, 49, 52]);
        // A v4-mapped v6 socket and a v4 packet agree.
        assert_eq!(
            flow(&mapped([10, 9, 0, 1]), &mapped([10, 9, 0, 2]), 40000, 5201),
            f
        );
        // Direction matters: the reverse flow has its own granules.
        assert_ne!(flow(&v4([10, 9, 0, 2]), &v4([10, 9, 0, 1]), 5201, 40000), f);
    }

    #[test]
    fn ranges() {
        let f = flow(&v4([10, 9, 0, 1]), &v4([10, 9, 0, 2]), 40000, 5201);
        let t = threshold(10);
        let g = |n: u32| n << GRANULE_SHIFT;
        // Granule 13 is sampled, 12 and 14 are not.
        assert!(range(f, g(13), g(13) + 1, t));
        assert!(!range(f, g(12), g(13), t), "end is exclusive");
        assert!(range(f, g(13) - 100, g(13) + 1, t), "straddles into 13");
        assert!(range(f, g(14) - 1, g(14) + 5000, t), "last byte of 13");
        assert!(!range(f, g(14), g(14) + 65536, t));
        // Empty (pure ACK): seq's granule.
        assert!(range(f, g(13) + 7, g(13) + 7, t));
        assert!(!range(f, g(12) + 7, g(12) + 7, t));
        // Overlong or backwards: kept.
        assert!(range(f, g(0), g(MAX_GRANULES + 1), t));
        assert!(range(f, g(5), g(4), t));
        // Every byte of a range that holds a sampled byte: a TX skb's last
        // byte sampled means every RX skb carrying it is kept.
        for seq in (g(10)..g(16)).step_by(4099) {
            if byte(f, seq, t) {
                assert!(range(f, seq.wrapping_sub(30000), seq + 1, t));
                assert!(range(f, seq, seq + 40000, t));
            }
        }
        // N = 1 keeps everything.
        assert!((0..1000u32).all(|i| range(f, i * 7919, i * 7919 + 1, ALL)));
    }

    #[test]
    fn about_one_granule_in_n() {
        let f = flow(&v4([192, 168, 1, 1]), &v4([192, 168, 1, 2]), 1234, 80);
        for n in [2u32, 10, 100] {
            let kept = (0..65536u32)
                .filter(|g| granule(f, *g, threshold(n)))
                .count() as f64;
            let want = 65536.0 / f64::from(n);
            assert!(
                (kept - want).abs() < 4.0 * want.sqrt() + 1.0,
                "1 in {n}: {kept} granules of 65536"
            );
        }
    }

    /// The C program: prints `kind inputs... = output` lines for many inputs,
    /// from sample.h as the BPF programs compile it.
    const C_VECTORS: &str = r#"
#include <linux/types.h>
#include <stdio.h>
#include "sample.h"
static __u64 s = 88172645463325252ULL;
static __u32 rnd(void) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return (__u32)s; }
int main(void) {
	for (int i = 0; i < 300; i++) {
		unsigned char a[16] = {0}, b[16] = {0};
		__u32 sa[4], da[4];
		int kind = i % 3, n;
		for (int j = 0; j < 16; j++) { a[j] = rnd(); b[j] = rnd(); }
		if (kind == 0) { for (int j = 4; j < 16; j++) a[j] = b[j] = 0; }
		if (kind == 2) { for (int j = 0; j < 10; j++) a[j] = b[j] = 0; a[10] = b[10] = a[11] = b[11] = 0xff; }
		__builtin_memcpy(sa, a, 16);
		__builtin_memcpy(da, b, 16);
		__u16 sp = rnd(), dp = rnd();
		__u32 every = (i % 7 == 0) ? 1 : 1 + rnd() % 200;
		__u64 t = nt_sample_threshold(every), f = nt_sample_flow(sa, da, sp, dp);
		printf("flow");
		for (n = 0; n < 16; n++) printf(" %u", a[n]);
		for (n = 0; n < 16; n++) printf(" %u", b[n]);
		printf(" %u %u %u = %llu %llu\n", sp, dp, every, (unsigned long long)t, (unsigned long long)f);
		for (n = 0; n < 20; n++) {
			__u32 seq = rnd(), len = (n % 4 == 0) ? 0 : rnd() % (n % 4 == 3 ? 2000000 : 200000);
			if (n == 5) seq = 0xffffffffU - 1000;
			printf("range %llu %u %u %llu = %d %d\n", (unsigned long long)f, seq, seq + len,
			       (unsigned long long)t, nt_sample_range(f, seq, seq + len, t),
			       nt_sample_byte(f, seq, t));
		}
	}
	return 0;
}
"#;

    fn nums<T: std::str::FromStr>(s: &str) -> Vec<T>
    where
        T::Err: std::fmt::Debug,
    {
        s.split_whitespace().map(|x| x.parse().unwrap()).collect()
    }

    #[test]
    fn rust_twin_matches_the_c_header() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("vectors.c");
        let exe = dir.path().join("vectors");
        std::fs::write(&src, C_VECTORS).unwrap();
        let include = concat!(env!("CARGO_MANIFEST_DIR"), "/bpf/include");
        let out = std::process::Command::new(crate::probes::host_cc())
            .args(["-std=gnu11", "-O2", "-Wall", "-Werror", "-I", include, "-o"])
            .arg(&exe)
            .arg(&src)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "compiling sample.h: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = std::process::Command::new(&exe).output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        let (mut flows, mut ranges, mut kept) = (0, 0, 0);
        for line in text.lines() {
            let (lhs, rhs) = line.split_once(" = ").unwrap();
            let (kind, args) = lhs.split_once(' ').unwrap();
            match kind {
                "flow" => {
                    let a: Vec<u32> = nums(args);
                    let r: Vec<u64> = nums(rhs);
                    let addr = |o: usize| -> [u8; 16] {
                        std::array::from_fn(|i| u8::try_from(a[o + i]).unwrap())
                    };
                    let (sp, dp) = (a[32] as u16, a[33] as u16);
                    assert_eq!(threshold(a[34]), r[0], "{line}");
                    assert_eq!(flow(&addr(0), &addr(16), sp, dp), r[1], "{line}");
                    flows += 1;
                }
                "range" => {
                    let a: Vec<u64> = nums(args);
                    let r: Vec<u8> = nums(rhs);
                    let (f, seq, end, t) = (a[0], a[1] as u32, a[2] as u32, a[3]);
                    assert_eq!(range(f, seq, end, t), r[0] == 1, "{line}");
                    assert_eq!(byte(f, seq, t), r[1] == 1, "{line}");
                    ranges += 1;
                    kept += usize::from(r[0]);
                }
                other => panic!("unknown line {other}"),
            }
        }
        assert_eq!((flows, ranges), (300, 6000));
        // Both outcomes were exercised.
        assert!(kept > 100 && kept < ranges - 100, "{kept} of {ranges} kept");
    }
}
