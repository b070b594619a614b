//! The bench scripts' shared Python helpers check themselves: a report
//! that reads a target as met must do so from a correct interval.

use std::process::Command;

use tracer_e2e::bins::repo_root;
use tracer_e2e::skip::skip;

/// bench/lib/verdict.py: the median's confidence interval from the rounds'
/// order statistics, and the verdict it gives against a target.
#[test]
fn verdict_helper_passes_its_self_check() {
    let script = repo_root().join("bench/lib/verdict.py");
    let out = match Command::new("python3").arg(&script).output() {
        Ok(o) => o,
        Err(e) => return skip(&format!("cannot run python3: {e}")),
    };
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok",
        "{} failed its self-check: {}{}",
        script.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
