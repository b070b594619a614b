//! The agents' byte-range sampling rule (`--sample-every N`), as the
//! matcher needs it to tell "sampled out" from "lost": the specification
//! is `tracer-agent/bpf/include/sample.h`; a test below compiles that
//! header with the host's C compiler and requires this copy to agree.
//! (The agent has its own Rust twin; nothing may depend on the agent
//! crate, and the codec carries no sampling rule, hence this copy.)
//!
//! A granule is 64 KiB of one direction's sequence space; it is sampled
//! iff a hash of (flow, granule) falls under 1/N. The sender tags a TX skb
//! iff its last byte (`tskey`) lies in a sampled granule; the receiver
//! records an RX skb iff its range touches one.

/// A granule is `1 << GRANULE_SHIFT` bytes.
pub const GRANULE_SHIFT: u32 = 16;
/// `nt_sample_threshold(1)`: keeps everything.
pub const ALL: u64 = 1 << 32;

/// The threshold for one in `every` (`nt_sample_threshold`).
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
        w0 = w3;
        w2 = 0;
        w3 = 0;
    }
    mix(mix(h, (w0 << 32) | w1), (w2 << 32) | w3)
}

/// The flow hash in the data's direction (`nt_sample_flow`): addresses in
/// the wire convention, ports in host order.
pub fn flow_hash(src: &[u8; 16], dst: &[u8; 16], sport: u16, dport: u16) -> u64 {
    mix(
        mix_addr(mix_addr(0, src), dst),
        (u64::from(sport) << 16) | u64::from(dport),
    )
}

/// Is granule `g` of the flow sampled (`nt_sample_granule`)?
pub fn granule(flow: u64, g: u32, threshold: u64) -> bool {
    (fmix(flow ^ u64::from(g)) >> 32) < threshold
}

/// Is the byte at `seq` sampled (`nt_sample_byte`)?
pub fn byte(flow: u64, seq: u32, threshold: u64) -> bool {
    granule(flow, seq >> GRANULE_SHIFT, threshold)
}

/// Does `[seq, end_seq)` hold a sampled byte (`nt_sample_range`)? An
/// empty range decides by `seq`'s granule; an overlong one is kept.
pub fn range(flow: u64, seq: u32, end_seq: u32, threshold: u64) -> bool {
    let first = seq >> GRANULE_SHIFT;
    if end_seq == seq {
        return granule(flow, first, threshold);
    }
    let start = seq & !((1u32 << GRANULE_SHIFT) - 1);
    let n = (end_seq.wrapping_sub(1).wrapping_sub(start) >> GRANULE_SHIFT) + 1;
    if n > 16 {
        return true;
    }
    let mask = (1u32 << (32 - GRANULE_SHIFT)) - 1;
    (0..n).any(|i| granule(flow, first.wrapping_add(i) & mask, threshold))
}

/// Is every granule from the one holding `first` to the one holding
/// `last` (inclusive, sequence arithmetic) sampled? When it is, no event
/// of a socket-only stage (DATA_READY, READ_DONE: sampled by the granule
/// of their last byte) can have ended in between unrecorded.
pub fn all_sampled(flow: u64, first: u32, last: u32, threshold: u64) -> bool {
    if threshold >= ALL {
        return true;
    }
    let (g0, g1) = (first >> GRANULE_SHIFT, last >> GRANULE_SHIFT);
    let n = g1.wrapping_sub(g0) & ((1 << (32 - GRANULE_SHIFT)) - 1);
    // A long stretch: some granule in it is unsampled anyway at N > 1
    // with near certainty; do not loop over the whole space.
    if n > 64 {
        return false;
    }
    let mask = (1u32 << (32 - GRANULE_SHIFT)) - 1;
    (0..=n).all(|i| granule(flow, g0.wrapping_add(i) & mask, threshold))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: [u8; 4]) -> [u8; 16] {
        let mut r = [0u8; 16];
        r[..4].copy_from_slice(&a);
        r
    }

    /// The fixed vectors written in sample.h's header comment.
    #[test]
    fn vectors_of_the_header_comment() {
        assert_eq!(threshold(10), 429_496_729);
        let f = flow_hash(&v4([10, 9, 0, 1]), &v4([10, 9, 0, 2]), 40000, 5201);
        assert_eq!(f, 0x05e8_25bd_e982_e6a5);
        let kept: Vec<u32> = (0..64).filter(|g| granule(f, *g, threshold(10))).collect();
        assert_eq!(kept, [13, 17, 22, 24, 25, 43, 49, 52]);
        let g = |n: u32| n << GRANULE_SHIFT;
        assert!(all_sampled(f, g(24), g(25) + 100, threshold(10)));
        assert!(!all_sampled(f, g(24), g(26), threshold(10)));
        assert!(all_sampled(f, g(2), g(3), ALL));
    }

    /// Byte-for-byte agreement with sample.h compiled by the host's cc.
    #[test]
    fn agrees_with_sample_h() {
        const PROGRAM: &str = r#"
#include <linux/types.h>
#include <stdio.h>
#include "sample.h"
int main(void) {
	__u64 x = 0x2545f4914f6cdd1dULL;
	for (int i = 0; i < 200; i++) {
		__u32 s[4] = {0}, d[4] = {0};
		unsigned char *sb = (unsigned char *)s, *db = (unsigned char *)d;
		x ^= x << 13; x ^= x >> 7; x ^= x << 17;
		int words = (i % 2) ? 4 : 1;
		for (int j = 0; j < words * 4; j++) { sb[j] = (x >> (j % 8 * 8)) ^ j; db[j] = (x >> (j % 7 * 8)) + i; }
		__u16 sp = x >> 16, dp = x >> 40;
		__u64 t = nt_sample_threshold(1 + i % 17), f = nt_sample_flow(s, d, sp, dp);
		printf("%d", words);
		for (int j = 0; j < 16; j++) printf(" %u", sb[j]);
		for (int j = 0; j < 16; j++) printf(" %u", db[j]);
		__u32 seq = x >> 3, len = (i % 5 == 0) ? 0 : (__u32)(x >> 20) % 300000;
		printf(" %u %u %u %llu %u %d %u %d\n", sp, dp, 1 + i % 17, (unsigned long long)f,
		       seq, nt_sample_byte(f, seq, t), len, nt_sample_range(f, seq, seq + len, t));
	}
	return 0;
}
"#;
        let header = concat!(env!("CARGO_MANIFEST_DIR"), "/../tracer-agent/bpf/include");
        let dir = tempfile::tempdir().unwrap();
        let (src, exe) = (dir.path().join("v.c"), dir.path().join("v"));
        std::fs::write(&src, PROGRAM).unwrap();
        let cc = ["cc", "clang-19", "clang"]
            .into_iter()
            .find(|c| {
                std::process::Command::new(c)
                    .arg("--version")
                    .output()
                    .is_ok()
            })
            .expect("a host C compiler (the BPF build needs clang anyway)");
        let out = std::process::Command::new(cc)
            .args(["-O2", "-Wall", "-Werror", "-I", header, "-o"])
            .arg(&exe)
            .arg(&src)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text =
            String::from_utf8(std::process::Command::new(&exe).output().unwrap().stdout).unwrap();
        let mut lines = 0;
        let mut kept = 0;
        for line in text.lines() {
            let v: Vec<u64> = line.split(' ').map(|s| s.parse().unwrap()).collect();
            let addr = |o: usize| -> [u8; 16] { std::array::from_fn(|i| v[o + i] as u8) };
            let (sp, dp, every, f, seq, b) = (
                v[33] as u16,
                v[34] as u16,
                v[35] as u32,
                v[36],
                v[37] as u32,
                v[38] == 1,
            );
            assert_eq!(flow_hash(&addr(1), &addr(17), sp, dp), f, "{line}");
            assert_eq!(byte(f, seq, threshold(every)), b, "{line}");
            let (len, r) = (v[39] as u32, v[40] == 1);
            assert_eq!(
                range(f, seq, seq.wrapping_add(len), threshold(every)),
                r,
                "{line}"
            );
            lines += 1;
            kept += usize::from(b);
        }
        assert_eq!(lines, 200);
        assert!(kept > 10 && kept < 190, "{kept}");
    }
}
