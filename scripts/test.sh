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
cargo test --workspace --locked
