#!/usr/bin/env bash
# Issue 3, benchmark c: end to end accuracy of event timestamps. Agent and
# sink in two namespaces of one kernel (true offset 0); the agent pretends
# its clock is off by +3 ms and 50 ppm; with --clock sink every event's
# global stamp is compared with the truth (its raw monotonic stamp mapped
# through this kernel's CLOCK_TAI). Prints p50 / p99 / max |error| after
# lock, and the same for --clock system (which must show the injected error).
# Runs the end-to-end test, which also asserts the bounds.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo build --workspace --bins --locked -q
# 10000 writes with 0.5 ms pauses: about 6 s of traffic after lock, long
# enough for several clock updates at the test's 0.2 s interval.
for i in $(seq "${RUNS:-3}"); do
    E2E_CLOCK_CHUNKS=${CHUNKS:-10000} cargo test -q --locked -p tracer-e2e --test e2e_clock -- --nocapture --test-threads 1 2>&1 \
        | grep "events after lock"
done
