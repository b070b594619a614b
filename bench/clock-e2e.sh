#!/usr/bin/env bash
# End-to-end accuracy of event timestamps between hosts whose clocks really
# differ. Two agents in two namespaces of one kernel, each on its own
# simulated oscillator (tracer-agent --simulate-oscillator: offset, drift,
# random-walk wander, optional noise), one sink, --clock sink, a paced TCP
# flow between them. Every stamp of every event sent after the servos
# settled is compared with the truth each agent logs (--oscillator-truth:
# the true CLOCK_MONOTONIC / CLOCK_REALTIME stamp, mapped through this
# kernel's CLOCK_TAI, which the sink follows): residual = global stamp -
# truth. Reported as |residual| p50 / p99 / max per host and for both,
# idle (the paced flow alone) and under load (iperf3 at full speed on the
# same veth while the servos settle and during the flow). The sink shares
# namespace b with agent B, so only agent A's exchange crosses the veth;
# B's runs over b's loopback.
#
# Then the same run with --clock system (which must be off by the
# oscillators' error), and the older realtime-only injection bench
# (tests/tests/e2e_clock.rs), which the exchange cancels by design.
#
# Knobs (environment): RUNS (3), OSC_A / OSC_B (oscillator specs,
# offset_ns,drift_ppm,wander_ppb_per_s,noise_ns,seed), CHUNKS (10000
# writes of 2000 bytes, 0.5 ms apart: about 6-8 s), INTERVAL (clock update
# period, s: 1, the agent's default), SETTLE (s between lock and the flow:
# 20), RUN_WITH (a command prefix for each test run, e.g. `flock LOCKFILE`
# to serialise each run with other namespace tests without holding a lock
# for the whole bench). Runs the ignored e2e test residual_bench, one run
# at a time. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh # iperf3 on a fresh machine
cargo build --workspace --bins --locked -q
cargo test -q --locked -p tracer-e2e --test e2e_oscillator --no-run

RUNS=${RUNS:-3}
export E2E_OSC_A=${OSC_A:-3000000,50,5,0,1}
export E2E_OSC_B=${OSC_B:--2000000,-30,5,0,2}
export E2E_OSC_CHUNKS=${CHUNKS:-10000}
export E2E_OSC_INTERVAL=${INTERVAL:-1}
export E2E_OSC_SETTLE=${SETTLE:-20}

bench() { # clock load
    E2E_OSC_CLOCK=$1 E2E_OSC_LOAD=$2 ${RUN_WITH:-} cargo test -q --locked -p tracer-e2e \
        --test e2e_oscillator residual_bench -- --ignored --nocapture --test-threads 1 2>&1 \
        | grep "|residual|" || { echo "run failed: clock $1 load $2" >&2; exit 1; }
}

echo "oscillators: A $E2E_OSC_A, B $E2E_OSC_B; clock interval ${E2E_OSC_INTERVAL}s," \
     "settle ${E2E_OSC_SETTLE}s, $E2E_OSC_CHUNKS paced writes"
# Idle and loaded runs alternate, so a slow phase of the machine hits both.
for i in $(seq "$RUNS"); do
    echo "--- run $i"
    bench sink 0
    bench sink 1
done
echo "--- reference: --clock system (off by the oscillators by design)"
bench system 0

echo "--- realtime-only injection (+3 ms / 50 ppm; the exchange cancels it)"
E2E_CLOCK_CHUNKS=${CHUNKS:-10000} ${RUN_WITH:-} cargo test -q --locked -p tracer-e2e --test e2e_clock \
    -- --nocapture --test-threads 1 2>&1 | grep "events after lock"
