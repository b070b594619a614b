#!/usr/bin/env bash
# Runs every test: formatting, lints, unit and property tests, the golden
# dissector tests through tshark, and the end-to-end tests with real BPF
# programs in network namespaces (those need root).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The end-to-end tests run the real binaries.
cargo build --workspace --bins --locked
LOG=$(mktemp)
# Tests that could not run their real part (no root, no tshark, ...) list
# themselves here; they pass in libtest's count but are not passes. Under
# CI=true they fail instead (tests/skip.rs).
NETTRACE_SKIP_LOG=$(mktemp)
export NETTRACE_SKIP_LOG
trap 'rm -f "$LOG" "$NETTRACE_SKIP_LOG"' EXIT
status=0
# A watchdog, three times the suite's usual length: a test that hangs fails
# the run with everything it printed, instead of running out CI's clock.
# timeout signals the whole process group, test binaries and their children.
timeout --kill-after=60 45m cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$LOG" ||
    status=$?
if ((status == 124 || status == 137)); then
    echo "the tests did not finish within 45 minutes: the last test named above as running for over 60 seconds hung"
fi
if [[ -s "$NETTRACE_SKIP_LOG" ]]; then
    echo "skipped (could not run their real part):"
    sed 's/^/  /' "$NETTRACE_SKIP_LOG"
fi
# One closing line for the whole run (cargo prints one per test binary):
# ignored tests and skipped ones count as skipped, not passed.
skipped=$(wc -l <"$NETTRACE_SKIP_LOG")
awk -v s="$skipped" '/^test result:/ {p += $4; f += $6; i += $8}
    END {printf "tests: %d passed, %d failed, %d skipped\n", p - s, f, i + s}' "$LOG"
exit "$status"
