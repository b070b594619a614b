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
trap 'rm -f "$LOG"' EXIT
status=0
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$LOG" || status=$?
# One closing line for the whole run (cargo prints one per test binary).
awk '/^test result:/ {p += $4; f += $6; i += $8} END {printf "tests: %d passed, %d failed, %d skipped\n", p, f, i}' "$LOG"
exit "$status"
