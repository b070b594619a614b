//! The workspace's own Rust sources as the structure checks read them
//! (`tests/module_graph.rs`, `tests/file_size.rs`): every member's library
//! and binary targets, from `cargo metadata`, and the module files each
//! one reaches through its `mod name;` declarations.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::bins::repo_root;

/// One library or binary target of a workspace member: a crate of its own,
/// whose `crate::` paths name its own modules.
#[derive(Debug, Clone)]
pub struct CrateTarget {
    /// The package, e.g. `tracer-agent`.
    pub package: String,
    /// `lib` or `bin`.
    pub kind: String,
    /// The target's name, e.g. `tracer_agent` or `nettrace-match`.
    pub name: String,
    /// Its root file (`src/lib.rs`, `src/main.rs`, `src/bin/x.rs`, ...).
    pub root: PathBuf,
}

impl CrateTarget {
    /// `package (kind name)`, for messages.
    pub fn label(&self) -> String {
        format!("{} ({} {})", self.package, self.kind, self.name)
    }
}

/// One file of a crate and the module it holds.
#[derive(Debug, Clone)]
pub struct ModuleFile {
    /// Module path, `crate` for the root, e.g. `crate::servo::pi`.
    pub module: String,
    /// The file.
    pub path: PathBuf,
}

/// The library and binary targets of every workspace member, in the order
/// `cargo metadata` lists them. Tests, examples, benches and build scripts
/// are left out: they are not part of what a crate ships.
pub fn crate_targets() -> Vec<CrateTarget> {
    // Asking cargo, not parsing Cargo.toml, so that `[lib] path`, `[[bin]]`
    // and src/bin/ discovery follow cargo's own rules.
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--no-deps",
            "--offline",
            "--format-version",
            "1",
        ])
        .current_dir(repo_root())
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let members: Vec<&str> = meta["workspace_members"]
        .as_array()
        .expect("workspace_members")
        .iter()
        .filter_map(|m| m.as_str())
        .collect();
    let mut targets = Vec::new();
    for package in meta["packages"].as_array().expect("packages") {
        if !members.contains(&package["id"].as_str().unwrap_or_default()) {
            continue;
        }
        for target in package["targets"].as_array().expect("targets") {
            let kinds: Vec<&str> = target["kind"]
                .as_array()
                .expect("kind")
                .iter()
                .filter_map(|k| k.as_str())
                .collect();
            let Some(kind) = kinds
                .iter()
                .find(|k| ["lib", "rlib", "bin"].contains(k))
                .map(|k| if *k == "bin" { "bin" } else { "lib" })
            else {
                continue;
            };
            targets.push(CrateTarget {
                package: package["name"].as_str().expect("name").to_owned(),
                kind: kind.to_owned(),
                name: target["name"].as_str().expect("name").to_owned(),
                root: PathBuf::from(target["src_path"].as_str().expect("src_path")),
            });
        }
    }
    assert!(!targets.is_empty(), "cargo metadata lists no crate");
    targets
}

/// Every file of the crate rooted at `root`, found by following its
/// `mod name;` declarations (`name.rs` or `name/mod.rs`), root first.
pub fn module_files(root: &Path) -> Vec<ModuleFile> {
    let mut out = Vec::new();
    let mut todo = vec![(String::from("crate"), root.to_path_buf(), true)];
    while let Some((module, path, owns_dir)) = todo.pop() {
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        // A crate root or a mod.rs declares its children in its own folder;
        // `a.rs` declares them in `a/`.
        let dir = path.parent().expect("a file has a folder");
        let children_dir = if owns_dir {
            dir.to_path_buf()
        } else {
            dir.join(path.file_stem().expect("a file name"))
        };
        for child in declared_modules(&text) {
            let flat = children_dir.join(format!("{child}.rs"));
            let nested = children_dir.join(&child).join("mod.rs");
            let (file, owns) = if flat.is_file() {
                (flat, false)
            } else if nested.is_file() {
                (nested, true)
            } else {
                panic!(
                    "{} declares `mod {child};` but neither {} nor {} exists",
                    path.display(),
                    flat.display(),
                    nested.display()
                );
            };
            todo.push((format!("{module}::{child}"), file, owns));
        }
        out.push(ModuleFile { module, path });
    }
    out.sort_by(|a, b| a.module.cmp(&b.module));
    out
}

/// Names of the out-of-line modules `text` declares (`mod a;`,
/// `pub mod b;`, `pub(crate) mod c;`, attributes before them allowed).
pub fn declared_modules(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in text.lines() {
        let mut rest = line.trim();
        // Attributes on the same line, e.g. `#[cfg(test)] mod tests_x;`.
        while rest.starts_with("#[") {
            match rest.find(']') {
                Some(end) => rest = rest[end + 1..].trim_start(),
                None => break,
            }
        }
        for vis in ["pub(crate) ", "pub(super) ", "pub "] {
            if let Some(r) = rest.strip_prefix(vis) {
                rest = r;
                break;
            }
        }
        let Some(decl) = rest.strip_prefix("mod ") else {
            continue;
        };
        let Some(name) = decl.trim().strip_suffix(';') else {
            continue; // an inline module, `mod tests {`
        };
        let name = name.trim();
        if !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_') {
            names.push(name.to_owned());
        }
    }
    names
}

/// `path` relative to the workspace root, for messages and lists.
pub fn relative(path: &Path) -> String {
    path.strip_prefix(repo_root())
        .unwrap_or(path)
        .display()
        .to_string()
}
