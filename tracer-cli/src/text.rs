//! Names given on a command line (host names, interface names, file name
//! prefixes) end up in logs, pcapng interface names and file names, where
//! a control character or a bidirectional override can hide or reorder
//! what an operator reads (`trace\u{202e}gnpcap.sh` shows as
//! `tracehs.pcapng`). They are refused, never stripped.

/// Unicode's bidirectional formatting characters: the embeddings and
/// overrides (U+202A..=U+202E), the isolates (U+2066..=U+2069), the marks
/// (U+200E, U+200F) and the Arabic letter mark (U+061C).
const BIDI: [(char, &str); 12] = [
    ('\u{061C}', "ARABIC LETTER MARK"),
    ('\u{200E}', "LEFT-TO-RIGHT MARK"),
    ('\u{200F}', "RIGHT-TO-LEFT MARK"),
    ('\u{202A}', "LEFT-TO-RIGHT EMBEDDING"),
    ('\u{202B}', "RIGHT-TO-LEFT EMBEDDING"),
    ('\u{202C}', "POP DIRECTIONAL FORMATTING"),
    ('\u{202D}', "LEFT-TO-RIGHT OVERRIDE"),
    ('\u{202E}', "RIGHT-TO-LEFT OVERRIDE"),
    ('\u{2066}', "LEFT-TO-RIGHT ISOLATE"),
    ('\u{2067}', "RIGHT-TO-LEFT ISOLATE"),
    ('\u{2068}', "FIRST STRONG ISOLATE"),
    ('\u{2069}', "POP DIRECTIONAL ISOLATE"),
];

/// True for a character that must not reach a name an operator reads: a
/// control character or a bidirectional formatting character (what a
/// receiver replaces in names that come over the wire).
pub fn hides_text(c: char) -> bool {
    c.is_control() || BIDI.iter().any(|(b, _)| *b == c)
}

/// Why `s` cannot name anything, if it cannot: it holds a control
/// character or a bidirectional formatting character (the first one is
/// named).
pub fn name_problem(s: &str) -> Option<String> {
    for c in s.chars() {
        if c.is_control() {
            return Some(format!("it contains the control character {c:?}"));
        }
        if let Some((_, name)) = BIDI.iter().find(|(b, _)| *b == c) {
            return Some(format!(
                "it contains U+{:04X} ({name}), a bidirectional formatting character that reorders text on screen",
                u32::from(c)
            ));
        }
    }
    None
}

/// Why `name` cannot be a host's name in a trace of at most `max_len`
/// bytes, if it cannot.
pub fn hostname_problem(name: &str, max_len: usize) -> Option<String> {
    if name.is_empty() {
        return Some("it is empty".to_owned());
    }
    if name.len() > max_len {
        return Some(format!(
            "it is {} bytes long; the trace carries at most {max_len}",
            name.len()
        ));
    }
    name_problem(name)
}

/// A host's name in a trace: 1 to `max_len` bytes of UTF-8 without
/// control or bidirectional formatting characters.
pub fn hostname(max_len: usize) -> impl Fn(&str) -> Result<String, String> + Clone + Send + Sync {
    move |s| match hostname_problem(s, max_len) {
        Some(p) => Err(p),
        None => Ok(s.to_owned()),
    }
}

/// Longest network interface name (IFNAMSIZ - 1).
const IFNAME_MAX: usize = 15;

/// A network interface name as the kernel accepts one: 1 to 15 bytes, not
/// `.` or `..`, without `/`, `:` or white space (nor control or
/// bidirectional characters).
pub fn iface_name(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > IFNAME_MAX {
        return Err(format!(
            "an interface name has 1 to {IFNAME_MAX} bytes, this one {}",
            s.len()
        ));
    }
    if s == "." || s == ".." || s.contains(['/', ':']) || s.chars().any(char::is_whitespace) {
        return Err(format!(
            "{s:?} is not an interface name (no '/', ':' or spaces; see `ip link`)"
        ));
    }
    match name_problem(s) {
        Some(p) => Err(p),
        None => Ok(s.to_owned()),
    }
}

/// Longest file name part (the rest of a file's name is added to it and a
/// file name has at most 255 bytes).
const FILE_PART_MAX: usize = 128;

/// A part of a file name (a prefix): 1 to 128 bytes, no `/`, no control
/// or bidirectional characters.
pub fn file_name_part(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > FILE_PART_MAX {
        return Err(format!(
            "a file name prefix has 1 to {FILE_PART_MAX} bytes, this one {}",
            s.len()
        ));
    }
    if s.contains('/') {
        return Err(format!(
            "{s:?} contains '/': give a name, the directory is --output"
        ));
    }
    match name_problem(s) {
        Some(p) => Err(p),
        None => Ok(s.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bidirectional_formatting_character_is_refused_and_named() {
        let mut seen = 0;
        for c in ('\u{0}'..='\u{2fff}').filter(|c| !c.is_control()) {
            let s = format!("web{c}1");
            if let Some(p) = name_problem(&s) {
                assert!(p.contains(&format!("U+{:04X}", u32::from(c))), "{p}");
                seen += 1;
            }
        }
        assert_eq!(seen, BIDI.len());
        for c in [
            '\u{61c}', '\u{200e}', '\u{200f}', '\u{202a}', '\u{202e}', '\u{2066}', '\u{2069}',
        ] {
            assert!(hostname(64)(&format!("a{c}b")).is_err(), "{c:?}");
        }
    }

    #[test]
    fn host_names_keep_their_length_and_character_rules() {
        let p = hostname(64);
        assert_eq!(p("web-1"), Ok("web-1".to_owned()));
        assert_eq!(p("").unwrap_err(), "it is empty");
        assert!(p(&"é".repeat(32)).is_ok(), "64 bytes");
        assert!(p(&"é".repeat(33)).unwrap_err().contains("66 bytes long"));
        assert!(p("web\u{1b}[31m-1")
            .unwrap_err()
            .contains("control character '\\u{1b}'"));
        assert!(
            p("שרת-1").is_ok(),
            "right-to-left letters are fine, overrides are not"
        );
    }

    #[test]
    fn interface_names_follow_the_kernel() {
        for ok in ["eth0", "enp3s0f1", "veth-a", "x"] {
            assert_eq!(iface_name(ok).as_deref(), Ok(ok));
        }
        for bad in [
            "",
            "a-sixteen-bytes!",
            ".",
            "..",
            "a/b",
            "eth0:1",
            "a b",
            "e\u{202e}th",
        ] {
            assert!(iface_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn file_name_prefixes_cannot_hide_their_extension() {
        assert_eq!(file_name_part("trace").as_deref(), Ok("trace"));
        for bad in [
            "",
            "a/b",
            "../x",
            "trace\u{202e}gnpcap",
            "t\nx",
            &"x".repeat(129),
        ] {
            assert!(file_name_part(bad).is_err(), "{bad:?}");
        }
    }
}
