//! No source file of any crate holds more than [`MAX_LINES`] lines before
//! its `#[cfg(test)] mod tests` block: a file that long holds more than one
//! concern. Every library and binary of the workspace is read (the files
//! its `mod` declarations reach); the test names each file over the limit
//! and its count. Needs neither root nor BPF.

use std::collections::BTreeMap;

use tracer_e2e::source_tree::{crate_targets, module_files, relative};

/// Most lines a file may have before its tests.
const MAX_LINES: usize = 500;

/// Files still over the limit, each being split by whoever owns it now.
/// The list may only shrink: the test fails when a file not listed is over
/// the limit, and when a listed file is no longer over it (then drop it
/// from here).
const BEING_SPLIT: &[&str] = &[];

/// Lines of `text` before its `#[cfg(test)]` + `mod tests` block (other
/// attributes may sit between the two), or all of them without one.
fn lines_before_tests(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() != "#[cfg(test)]" {
            continue;
        }
        let next = lines[i + 1..]
            .iter()
            .map(|l| l.trim())
            .find(|l| !l.is_empty() && !l.starts_with("#["));
        if next.is_some_and(|l| l.starts_with("mod tests")) {
            return i;
        }
    }
    lines.len()
}

/// Every crate's source file (relative to the workspace root) with its
/// count of lines before the tests.
fn counts() -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for target in crate_targets() {
        for f in module_files(&target.root) {
            let text = std::fs::read_to_string(&f.path).expect("readable source");
            out.insert(relative(&f.path), lines_before_tests(&text));
        }
    }
    out
}

#[test]
fn no_source_file_is_over_the_limit_before_its_tests() {
    let counts = counts();
    let mut problems = Vec::new();
    for (file, n) in &counts {
        if *n > MAX_LINES && !BEING_SPLIT.contains(&file.as_str()) {
            problems.push(format!(
                "{file}: {n} lines before its tests (limit {MAX_LINES})"
            ));
        }
    }
    for file in BEING_SPLIT {
        match counts.get(*file) {
            Some(n) if *n > MAX_LINES => {}
            Some(n) => problems.push(format!(
                "{file}: {n} lines now, within the limit: remove it from BEING_SPLIT"
            )),
            None => problems.push(format!(
                "{file}: no such source file any more: remove it from BEING_SPLIT"
            )),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_count_stops_at_the_test_module() {
    let text = "a\nb\n#[cfg(test)]\nmod x;\n\n#[cfg(test)]\n#[allow(dead_code)]\nmod tests {\n}\n";
    assert_eq!(lines_before_tests(text), 5);
    assert_eq!(lines_before_tests("a\nb\nc\n"), 3);
}
