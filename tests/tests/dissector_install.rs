//! The dissector installed as a personal plugin (not through `-X
//! lua_script:`), in a temporary HOME: tshark loads it without a Lua error
//! and lists every field it declares and both preferences.

use std::collections::BTreeSet;
use std::process::Command;

use tracer_e2e::tshark::{dissector_path, Tshark};

/// `tshark -G <report>` with the plugin in `$HOME/.local/lib/wireshark/plugins`;
/// returns stdout, failing on a Lua problem on stderr.
fn report(tshark: &Tshark, home: &std::path::Path, what: &str) -> String {
    let out = Command::new(tshark.exe())
        .arg("-G")
        .arg(what)
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .output()
        .expect("run tshark");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tshark -G {what}: {stderr}");
    assert!(!stderr.contains("Lua"), "tshark -G {what}: {stderr}");
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn installed_plugin_lists_every_field() {
    let Some(tshark) = Tshark::or_skip("installed_plugin_lists_every_field") else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let plugins = home.path().join(".local/lib/wireshark/plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(dissector_path(), plugins.join("nettrace.lua")).unwrap();

    // Every ProtoField the script declares, by its filter name.
    let script = std::fs::read_to_string(dissector_path()).unwrap();
    let declared: BTreeSet<String> = script
        .split("ProtoField.")
        .skip(1)
        .filter_map(|s| {
            // ProtoField.<type>("<abbrev>", ...
            let (ty, rest) = s.split_once("(\"")?;
            ty.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
                .then(|| rest.split('"').next())?
        })
        .map(str::to_owned)
        .collect();
    assert!(declared.len() > 50, "declared: {declared:?}");
    assert!(declared.iter().all(|f| f.starts_with("nettrace.")));

    // "F\t<name>\t<abbrev>\t..." per field.
    let listed: BTreeSet<String> = report(&tshark, home.path(), "fields")
        .lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            (cols.first() == Some(&"F") && cols.get(2)?.starts_with("nettrace."))
                .then(|| cols[2].to_owned())
        })
        .collect();
    // Expert infos are listed as fields too.
    let missing: Vec<_> = declared.difference(&listed).collect();
    assert!(missing.is_empty(), "not listed by -G fields: {missing:?}");
    assert!(listed.contains("nettrace.unknown_kind"), "experts listed");

    let prefs = report(&tshark, home.path(), "defaultprefs");
    for p in [
        "#nettrace.udp_port: 7420",
        "#nettrace.ip_stats: TRUE",
        "#nettrace.peer_links: TRUE",
    ] {
        assert!(prefs.lines().any(|l| l == p), "{p} in -G defaultprefs");
    }
}
