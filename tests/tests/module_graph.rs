//! Every crate's modules import one way: for each library and binary of
//! the workspace this test builds the graph "file A names module B" from
//! every `crate::…` path, every top-level `use super::…` and every
//! `use child::…` re-export, and fails naming each cycle it finds. It also
//! checks that nothing in clocksync's library imports its test harness.
//! Needs neither root nor BPF; run with `--nocapture` to see the edges.

use std::collections::{BTreeMap, BTreeSet};

use tracer_e2e::source_tree::{crate_targets, declared_modules, module_files, CrateTarget};

/// Module → the modules it names.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// The longest prefix of `path` (segments) that is a known module.
fn resolve<S: AsRef<str>>(path: &[S], modules: &BTreeSet<String>) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| {
            path[..n]
                .iter()
                .map(AsRef::as_ref)
                .collect::<Vec<_>>()
                .join("::")
        })
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

/// Tokens of a use tree: identifiers, `::`, braces, commas and `*`.
fn use_tokens(tree: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = tree;
    while let Some(c) = rest.chars().next() {
        let len = if c.is_alphanumeric() || c == '_' {
            rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len())
        } else if rest.starts_with("::") {
            2
        } else {
            c.len_utf8()
        };
        let tok = &rest[..len];
        if !tok.trim().is_empty() {
            out.push(tok);
        }
        rest = &rest[len..];
    }
    out
}

/// The paths of one use tree (`a::{b, c::{d, e as f}, *}` gives a::b,
/// a::c::d, a::c::e and a), from `toks[*i]` on.
fn use_tree(toks: &[&str], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let mut path = prefix.to_vec();
    loop {
        match toks.get(*i) {
            Some(&"{") => {
                *i += 1;
                while toks.get(*i).is_some_and(|t| *t != "}") {
                    use_tree(toks, i, &path, out);
                    if toks.get(*i) == Some(&",") {
                        *i += 1;
                    }
                }
                *i += 1; // the `}`
                return;
            }
            Some(&"*") => {
                *i += 1;
                break;
            }
            Some(t) if t.chars().all(|c| c.is_alphanumeric() || c == '_') => {
                path.push((*t).to_owned());
                *i += 1;
                if toks.get(*i) == Some(&"::") {
                    *i += 1;
                    continue;
                }
                if toks.get(*i) == Some(&"as") {
                    *i += 2;
                }
                break;
            }
            _ => {
                // Not a path token (a stray `,` or `}`): step over it.
                *i += 1;
                break;
            }
        }
    }
    out.push(path);
}

/// Where one file's paths start: its module, its parent, and the child
/// modules it declares.
struct Scope<'a> {
    me: &'a str,
    children: Vec<String>,
    modules: &'a BTreeSet<String>,
}

impl Scope<'_> {
    /// `me` without its last `n` segments.
    fn up(&self, n: usize) -> Vec<String> {
        let parts: Vec<String> = self.me.split("::").map(str::to_owned).collect();
        parts[..parts.len().saturating_sub(n).max(1)].to_vec()
    }

    /// The module a path (its segments as written) names, if it is one of
    /// this crate's. `inline` is true inside an inline `mod tests { … }`,
    /// where `super::` is this file itself.
    fn module_of_path(&self, segs: &[String], inline: bool) -> Option<String> {
        let first = segs.first()?;
        let (base, rest) = if first == "crate" {
            (vec!["crate".to_owned()], &segs[1..])
        } else if first == "super" {
            let n = segs.iter().take_while(|s| *s == "super").count();
            (self.up(if inline { n - 1 } else { n }), &segs[n..])
        } else if first == "self" && !inline {
            (self.up(0), &segs[1..])
        } else if !inline && self.children.contains(first) {
            (self.up(0), segs)
        } else {
            return None; // std, another crate, or a local name
        };
        let mut p = base;
        p.extend(rest.iter().cloned());
        resolve(&p, self.modules)
    }
}

/// The modules the source text of module `me` names: its `use` trees, and
/// every `crate::`, `super::`, `self::` or `child::` path in its code.
fn named_by(text: &str, me: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let scope = Scope {
        me,
        children: declared_modules(text),
        modules,
    };
    let mut out = BTreeSet::new();
    let mut inline = false;
    let mut stmt: Option<String> = None;
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        // A top-level inline module (`mod tests {`) ends at a `}` in
        // column 0; inside it `super::` is this file.
        if !inline && !code.starts_with(char::is_whitespace) && code.trim_end().ends_with('{') {
            let head = code
                .trim_start_matches("pub ")
                .trim_start_matches("pub(crate) ");
            inline = head.starts_with("mod ");
        } else if inline && code.starts_with('}') {
            inline = false;
        }
        // A use statement, which may span lines, is read whole.
        let trimmed = code.trim_start();
        let starts_use = ["use ", "pub use ", "pub(crate) use ", "pub(super) use "]
            .iter()
            .find_map(|p| trimmed.strip_prefix(p));
        if let Some(tree) = starts_use {
            stmt = Some(String::new());
            stmt.as_mut().unwrap().push_str(tree);
        } else if let Some(s) = stmt.as_mut() {
            s.push(' ');
            s.push_str(code);
        } else {
            named_in_code(code, &scope, inline, &mut out);
            continue;
        }
        if stmt.as_deref().is_some_and(|s| s.contains(';')) {
            let tree = stmt.take().unwrap_or_default();
            let tree = tree.split(';').next().unwrap_or("");
            let toks = use_tokens(tree);
            let mut paths = Vec::new();
            let mut i = 0;
            while i < toks.len() {
                use_tree(&toks, &mut i, &[], &mut paths);
            }
            for p in paths {
                out.extend(scope.module_of_path(&p, inline));
            }
        }
    }
    out.remove(me);
    out
}

/// The modules named by paths in one line of code (not a use statement).
fn named_in_code(code: &str, scope: &Scope<'_>, inline: bool, out: &mut BTreeSet<String>) {
    let starts: Vec<&str> = ["crate", "super", "self"]
        .into_iter()
        .chain(scope.children.iter().map(String::as_str))
        .collect();
    for start in starts {
        let pat = format!("{start}::");
        for (i, _) in code.match_indices(&pat) {
            let before = code[..i].chars().last();
            // `my_crate::`, or the middle of `a::crate_x::`; `$crate::` counts.
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let segs: Vec<String> = segments(&code[i..])
                .into_iter()
                .map(str::to_owned)
                .collect();
            out.extend(scope.module_of_path(&segs, inline));
        }
    }
}

/// The import graph of one crate.
fn graph(target: &CrateTarget) -> Graph {
    let files = module_files(&target.root);
    let modules: BTreeSet<String> = files.iter().map(|f| f.module.clone()).collect();
    let mut edges = Graph::new();
    for f in &files {
        let text = std::fs::read_to_string(&f.path).expect("readable source");
        edges.insert(f.module.clone(), named_by(&text, &f.module, &modules));
    }
    edges
}

/// A cycle through `node`, if any, by depth-first search.
fn find_cycle(
    node: &str,
    edges: &Graph,
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

/// Every cycle of `edges`, one per edge that closes one: after each cycle
/// is reported, its closing edge is dropped and the search starts again,
/// so that one run names all of a crate's cycles, not just the first.
fn cycles(edges: &Graph) -> Vec<Vec<String>> {
    let mut edges = edges.clone();
    let mut found = Vec::new();
    'search: loop {
        let mut done = BTreeSet::new();
        for node in edges.keys().cloned().collect::<Vec<_>>() {
            if let Some(c) = find_cycle(&node, &edges, &mut Vec::new(), &mut done) {
                let (from, to) = (&c[c.len() - 2], &c[c.len() - 1]);
                if let Some(out) = edges.get_mut(from) {
                    out.remove(to);
                }
                // The same loop may close on another edge: name it once,
                // starting from its smallest module.
                let ring = &c[..c.len() - 1];
                let start = (0..ring.len()).min_by_key(|&i| &ring[i]).unwrap_or(0);
                let mut norm: Vec<String> = ring[start..]
                    .iter()
                    .chain(&ring[..start])
                    .cloned()
                    .collect();
                norm.push(norm[0].clone());
                if !found.contains(&norm) {
                    found.push(norm);
                }
                continue 'search;
            }
        }
        return found;
    }
}

#[test]
fn no_crate_has_an_import_cycle() {
    let mut report = Vec::new();
    for target in crate_targets() {
        let edges = graph(&target);
        println!("{}:", target.label());
        for (from, to) in &edges {
            let to: Vec<_> = to.iter().map(String::as_str).collect();
            println!("  {from} -> {}", to.join(", "));
        }
        for c in cycles(&edges) {
            report.push(format!("{}: {}", target.label(), c.join(" -> ")));
        }
    }
    assert!(report.is_empty(), "import cycles:\n{}", report.join("\n"));
}

#[test]
fn clocksync_library_does_not_import_its_harness() {
    let target = crate_targets()
        .into_iter()
        .find(|t| t.package == "clocksync" && t.kind == "lib")
        .expect("clocksync has a library");
    let edges = graph(&target);
    assert!(
        edges.contains_key("crate::harness"),
        "clocksync has no harness module any more: drop this test"
    );
    let users: Vec<_> = edges
        .iter()
        .filter(|(from, to)| *from != "crate" && to.contains("crate::harness"))
        .map(|(from, _)| from.clone())
        .collect();
    assert!(
        users.is_empty(),
        "clocksync library modules import the harness: {users:?}"
    );
}

#[test]
fn the_parser_sees_a_cycle_when_there_is_one() {
    // The checker itself must be able to fail: a two-module loop, and a
    // second loop beside it that a first-cycle-only search would miss.
    let mut edges = Graph::new();
    let link = |edges: &mut Graph, a: &str, b: &str| {
        edges
            .entry(format!("crate::{a}"))
            .or_default()
            .insert(format!("crate::{b}"));
    };
    link(&mut edges, "a", "b");
    link(&mut edges, "b", "a");
    link(&mut edges, "c", "d");
    link(&mut edges, "d", "c");
    let found = cycles(&edges);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found.iter().all(|c| c.len() == 3), "{found:?}");
    let modules = BTreeSet::from(["crate".to_string(), "crate::servo".to_string()]);
    assert_eq!(
        resolve(&["crate", "servo", "Servo"], &modules).as_deref(),
        Some("crate::servo")
    );
    let modules: BTreeSet<String> = [
        "crate",
        "crate::servo",
        "crate::servo::machine",
        "crate::servo::pi",
        "crate::error",
        "crate::source",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    // A multi-line use tree, a child path in code, `super::` at top level
    // and inside an inline test module (where it is the file itself).
    let text = "mod pi;\n\
                use super::{\n    error::Error,\n    source::{self, Source as S},\n};\n\
                fn f() { pi::Pi::new(); }\n\
                #[cfg(test)]\nmod tests {\n    use super::*;\n    use super::super::error::E;\n}\n";
    assert_eq!(
        named_by(text, "crate::servo", &modules),
        set(&["crate::error", "crate::source", "crate::servo::pi"])
    );
    assert_eq!(
        named_by("use super::machine::State;\n", "crate::servo::pi", &modules),
        set(&["crate::servo::machine"])
    );
    assert_eq!(
        named_by(
            "const X: u8 = $crate::error::N; // crate::source\n",
            "crate::servo",
            &modules
        ),
        set(&["crate::error"])
    );
}
