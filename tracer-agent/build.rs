//! Compiles every probe's BPF program (each `ebpf/<probe>.bpf.c` at the
//! workspace root) with clang against the shared headers in
//! `ebpf/include/`, and generates one libbpf-rs skeleton per program into
//! `OUT_DIR/<name>.skel.rs`, so `cargo build` is the only build step and a
//! new probe needs no edit here.

use std::env;
use std::path::{Path, PathBuf};

use libbpf_cargo::SkeletonBuilder;

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

/// Sorted entries of `dir`, for a build that does not depend on readdir order.
fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| {
            e.unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
                .path()
        })
        .collect();
    v.sort();
    v
}

/// Every `*.bpf.c` directly in `ebpf` (one file per probe; `ebpf/ref/`
/// holds the benchmarks' reference programs, built by the bench scripts),
/// with the program name (the file name without `.bpf.c`).
fn bpf_programs(ebpf: &Path) -> Vec<(String, PathBuf)> {
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    for src in sorted_entries(ebpf).into_iter().filter(|p| p.is_file()) {
        let Some(name) = src
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".bpf.c"))
        else {
            continue;
        };
        // Skeletons share OUT_DIR and libbpf-cargo names objects by file.
        if let Some((_, other)) = found.iter().find(|(n, _)| n == name) {
            panic!(
                "two BPF programs named {name}: {} and {}; rename one",
                other.display(),
                src.display()
            );
        }
        found.push((name.to_owned(), src));
    }
    found
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets this"));
    // The BPF sources are the workspace's, not this crate's: `ebpf/` sits
    // beside the crates (tracer-codec's tests read its headers too).
    let ebpf = manifest.join("..").join("ebpf");
    let include = ebpf.join("include");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets this"));
    let clang = find_clang();
    println!("cargo:rerun-if-env-changed=BPF_CLANG");
    for header in sorted_entries(&include) {
        println!("cargo:rerun-if-changed={}", header.display());
    }
    // The directory itself (cargo scans a watched directory's files): a new
    // program is found without an edit elsewhere, whether it is a probe
    // with its line in the registry (src/probes/mod.rs) or not (cpucost),
    // and without rebuilding the BPF on every edit of the Rust code.
    println!("cargo:rerun-if-changed={}", ebpf.display());
    let programs = bpf_programs(&ebpf);
    assert!(
        !programs.is_empty(),
        "no BPF program (*.bpf.c) in {}",
        ebpf.display()
    );
    for (name, src) in programs {
        println!("cargo:rerun-if-changed={}", src.display());
        SkeletonBuilder::new()
            .source(&src)
            .obj(out.join(format!("{name}.bpf.o")))
            .clang(&clang)
            .clang_args([
                "-Wall".into(),
                // v3: atomic fetch-and-add and exchange for the slot ring.
                "-mcpu=v3".into(),
                "-Werror".into(),
                "-I".into(),
                include.as_os_str().to_owned(),
            ])
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building BPF program {}: {e:#}", src.display()));
    }
}
