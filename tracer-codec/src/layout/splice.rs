//! Replacing the generated part of a checked-in file, between its marker
//! lines, and nothing else.

/// Replace the text from `begin` to `end` (both included) in `text` with
/// `generated`; `None` when the markers are missing.
pub fn splice(text: &str, begin: &str, end: &str, generated: &str) -> Option<String> {
    let b = text.find(begin)?;
    let e = b + text[b..].find(end)? + end.len();
    Some(format!("{}{}{}", &text[..b], generated, &text[e..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splice_replaces_between_markers_only() {
        let t = "a\n<B>\nold\n<E>\nz\n";
        assert_eq!(
            splice(t, "<B>", "<E>", "<B>\nnew\n<E>").as_deref(),
            Some("a\n<B>\nnew\n<E>\nz\n")
        );
        assert_eq!(splice(t, "<X>", "<E>", ""), None);
    }
}
