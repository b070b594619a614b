//! Compiles the BPF programs in ../ebpf with clang and generates their
//! libbpf-rs skeletons, so `cargo build` is the only build step.

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const PROGRAMS: &[&str] = &["tx_tstamp"];

fn find_clang() -> PathBuf {
    if let Ok(c) = env::var("BPF_CLANG") {
        return PathBuf::from(c);
    }
    // Prefer a versioned clang known to emit BTF + CO-RE for -target bpf.
    for c in ["clang-19", "clang-20", "clang-18", "clang"] {
        if std::process::Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return PathBuf::from(c);
        }
    }
    panic!("no clang found to compile the BPF programs: install clang-19 (apt-get install clang-19) or set BPF_CLANG");
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets this"));
    let ebpf = manifest.join("..").join("ebpf");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets this"));
    let clang = find_clang();
    println!("cargo:rerun-if-env-changed=BPF_CLANG");
    println!("cargo:rerun-if-changed={}", ebpf.join("include").display());
    for entry in std::fs::read_dir(ebpf.join("include")).expect("ebpf/include exists") {
        let entry = entry.expect("readable ebpf/include");
        println!("cargo:rerun-if-changed={}", entry.path().display());
    }
    for prog in PROGRAMS {
        let src = ebpf.join(format!("{prog}.bpf.c"));
        println!("cargo:rerun-if-changed={}", src.display());
        SkeletonBuilder::new()
            .source(&src)
            .clang(&clang)
            .clang_args([
                "-Wall".into(),
                // v3: atomic fetch-and-add and exchange for the slot ring.
                "-mcpu=v3".into(),
                "-Werror".into(),
                "-I".into(),
                ebpf.as_os_str().to_owned(),
            ])
            .build_and_generate(out.join(format!("{prog}.skel.rs")))
            .unwrap_or_else(|e| panic!("building BPF program {prog}: {e:#}"));
    }
}
