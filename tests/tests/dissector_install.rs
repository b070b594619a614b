//! The dissector installed the one documented way: its plugin folder
//! (`wireshark/nettrace/`) copied whole into the personal Lua plugin folder
//! of a temporary HOME, not loaded through `-X lua_script:`. tshark loads it
//! without a Lua error, knows the protocol, lists every field the parts
//! declare and the preferences, and decodes golden files exactly as `-X
//! lua_script:` on the entry does. Wireshark also loads every other `.lua`
//! file of the folder on its own, so each part, installed alone, must
//! register nothing.

mod dissector_common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use dissector_common::*;
use tracer_e2e::tshark::{dissector_dir, dissector_path, Tshark, ERROR_FILTER};
use tracer_sink::LinkType;

/// The UDP port the dissector registers by default.
const DEFAULT_PORT: u16 = 7420;

/// Runs tshark with `HOME=home` and `args`; returns stdout, failing when
/// tshark fails or reports a Lua problem on stderr (it exits 0 when a
/// plugin does not load).
fn tshark_at_home(tshark: &Tshark, home: &Path, args: &[&str]) -> String {
    let out = Command::new(tshark.exe())
        .args(args)
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .output()
        .expect("run tshark");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tshark {args:?}: {stderr}");
    assert!(!stderr.contains("Lua"), "tshark {args:?}: {stderr}");
    String::from_utf8(out.stdout).expect("utf-8")
}

/// `tshark -G <report>` with the plugin installed in `home`.
fn report(tshark: &Tshark, home: &Path, what: &str) -> String {
    tshark_at_home(tshark, home, &["-G", what])
}

/// A temporary HOME whose personal Lua plugin folder holds `files` of the
/// plugin folder, in a folder of their own as an install puts them.
fn home_with(files: &[PathBuf]) -> tempfile::TempDir {
    let home = tempfile::tempdir().expect("temporary HOME");
    let folder = home.path().join(".local/lib/wireshark/plugins/nettrace");
    std::fs::create_dir_all(&folder).expect("plugin folder");
    for f in files {
        let name = f.file_name().expect("a file name");
        std::fs::copy(f, folder.join(name)).expect("copy a plugin file");
    }
    home
}

/// Every file of the plugin folder (the install copies all of it).
fn plugin_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dissector_dir())
        .expect("read the plugin folder")
        .map(|e| e.expect("plugin folder entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// The `.lua` parts other than the entry.
fn parts() -> Vec<PathBuf> {
    let entry = dissector_path();
    let parts: Vec<PathBuf> = plugin_files()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "lua") && *p != entry)
        .collect();
    assert!(parts.len() >= 5, "the plugin's parts: {parts:?}");
    parts
}

/// Filter names of every protocol (`P`) and field (`F`) line of `tshark -G
/// fields` output that belongs to nettrace.
fn nettrace_names(fields: &str) -> BTreeSet<String> {
    fields
        .lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            let abbrev = cols.get(2)?;
            (matches!(cols.first(), Some(&"F") | Some(&"P")) && abbrev.starts_with("nettrace"))
                .then(|| (*abbrev).to_owned())
        })
        .collect()
}

#[test]
fn installed_plugin_lists_every_field() {
    let Some(tshark) = Tshark::or_skip("installed_plugin_lists_every_field") else {
        return;
    };
    let home = home_with(&plugin_files());

    // Both protocols, by filter name ("<name>\t<short name>\t<filter>").
    let protocols: BTreeSet<String> = report(&tshark, home.path(), "protocols")
        .lines()
        .filter_map(|l| l.split('\t').nth(2).map(str::to_owned))
        .collect();
    for p in ["nettrace", "nettrace_file"] {
        assert!(protocols.contains(p), "tshark -G protocols lacks {p}");
    }

    // Every ProtoField any file of the plugin declares, by its filter name.
    let mut declared = BTreeSet::new();
    for file in plugin_files() {
        let script = std::fs::read_to_string(&file).expect("read a plugin file");
        declared.extend(
            script
                .split("ProtoField.")
                .skip(1)
                .filter_map(|s| {
                    // ProtoField.<type>("<abbrev>", ...
                    let (ty, rest) = s.split_once("(\"")?;
                    ty.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_')
                        .then(|| rest.split('"').next())?
                })
                .map(str::to_owned),
        );
    }
    assert!(declared.len() > 50, "declared: {declared:?}");
    assert!(declared.iter().all(|f| f.starts_with("nettrace.")));

    // "F\t<name>\t<abbrev>\t..." per field.
    let listed = nettrace_names(&report(&tshark, home.path(), "fields"));
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

/// The golden events twice: as the sink's pcapng (capture records, link
/// type USER0) and as live agent datagrams on the default UDP port.
fn golden_files(dir: &Path) -> Vec<PathBuf> {
    let records = dir.join("golden.pcapng");
    let frames: Vec<Frame> = golden_datagrams()
        .into_iter()
        .flat_map(|(_, events)| events)
        .map(|s| Frame {
            interface: u32::from(s.agent.agent_id != AGENT_A.agent_id),
            time_ns: s.time_ns,
            data: capture_payload(&s),
        })
        .collect();
    write_pcapng(
        &records,
        LinkType::User0,
        &[AGENT_A.host, AGENT_B.host],
        &frames,
    );
    let udp = dir.join("golden-udp.pcapng");
    let frames: Vec<Frame> = golden_datagrams()
        .into_iter()
        .enumerate()
        .map(|(seq, (agent, events))| Frame {
            interface: 0,
            time_ns: events[0].time_ns,
            data: ethernet_udp(&datagram(&agent, seq as u64, 0, &events), DEFAULT_PORT),
        })
        .collect();
    write_pcapng(&udp, LinkType::Ethernet, &["lo"], &frames);
    vec![records, udp]
}

#[test]
fn installed_plugin_decodes_as_lua_script() {
    let Some(tshark) = Tshark::or_skip("installed_plugin_decodes_as_lua_script") else {
        return;
    };
    let installed = home_with(&plugin_files());
    // The other way needs a HOME without the plugin (both at once would
    // register the protocol twice) and without anyone's preferences.
    let bare = tempfile::tempdir().expect("temporary HOME");
    let script = format!("lua_script:{}", dissector_path().display());
    let dir = tempfile::tempdir().expect("temporary folder");
    for file in golden_files(dir.path()) {
        let file = file.to_str().expect("utf-8 path");
        // Every field of every frame, in two passes (the links to later
        // frames), and the frames the dissector flags.
        let decode = ["-n", "-2", "-r", file, "-V"];
        let by_folder = tshark_at_home(&tshark, installed.path(), &decode);
        let by_script = tshark_at_home(
            &tshark,
            bare.path(),
            &["-X", &script, "-n", "-2", "-r", file, "-V"],
        );
        // Every frame (a line "Frame N: ...") has a nettrace tree.
        let frames = by_folder
            .lines()
            .filter(|l| l.starts_with("Frame "))
            .count();
        let decoded = by_folder
            .lines()
            .filter(|l| l.starts_with("nettrace: kernel network-stack events"))
            .count();
        assert!(
            frames >= 4 && decoded == frames,
            "{file}: {decoded} of {frames} frames decoded by the installed plugin:\n{by_folder}"
        );
        assert_eq!(
            by_folder, by_script,
            "{file}: the installed folder and -X lua_script: decode differently"
        );
        let flagged = tshark_at_home(
            &tshark,
            installed.path(),
            &["-n", "-r", file, "-Y", ERROR_FILTER],
        );
        assert!(flagged.is_empty(), "{file}: flagged frames:\n{flagged}");
    }
}

#[test]
fn each_part_alone_registers_nothing() {
    let Some(tshark) = Tshark::or_skip("each_part_alone_registers_nothing") else {
        return;
    };
    for part in parts() {
        let home = home_with(std::slice::from_ref(&part));
        // Loaded (a Lua error would fail here) and nothing of nettrace
        // registered: no protocol, no field, no expert.
        let names = nettrace_names(&report(&tshark, home.path(), "fields"));
        assert!(
            names.is_empty(),
            "{} alone registers {names:?}",
            part.display()
        );
        let plugins = report(&tshark, home.path(), "plugins");
        let name = part.file_name().and_then(|n| n.to_str()).expect("a name");
        assert!(
            plugins.lines().any(|l| l.starts_with(name)),
            "{name} was not loaded as a Lua plugin: {plugins}"
        );
    }
}
