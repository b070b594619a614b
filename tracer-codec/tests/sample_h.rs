//! The sampling rule of `tracer_codec::sample` against its specification,
//! `ebpf/include/sample.h` as the BPF probes compile it: the
//! header is compiled with the host's C compiler into a program printing
//! its decisions for many flows and ranges (IPv4, IPv6, v4-mapped; a
//! rate between 1 and 200; empty, short, GRO-sized, overlong and wrapping
//! ranges), and the Rust twin must agree on every one; the header's IPv4
//! form of the flow hash must give the generic one's value.

use tracer_codec::sample::{byte, flow_hash, range, threshold};

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
		/* The IPv4 form is the same function of an IPv4 flow. */
		if (kind == 0 && nt_sample_flow4(sa[0], da[0], sp, dp) != f) {
			printf("flow4 differs for flow %d\n", i);
			return 1;
		}
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

fn host_cc() -> std::path::PathBuf {
    // The build already needs clang for the BPF side.
    for c in ["cc", "clang-19", "clang"] {
        if std::process::Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return c.into();
        }
    }
    panic!("no host C compiler (cc, clang-19, clang) to check sample.h against");
}

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
    // The header lives with the BPF programs that compile it.
    let include = concat!(env!("CARGO_MANIFEST_DIR"), "/../ebpf/include");
    let out = std::process::Command::new(host_cc())
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
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
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
                assert_eq!(flow_hash(&addr(0), &addr(16), sp, dp), r[1], "{line}");
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
