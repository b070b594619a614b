//! Running tshark with the nettrace Lua dissector (the plugin folder
//! `wireshark/nettrace/`, through its entry `nettrace.lua`) and parsing what
//! it prints.
//!
//! tshark exits 0 even when a Lua script fails to load or a Lua dissector
//! raises an error, so every query here also checks stderr for Lua errors
//! and asks tshark, in a second run, which frames carry a Lua error, are
//! malformed or have an expert info of severity "error". A test that wants
//! clean input gets an `Err` for any of those; a test of bad input can allow
//! expert errors (never Lua errors) with [`Query::allow_expert_errors`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::bins::repo_root;

/// Display filter matching every frame a clean decode must not have.
pub const ERROR_FILTER: &str = "_ws.lua.error || _ws.malformed || _ws.expert.severity == error";

/// Separates the occurrences of a field that appears several times in one
/// frame (a control character: no field value contains it).
const AGGREGATOR: char = '\u{1f}';

/// The dissector's plugin folder in this repository: what an install copies
/// whole into a Wireshark Lua plugin folder.
pub fn dissector_dir() -> PathBuf {
    repo_root().join("wireshark").join("nettrace")
}

/// The plugin's entry script, the one `-X lua_script:` names (it loads the
/// other parts of its folder).
pub fn dissector_path() -> PathBuf {
    dissector_dir().join("nettrace.lua")
}

/// One decoded frame: field name -> every occurrence, in tree order.
/// A field absent from the frame has no entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Row(pub BTreeMap<String, Vec<String>>);

impl Row {
    /// All occurrences of `field` (empty when absent).
    pub fn all(&self, field: &str) -> &[String] {
        self.0.get(field).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The single occurrence of `field`; panics if it is absent or repeated.
    pub fn one(&self, field: &str) -> &str {
        match self.all(field) {
            [v] => v,
            other => panic!("field {field}: expected one value, got {other:?} in {self:?}"),
        }
    }

    /// The single occurrence of `field`, if any; panics if repeated.
    pub fn opt(&self, field: &str) -> Option<&str> {
        match self.all(field) {
            [] => None,
            [v] => Some(v),
            other => panic!("field {field}: expected at most one value, got {other:?}"),
        }
    }

    /// True when the frame has `field`.
    pub fn has(&self, field: &str) -> bool {
        !self.all(field).is_empty()
    }
}

/// What to ask tshark.
#[derive(Debug, Clone, Default)]
pub struct Query {
    /// Display filter (`-Y`).
    pub filter: Option<String>,
    /// Preferences (`-o name:value`), e.g. `("nettrace.udp_port", "9999")`.
    pub prefs: Vec<(String, String)>,
    /// Two-pass analysis (`-2`), as the GUI re-dissects frames.
    pub two_pass: bool,
    /// "Decode As" rules (`-d`), e.g. `udp.port==9999,nettrace`.
    pub decode_as: Vec<String>,
    /// Allow frames with expert errors or malformed marks (bad-input tests).
    /// Lua errors are never allowed.
    pub allow_expert_errors: bool,
}

impl Query {
    /// A query with a display filter.
    pub fn filter(mut self, filter: &str) -> Self {
        self.filter = Some(filter.to_owned());
        self
    }

    /// A query with one more preference.
    pub fn pref(mut self, name: &str, value: &str) -> Self {
        self.prefs.push((name.to_owned(), value.to_owned()));
        self
    }

    /// A query with one more "Decode As" rule (`-d`).
    pub fn decode_as(mut self, rule: &str) -> Self {
        self.decode_as.push(rule.to_owned());
        self
    }

    /// A two-pass query.
    pub fn two_pass(mut self) -> Self {
        self.two_pass = true;
        self
    }

    /// A query that tolerates expert errors (but not Lua errors).
    pub fn allow_expert_errors(mut self) -> Self {
        self.allow_expert_errors = true;
        self
    }
}

/// A frame tshark flagged: its number and expert messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlaggedFrame {
    /// Frame number (from 1).
    pub number: u32,
    /// True when the frame carries a Lua error.
    pub lua_error: bool,
    /// Expert info messages of the frame.
    pub messages: Vec<String>,
}

/// A tshark executable.
#[derive(Debug, Clone)]
pub struct Tshark {
    exe: PathBuf,
}

impl Tshark {
    /// tshark from `$TSHARK` or `PATH`; `None` when it is not installed.
    pub fn find() -> Option<Self> {
        if let Some(p) = std::env::var_os("TSHARK") {
            let p = PathBuf::from(p);
            return p.is_file().then_some(Tshark { exe: p });
        }
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .map(|d| d.join("tshark"))
            .find(|p| p.is_file())
            .map(|exe| Tshark { exe })
    }

    /// tshark, or `None` after printing why the calling test is skipped.
    /// Tests call this first and return early on `None`.
    pub fn or_skip(test: &str) -> Option<Self> {
        let t = Self::find();
        if t.is_none() {
            crate::skip::skip(&format!(
                "{test}: tshark not found (install tshark or set TSHARK)"
            ));
        }
        t
    }

    /// Path of the tshark executable.
    pub fn exe(&self) -> &Path {
        &self.exe
    }

    /// Run tshark with the dissector on `file` plus `args`; returns stdout.
    /// Fails when tshark fails or reports a Lua problem on stderr (it exits
    /// 0 in that case, so stderr is the only sign of a script that did not
    /// load).
    pub fn run(&self, file: &Path, query: &Query, args: &[&str]) -> Result<String, String> {
        let mut cmd = Command::new(&self.exe);
        cmd.arg("-n")
            .arg("-X")
            .arg(format!("lua_script:{}", dissector_path().display()))
            .arg("-r")
            .arg(file);
        for (name, value) in &query.prefs {
            cmd.arg("-o").arg(format!("{name}:{value}"));
        }
        for rule in &query.decode_as {
            cmd.arg("-d").arg(rule);
        }
        if query.two_pass {
            cmd.arg("-2");
        }
        cmd.args(args);
        let out = cmd
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.exe.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            return Err(format!("tshark {cmd:?} failed ({}): {stderr}", out.status));
        }
        // "Lua: Error during loading", "Lua: Error: ...", "Lua: syntax error".
        if stderr.contains("Lua: ") || stderr.contains("Lua error") {
            return Err(format!("tshark reported a Lua problem: {stderr}"));
        }
        Ok(stdout)
    }

    /// Frames that carry a Lua error, a malformed mark or an expert error.
    pub fn flagged_frames(&self, file: &Path, query: &Query) -> Result<Vec<FlaggedFrame>, String> {
        let q = Query {
            filter: Some(ERROR_FILTER.to_owned()),
            ..query.clone()
        };
        let rows = self.fields_unchecked(
            file,
            &["frame.number", "_ws.lua.error", "_ws.expert.message"],
            &q,
        )?;
        Ok(rows
            .iter()
            .map(|r| FlaggedFrame {
                number: r.one("frame.number").parse().expect("frame number"),
                lua_error: r.has("_ws.lua.error"),
                messages: r.all("_ws.expert.message").to_vec(),
            })
            .collect())
    }

    /// Fails on any Lua error, and unless `query.allow_expert_errors`, on any
    /// malformed frame or expert error.
    pub fn check_clean(&self, file: &Path, query: &Query) -> Result<(), String> {
        let flagged = self.flagged_frames(file, query)?;
        let bad: Vec<_> = flagged
            .iter()
            .filter(|f| f.lua_error || !query.allow_expert_errors)
            .collect();
        if bad.is_empty() {
            Ok(())
        } else {
            Err(format!("dissector flagged frames: {bad:#?}"))
        }
    }

    /// Decode `file` and return the given fields of every frame (matching
    /// `query.filter`), after [`check_clean`](Self::check_clean).
    pub fn fields(&self, file: &Path, fields: &[&str], query: &Query) -> Result<Vec<Row>, String> {
        self.check_clean(file, query)?;
        self.fields_unchecked(file, fields, query)
    }

    /// `-T fields` output without the error check.
    fn fields_unchecked(
        &self,
        file: &Path,
        fields: &[&str],
        query: &Query,
    ) -> Result<Vec<Row>, String> {
        let mut args: Vec<String> = vec![
            "-T".into(),
            "fields".into(),
            "-E".into(),
            "separator=/t".into(),
            "-E".into(),
            "quote=n".into(),
            "-E".into(),
            "occurrence=a".into(),
            "-E".into(),
            format!("aggregator={AGGREGATOR}"),
        ];
        if let Some(f) = &query.filter {
            args.push("-Y".into());
            args.push(f.clone());
        }
        for f in fields {
            args.push("-e".into());
            args.push((*f).to_owned());
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let stdout = self.run(file, query, &argv)?;
        Ok(parse_fields(&stdout, fields))
    }
}

/// Parse `-T fields` output (tab-separated, occurrences joined by
/// [`AGGREGATOR`]) into one [`Row`] per line.
fn parse_fields(stdout: &str, fields: &[&str]) -> Vec<Row> {
    stdout
        .lines()
        .map(|line| {
            let mut row = BTreeMap::new();
            for (name, value) in fields.iter().zip(line.split('\t')) {
                if !value.is_empty() {
                    let values = value.split(AGGREGATOR).map(str::to_owned).collect();
                    row.insert((*name).to_owned(), values);
                }
            }
            Row(row)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tabs_and_occurrences() {
        let out = "1\ta\u{1f}b\t\n2\t\tz\n";
        let rows = parse_fields(out, &["n", "x", "y"]);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].all("x"), ["a", "b"]);
        assert!(!rows[0].has("y"));
        assert_eq!(rows[1].one("y"), "z");
        assert!(!rows[1].has("x"));
    }
}
