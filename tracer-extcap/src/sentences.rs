//! What the program tells Wireshark when it asks (extcap(4)): its
//! interface, the link type of that interface, and the options of its
//! capture dialog. Each sentence is one line of `{key=value}` pairs.

/// The one interface this program offers.
pub const INTERFACE: &str = "nettrace";
/// LINKTYPE_USER0: what the sink's pcapng stream declares in its IDBs
/// (one capture record per frame), as in its files.
pub const LINKTYPE_USER0: u32 = 147;

/// Answer to `--extcap-interfaces`.
pub fn interfaces(version: &str) -> String {
    format!(
        "extcap {{version={version}}}\n\
         interface {{value={INTERFACE}}}{{display=nettrace live events (a sink's --live-listen)}}\n"
    )
}

/// Answer to `--extcap-dlts` for `iface`, or None for an interface this
/// program does not have.
pub fn dlts(iface: &str) -> Option<String> {
    (iface == INTERFACE).then(|| {
        format!(
            "dlt {{number={LINKTYPE_USER0}}}{{name=USER0}}{{display=nettrace capture records}}\n"
        )
    })
}

/// Answer to `--extcap-config` for `iface`: the capture dialog's fields.
pub fn config(iface: &str) -> Option<String> {
    (iface == INTERFACE).then(|| {
        concat!(
            "arg {number=0}{call=--sink}{display=Sink live address}{type=string}{required=true}",
            "{tooltip=HOST:PORT the sink listens on with --live-listen, e.g. 10.0.0.2:7421}\n",
            "arg {number=1}{call=--key-file}{display=Deployment key file}{type=fileselect}",
            "{mustexist=true}{required=false}",
            "{tooltip=The file the sink was given with --key-file, if it was given one}\n",
            "arg {number=2}{call=--connect-timeout}{display=Connect timeout (s)}{type=unsigned}",
            "{range=1,60}{default=5}{required=false}",
            "{tooltip=How long to wait for the sink to accept and answer the handshake}\n",
        )
        .to_owned()
    })
}

/// Answer to a capture filter check: empty when the filter is acceptable,
/// else why not (Wireshark shows a non-empty answer as the error).
pub fn filter_problem(filter: &str) -> String {
    if filter.trim().is_empty() {
        String::new()
    } else {
        "the nettrace live stream takes no capture filter: the sink sends every event; \
         use a display filter such as nettrace.kind == \"tx\"\n"
            .to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `{key=value}` pairs of one sentence, in order, after its keyword.
    fn pairs(line: &str) -> (String, Vec<(String, String)>) {
        let (word, rest) = line.split_once(' ').expect("keyword then pairs");
        let mut out = Vec::new();
        for part in rest
            .strip_prefix('{')
            .unwrap()
            .strip_suffix('}')
            .unwrap()
            .split("}{")
        {
            let (k, v) = part.split_once('=').expect("key=value");
            out.push((k.to_owned(), v.to_owned()));
        }
        (word.to_owned(), out)
    }

    #[test]
    fn every_sentence_parses_as_extcap_pairs() {
        let text = interfaces("1.2.3") + &dlts(INTERFACE).unwrap() + &config(INTERFACE).unwrap();
        let lines: Vec<_> = text.lines().map(pairs).collect();
        let words: Vec<_> = lines.iter().map(|(w, _)| w.as_str()).collect();
        assert_eq!(words, ["extcap", "interface", "dlt", "arg", "arg", "arg"]);
        assert_eq!(lines[0].1[0], ("version".into(), "1.2.3".into()));
        assert_eq!(lines[1].1[0], ("value".into(), INTERFACE.into()));
        assert_eq!(lines[2].1[0], ("number".into(), "147".into()));
        let calls: Vec<_> = lines[3..]
            .iter()
            .map(|(_, p)| p.iter().find(|(k, _)| k == "call").unwrap().1.clone())
            .collect();
        assert_eq!(calls, ["--sink", "--key-file", "--connect-timeout"]);
        // Argument numbers are the display order: 0, 1, 2.
        for (i, (_, p)) in lines[3..].iter().enumerate() {
            assert_eq!(p[0], ("number".into(), i.to_string()));
        }
    }

    #[test]
    fn other_interfaces_get_nothing() {
        assert!(dlts("eth0").is_none());
        assert!(config("udpdump").is_none());
    }

    #[test]
    fn only_an_empty_capture_filter_passes() {
        assert_eq!(filter_problem(""), "");
        assert_eq!(filter_problem("  "), "");
        assert!(filter_problem("udp port 53").contains("display filter"));
    }
}
