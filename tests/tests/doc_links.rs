//! Every relative link of the README and the docs leads somewhere: the
//! file exists, and a `#anchor` names a heading of it (as a code forge
//! renders headings into anchors). A newcomer who follows the README's
//! index never lands on a missing page or section.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use tracer_e2e::bins::repo_root;

/// The Markdown pages a reader reaches from the README.
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.join("README.md"), root.join("wireshark/README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    out.extend(docs);
    out
}

/// The lines of `text` outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// A heading's anchor as GitHub and GitLab make it: lower case, every
/// character but letters, digits, spaces, `-` and `_` removed, spaces
/// turned into `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor of a page, a repeated heading numbered `-1`, `-2`, ...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in prose(text) {
        let Some(h) = line.strip_prefix('#') else {
            continue;
        };
        let s = slug(h.trim_start_matches('#'));
        let n = seen.entry(s.clone()).or_insert(0);
        out.insert(if *n == 0 {
            s.clone()
        } else {
            format!("{s}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of the inline links `[text](target)` in `line`.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else { break };
        out.push(after[..end].to_owned());
        rest = &after[end..];
    }
    out
}

#[test]
fn relative_links_resolve() {
    let root = repo_root();
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages(&root) {
        let text =
            std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        let dir = page.parent().expect("a page's folder");
        for line in prose(&text) {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (file, anchor) = match target.split_once('#') {
                    Some((f, a)) => (f, Some(a)),
                    None => (target.as_str(), None),
                };
                let path = if file.is_empty() {
                    page.clone()
                } else {
                    dir.join(file)
                };
                let name = format!("{}: {target}", page.strip_prefix(&root).unwrap().display());
                if !path.exists() {
                    broken.push(format!("{name} (no such file)"));
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                if path.extension().is_some_and(|x| x == "md") {
                    let linked = std::fs::read_to_string(&path).unwrap();
                    if !anchors(&linked).contains(anchor) {
                        broken.push(format!("{name} (no such heading)"));
                    }
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the parser broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn readme_indexes_every_doc_page() {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    for page in pages(&root)
        .iter()
        .filter(|p| p.starts_with(root.join("docs")))
    {
        let rel = page.strip_prefix(&root).unwrap().display().to_string();
        assert!(
            readme.contains(&format!("]({rel})")),
            "README.md does not link {rel}: add it to its Documentation table"
        );
    }
}

#[test]
fn slugs_follow_the_forge_rule() {
    assert_eq!(
        slug(" Drop events (`--probes drops`)"),
        "drop-events---probes-drops"
    );
    assert_eq!(slug(" A tag's life"), "a-tags-life");
    assert_eq!(slug(" Versions 1, 2 and 3"), "versions-1-2-and-3");
    assert_eq!(
        anchors("# A\n## A\n```\n# not a heading\n```\n## B"),
        ["a", "a-1", "b"].into_iter().map(String::from).collect()
    );
    assert_eq!(
        link_targets("see [x](a.md#b) and [y](c.md)"),
        ["a.md#b", "c.md"]
    );
}
