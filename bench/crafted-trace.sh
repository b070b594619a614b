#!/usr/bin/env bash
# What a crafted trace costs the analyst: seconds in `tshark -2` with the
# dissector and in nettrace-match for each shape of tracer_testdata::crafted
# (same-skb: every frame claims one skb; retransmit-storm: one segment sent
# every 50 µs; nested-ranges: receptions of ever longer ranges from one
# byte; waiting-skbs: skbs no socket stage reaches; udp-socket: one busy
# UDP socket) against the normal synthetic two-host trace of the same size,
# in the same run. Prints one line per (reader, size, shape): median
# seconds over RUNS and the ratio to the normal trace. Linear readers keep
# the ratio flat as the size grows; a quadratic one multiplies it by ten.
#
# Environment knobs: TSHARK_SIZES (default "2000 20000 200000"; the
# largest takes about 100 s per shape and run here), MATCH_SIZES
# ("2000 20000 200000"), RUNS (3), SHAPES (all), DISSECTOR (default
# wireshark/nettrace/nettrace.lua, the plugin's entry: for before/after
# figures give an older checkout's, e.g. DIR/wireshark/nettrace/nettrace.lua
# after `git archive REV wireshark | tar -x -C DIR`),
# TIMEOUT (600 s per run; a run past it is reported as ">TIMEOUT").
set -euo pipefail

cd "$(dirname "$0")/.."
source scripts/setup.sh
TSHARK_SIZES=${TSHARK_SIZES:-"2000 20000 200000"}
MATCH_SIZES=${MATCH_SIZES:-"2000 20000 200000"}
RUNS=${RUNS:-3}
SHAPES=${SHAPES:-"normal same-skb retransmit-storm nested-ranges waiting-skbs udp-socket"}
DISSECTOR=${DISSECTOR:-wireshark/nettrace/nettrace.lua}
TIMEOUT=${TIMEOUT:-600}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/crafted-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

cargo build --release -q -p tracer-match -p tracer-testdata --bins --examples
MATCH=target/release/nettrace-match
CRAFT=target/release/examples/crafted-trace

# Seconds one command takes (">TIMEOUT" past the timeout).
seconds() {
    local t0 t1
    t0=$(date +%s.%N)
    if ! timeout "$TIMEOUT" "$@" >/dev/null 2>&1; then
        echo ">$TIMEOUT"
        return
    fi
    t1=$(date +%s.%N)
    python3 -c "print(f'{$t1 - $t0:.2f}')"
}

median() { python3 -c "import sys,statistics as s; v=[float(x.lstrip('>')) for x in sys.argv[1:]]; print(f'{s.median(v):.2f}')" "$@"; }

run_reader() { # reader size
    local reader=$1 size=$2 shape file times base=""
    for shape in $SHAPES; do
        file=$(cd "$WORK" && mkdir -p "$shape-$size" && cd - >/dev/null \
            && "$CRAFT" --out "$WORK/$shape-$size" --shape "$shape" --events "$size" \
            | python3 -c "import json,sys; print(json.load(sys.stdin)['file'])")
        times=()
        for _ in $(seq "$RUNS"); do
            if [[ $reader == tshark ]]; then
                times+=("$(seconds tshark -n -2 -X "lua_script:$DISSECTOR" -r "$file")")
            else
                times+=("$(seconds "$MATCH" "$file")")
            fi
        done
        local m; m=$(median "${times[@]}")
        [[ $shape == normal ]] && base=$m
        local ratio="-"
        [[ -n $base ]] && ratio=$(python3 -c "print(f'{$m / max($base, 0.01):.1f}')")
        printf '%-14s %8s events  %-17s median %8ss  (runs: %s)  x%s normal\n' \
            "$reader" "$size" "$shape" "$m" "${times[*]}" "$ratio"
    done
}

for size in $TSHARK_SIZES; do run_reader tshark "$size"; done
for size in $MATCH_SIZES; do run_reader nettrace-match "$size"; done
