//! The crate's modules import one way: this test reads `src/**/*.rs`,
//! builds the graph "file A names module B" from every `crate::…` path,
//! every top-level `super::…` path and every `use child::…` re-export, and
//! fails on a cycle (printing it). It also checks that nothing in the
//! library imports the test harness. Run with `--nocapture` to see edges.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path ("crate::servo::pi") of a source file.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("file under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    std::iter::once("crate".to_string())
        .chain(parts)
        .collect::<Vec<_>>()
        .join("::")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("readable src dir")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            // Binaries are separate crates: they see the library from outside.
            if p.file_name().is_some_and(|n| n != "bin") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The longest prefix of `path` (segments) that is a known module.
fn resolve(path: &[&str], modules: &BTreeSet<String>) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|m| modules.contains(m))
}

/// Identifier-ish path segments starting at `s` (`a::b::{c, d}` gives a, b).
fn segments(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for seg in s.split("::") {
        let end = seg
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(seg.len());
        if end == 0 {
            break;
        }
        out.push(&seg[..end]);
        if end < seg.len() {
            break;
        }
    }
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(&src, f)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let me = module_of(&src, f);
        let parent = me.rsplit_once("::").map(|(p, _)| p.to_string());
        let text = std::fs::read_to_string(f).expect("readable source");
        let mut out = BTreeSet::new();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or("");
            for (i, _) in code.match_indices("crate::") {
                let before = code[..i].chars().last();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue; // e.g. `my_crate::`
                }
                let mut p = vec!["crate"];
                p.extend(segments(&code[i + "crate::".len()..]));
                out.extend(resolve(&p, &modules));
            }
            // `super::` at top level names the parent; inside an inline
            // `mod tests` (indented) it names this file itself.
            if let (Some(rest), Some(parent)) = (code.strip_prefix("use super::"), &parent) {
                let mut p: Vec<&str> = parent.split("::").collect();
                p.extend(segments(rest));
                out.extend(resolve(&p, &modules));
            }
            // `pub use child::…` in a module root.
            let trimmed = code.trim_start();
            for prefix in ["pub use ", "use ", "pub(crate) use "] {
                if let Some(rest) = trimmed.strip_prefix(prefix) {
                    let segs = segments(rest);
                    if let Some(first) = segs.first() {
                        if !["crate", "super", "self", "std", "libc"].contains(first) {
                            let mut p: Vec<&str> = me.split("::").collect();
                            p.extend(segs);
                            if let Some(m) = resolve(&p, &modules) {
                                if m != me {
                                    out.insert(m);
                                }
                            }
                        }
                    }
                }
            }
        }
        out.remove(&me);
        edges.insert(me, out);
    }
    edges
}

/// A cycle through `node`, if any, by depth-first search.
fn find_cycle(
    node: &str,
    edges: &BTreeMap<String, BTreeSet<String>>,
    stack: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(i) = stack.iter().position(|s| s == node) {
        let mut c = stack[i..].to_vec();
        c.push(node.to_string());
        return Some(c);
    }
    if done.contains(node) {
        return None;
    }
    stack.push(node.to_string());
    for next in edges.get(node).into_iter().flatten() {
        if let Some(c) = find_cycle(next, edges, stack, done) {
            return Some(c);
        }
    }
    stack.pop();
    done.insert(node.to_string());
    None
}

#[test]
fn module_imports_form_no_cycle() {
    let edges = graph();
    for (from, to) in &edges {
        let to: Vec<_> = to.iter().map(String::as_str).collect();
        println!("{from} -> {}", to.join(", "));
    }
    let mut done = BTreeSet::new();
    for node in edges.keys() {
        let mut stack = Vec::new();
        if let Some(c) = find_cycle(node, &edges, &mut stack, &mut done) {
            panic!("import cycle: {}", c.join(" -> "));
        }
    }
}

#[test]
fn the_library_does_not_import_the_harness() {
    let edges = graph();
    let users: Vec<_> = edges
        .iter()
        .filter(|(from, to)| *from != "crate" && to.contains("crate::harness"))
        .map(|(from, _)| from.clone())
        .collect();
    assert!(
        users.is_empty(),
        "library modules import the harness: {users:?}"
    );
}

#[test]
fn the_parser_sees_a_cycle_when_there_is_one() {
    // The checker itself must be able to fail: a two-module loop.
    let mut edges = BTreeMap::new();
    edges.insert(
        "crate::a".to_string(),
        BTreeSet::from(["crate::b".to_string()]),
    );
    edges.insert(
        "crate::b".to_string(),
        BTreeSet::from(["crate::a".to_string()]),
    );
    let mut done = BTreeSet::new();
    let c = find_cycle("crate::a", &edges, &mut Vec::new(), &mut done);
    assert_eq!(c.map(|c| c.len()), Some(3));
    let modules = BTreeSet::from(["crate".to_string(), "crate::servo".to_string()]);
    assert_eq!(
        resolve(&["crate", "servo", "Servo"], &modules).as_deref(),
        Some("crate::servo")
    );
}
