//! Test support: compiles a test program that includes the shared BPF
//! headers (`ebpf/include/`) as host C and runs it, so the tests of
//! filter/, self_traffic.rs and probes/skb_flow.rs check the C the probes
//! run, not a Rust copy of it.

/// What a BPF header needs to compile as host C: the kernel's integer
/// types, `__always_inline`, the byte-order helpers of bpf_endian.h, plain
/// pointer casts for `bpf_core_cast`, and writable `.rodata` configuration.
/// Not <arpa/inet.h>: its IPPROTO_* would clash with packet.h's.
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
    // Written from a thread while the output is read: an input and an
    // output each larger than a pipe's buffer would otherwise deadlock.
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_owned();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "the header's test program failed");
    String::from_utf8(out.stdout).unwrap()
}
