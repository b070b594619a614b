#!/usr/bin/env bash
# Dissector cost of the cross-host peer links: tshark on one large synthetic
# two-host trace (tests/examples/peer_trace.rs: SKBS sender skbs in FLOWS
# flows, each with SENDMSG/SCHED/SND_SW/ACK, every three merged into one
# received skb with its five RX stages), in two passes (-2) and in one,
# with the links on (nettrace.peer_links, the default) and off, runs
# alternating so that both see the same machine. Optionally the dissector
# of an older commit too (BASE_REV, e.g. the commit before the links, or
# before the plugin became a folder of parts), with its default
# preferences: compare it with "on".
#
# Reports the median wall and CPU (user + system) seconds per mode and the
# ratios to "off" (and to "base" with BASE_REV). Nothing here is checked;
# the tests check correctness.
#
# Environment knobs: SKBS (default 60000), FLOWS (8), RUNS (5),
# BASE_REV (unset: no base mode), MODES (default "on off"; "base" is
# added with BASE_REV), PASSES (default "2 1").
set -euo pipefail

cd "$(dirname "$0")/.."
SKBS=${SKBS:-60000}
FLOWS=${FLOWS:-8}
RUNS=${RUNS:-5}
BASE_REV=${BASE_REV:-}
read -r -a modes <<<"${MODES:-on off}"
read -r -a passes_list <<<"${PASSES:-2 1}"

command -v tshark >/dev/null || {
    echo "tshark not found: apt-get install tshark" >&2
    exit 1
}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dissector-peer.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

cargo build --release -q -p tracer-e2e --example peer_trace
TRACE="$WORK/trace.pcapng"
frames=$(target/release/examples/peer_trace "$TRACE" "$SKBS" "$FLOWS")
SCRIPT=wireshark/nettrace/nettrace.lua
if [[ -n $BASE_REV ]]; then
    # The dissector as BASE_REV had it: the plugin folder (entry
    # wireshark/nettrace/nettrace.lua, which loads the parts beside it) or,
    # before there was one, the single file wireshark/nettrace.lua.
    mkdir -p "$WORK/base"
    git archive "$BASE_REV" wireshark | tar -x -C "$WORK/base"
    BASE_SCRIPT=$WORK/base/wireshark/nettrace/nettrace.lua
    [[ -f $BASE_SCRIPT ]] || BASE_SCRIPT=$WORK/base/wireshark/nettrace.lua
    modes+=(base)
fi
echo "# $frames, $(stat -c %s "$TRACE") bytes; tshark $(tshark --version 2>/dev/null | head -1 | awk '{print $3}'), $(nproc) cores, $RUNS runs"

# run MODE PASSES -> "wall cpu" seconds of one tshark run
run() {
    local mode=$1 passes=$2 script=$SCRIPT args=()
    case $mode in
        on) args+=(-o nettrace.peer_links:TRUE) ;;
        off) args+=(-o nettrace.peer_links:FALSE) ;;
        base) script=$BASE_SCRIPT ;;
    esac
    [[ $passes == 2 ]] && args+=(-2)
    local TIMEFORMAT='%R %U %S' t
    # Every frame's Info column (the peer links add to it): each frame is
    # dissected in full. The same fields in every mode, so that an older
    # dissector (BASE_REV) runs the same command.
    if ! t=$({ time tshark -n -X "lua_script:$script" -r "$TRACE" "${args[@]}" -T fields \
        -e frame.number -e nettrace.stage -e _ws.col.Info >/dev/null 2>"$WORK/err"; } 2>&1) ||
        grep -q "Lua" "$WORK/err"; then
        echo "tshark failed or reported a Lua problem ($mode):" >&2
        cat "$WORK/err" >&2
        echo "0 0"
        return
    fi
    awk '{printf "%.2f %.2f\n", $1, $2 + $3}' <<<"$t"
}

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

for passes in "${passes_list[@]}"; do
    declare -A wall=() cpu=()
    for _ in $(seq "$RUNS"); do
        for m in "${modes[@]}"; do
            read -r w c < <(run "$m" "$passes")
            [[ $w == 0 ]] && exit 1
            wall[$m]+="$w "
            cpu[$m]+="$c "
        done
    done
    echo "passes=$passes"
    for m in "${modes[@]}"; do
        wm=$(tr ' ' '\n' <<<"${wall[$m]}" | grep . | median)
        cm=$(tr ' ' '\n' <<<"${cpu[$m]}" | grep . | median)
        ratios=""
        for ref in off base; do
            [[ -n ${cpu[$ref]:-} && $ref != "$m" ]] || continue
            wr=$(tr ' ' '\n' <<<"${wall[$ref]}" | grep . | median)
            cr=$(tr ' ' '\n' <<<"${cpu[$ref]}" | grep . | median)
            ratios+=$(printf "  cpu/%s %.3f  wall/%s %.3f" "$ref" \
                "$(awk -v a="$cm" -v b="$cr" 'BEGIN {print a / b}')" "$ref" \
                "$(awk -v a="$wm" -v b="$wr" 'BEGIN {print a / b}')")
        done
        printf "  %-4s wall %6.2f s  cpu %6.2f s%s  (cpu runs: %s)\n" \
            "$m" "$wm" "$cm" "$ratios" "${cpu[$m]% }"
    done
    unset wall cpu
done
