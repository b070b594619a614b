#!/usr/bin/env bash
# Compressed traces (issue 18, part 4): bytes per event and sink CPU per
# event with and without zstd, side by side in one run.
#
# The same datagrams go to a sink with `--compress none` and to one with
# `--compress zstd` (level LEVELS), alternating mode by mode in each of
# ROUNDS rounds, at a fixed event rate (CPU per fixed work is steadier
# than rates on a shared machine). Sink CPU is user + system time of the
# whole process (both threads) from /proc/PID/stat, read before the final
# drain; bytes are the sink's own `bytes_written` (on disk) and
# `bytes_uncompressed`. Reported per mode: the median over rounds of
# bytes/event and CPU ns/event, and the ratios against `none` (targets:
# >= 5x smaller at <= 1.3x the CPU).
#
# Traffic (TRAFFIC):
#   flood  - the flood example's synthetic TX events at RATE events/s
#            (very regular: a ceiling for the ratio, not a typical figure);
#   agents - the demo's traffic for real (root): two namespaces joined by
#            veth, an agent in each with the demo's probes
#            (tx,rx,drops,tcp), iperf3 TCP both ways (--bidir) at
#            IPERF_RATE with one received data skb in 20 dropped on each
#            host (nftables), as the demo does, for the whole run; each round runs a fresh sink
#            per mode for SECS seconds while the agents keep sending.
#
# Env: TRAFFIC ("flood"), RATE (flood events/s, 300000), EVENTS (flood,
# 1500000), IPERF_RATE (agents, 200M as the demo; 400M is the soak's),
# SECS (agents, 10), ROUNDS (5), LEVELS ("-1", the default: zstd levels to compare, each
# a mode), BENCH_OUT_DIR (where the sinks write; default a fresh dir under
# /dev/shm when it has room, else ${TMPDIR:-/tmp}), SINK_BIN, BUILD (1).
set -euo pipefail
cd "$(dirname "$0")/.."
TRAFFIC=${TRAFFIC:-flood}
RATE=${RATE:-300000}
EVENTS=${EVENTS:-1500000}
ROUNDS=${ROUNDS:-5}
LEVELS=${LEVELS:--1}
IPERF_RATE=${IPERF_RATE:-200M}
SECS=${SECS:-10}
BUILD=${BUILD:-1}
if [[ -n ${BENCH_OUT_DIR:-} ]]; then
    BASE=$BENCH_OUT_DIR
elif [[ $(df --output=avail -k /dev/shm 2>/dev/null | tail -1) -gt $((2 << 20)) ]]; then
    BASE=/dev/shm
else
    BASE=${TMPDIR:-/tmp}
fi
WORK=$(mktemp -d "$BASE/compress-bench.XXXXXX")
A=ntr-zb-a B=ntr-zb-b AA=10.216.0.1 AB=10.216.0.2 DA=ntrzb-a DB=ntrzb-b
# Ends only processes inside this bench's own namespaces, by pid.
cleanup() {
    local ns pids
    for ns in $A $B; do
        [[ -e /run/netns/$ns ]] || continue
        pids=$(ip netns pids $ns 2>/dev/null || true)
        [[ -n $pids ]] && kill -INT $pids 2>/dev/null || true
        sleep 0.5
        pids=$(ip netns pids $ns 2>/dev/null || true)
        [[ -n $pids ]] && kill -KILL $pids 2>/dev/null || true
        ip netns del $ns 2>/dev/null || true
    done
    rm -rf "$WORK"
    return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM
[[ $BUILD == 1 ]] && cargo build --release -q --locked --bins && cargo build --release -q --locked -p tracer-sink --examples
SINK=${SINK_BIN:-target/release/tracer-sink}
HZ=$(getconf CLK_TCK)
inns() { local ns=$1; shift; nsenter --net=/run/netns/$ns -- "$@"; }

if [[ $TRAFFIC == agents ]]; then
    source scripts/setup.sh
    ip netns add $A; ip netns add $B
    ip link add $DA netns $A type veth peer name $DB netns $B
    ip -n $A addr add $AA/24 dev $DA; ip -n $B addr add $AB/24 dev $DB
    for ns in $A $B; do ip -n $ns link set lo up; done
    ip -n $A link set $DA up; ip -n $B link set $DB up
    # As the demo: one received data skb in 20 dropped on each host.
    for side in "$B dport" "$A sport"; do
        read -r ns port <<<"$side"
        inns "$ns" nft -f - <<NFT
table inet zb {
    chain input {
        type filter hook input priority 0;
        tcp $port 5201 meta length > 1000 numgen random mod 20 == 0 drop
    }
}
NFT
    done
    inns $B iperf3 -s -B $AB >/dev/null 2>&1 &
    for side in a:$A:tx,rx,drops,tcp b:$B:tx,rx,drops,tcp; do
        IFS=: read -r name ns probes <<<"$side"
        inns "$ns" target/release/tracer-agent --sink $AA:7420 --hostname "zb-$name" \
            --probes "$probes" >"$WORK/agent-$name.log" 2>&1 &
    done
    for name in a b; do
        for _ in $(seq 400); do
            grep -q "probe attached" "$WORK/agent-$name.log" && break
            sleep 0.05
        done
    done
    # Longer than every round together (iperf3 caps -t at a day); stopped by the cleanup.
    inns $A iperf3 -c $AB --bidir -t 86400 -b "$IPERF_RATE" >/dev/null 2>&1 &
    sleep 2
fi

json_field() { # name, json line
    sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" <<<"$2"
}

# run_once MODE (none | zstd:LEVEL) -> "written bytes raw_bytes cpu_ticks"
run_once() {
    local mode=$1 args=()
    case $mode in
        none) args=(--compress none) ;;
        zstd:*) args=(--compress zstd --compress-level "${mode#zstd:}") ;;
    esac
    local port=$((20000 + RANDOM % 20000)) listen
    local out="$WORK/out.$port" ns=()
    listen=127.0.0.1:$port
    if [[ $TRAFFIC == agents ]]; then
        listen=$AA:7420
        ns=(nsenter --net=/run/netns/$A --)
    fi
    "${ns[@]}" "$SINK" --listen "$listen" --output "$out" --json --stats-interval 0 \
        --no-clock-responder "${args[@]}" >"$out.stats" 2>"$out.log" &
    local pid=$!
    for _ in $(seq 50); do
        grep -q " started" "$out.log" 2>/dev/null && break
        sleep 0.1
    done
    if [[ $TRAFFIC == flood ]]; then
        target/release/examples/flood --target "$listen" --senders 2 \
            --events "$EVENTS" --rate "$RATE" --connected --gso 44 >/dev/null
    else
        sleep "$SECS"
    fi
    sleep 0.6 # the reorder window and a tick
    local ticks
    ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    kill -TERM "$pid"
    wait "$pid"
    local s
    s=$(tail -n 1 "$out.stats")
    echo "$(json_field events_written "$s") $(json_field bytes_written "$s") $(json_field bytes_uncompressed "$s") $ticks"
    rm -rf "$out" "$out.stats" "$out.log"
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

[[ $TRAFFIC == agents ]] && RATE="iperf3 $IPERF_RATE (demo probes)"
MODES=(none)
for l in $LEVELS; do MODES+=("zstd:$l"); done
echo "# $TRAFFIC traffic at $RATE, $ROUNDS rounds alternating ${MODES[*]}; output on $(stat -f -c %T "$WORK"), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A BPE CPU
for r in $(seq "$ROUNDS"); do
    for m in "${MODES[@]}"; do
        read -r ev bytes raw ticks < <(run_once "$m")
        bpe=$(awk -v b="$bytes" -v e="$ev" 'BEGIN {printf "%.1f", e ? b / e : 0}')
        cpu=$(awk -v t="$ticks" -v hz="$HZ" -v e="$ev" 'BEGIN {printf "%.0f", e ? 1e9 * t / hz / e : 0}')
        echo "round $r $m: events $ev, bytes $bytes (pcapng $raw), $bpe bytes/event, sink CPU $cpu ns/event"
        BPE[$m]="${BPE[$m]:-} $bpe"
        CPU[$m]="${CPU[$m]:-} $cpu"
    done
done
b0=$(tr ' ' '\n' <<<"${BPE[none]}" | grep . | median)
c0=$(tr ' ' '\n' <<<"${CPU[none]}" | grep . | median)
for m in "${MODES[@]}"; do
    b=$(tr ' ' '\n' <<<"${BPE[$m]}" | grep . | median)
    c=$(tr ' ' '\n' <<<"${CPU[$m]}" | grep . | median)
    awk -v m="$m" -v b="$b" -v c="$c" -v b0="$b0" -v c0="$c0" -v cs="${CPU[$m]}" 'BEGIN {
        printf "RESULT %s: median %.1f bytes/event (%.1fx smaller), sink CPU %d ns/event (%.2fx; per round:%s)\n",
            m, b, b0 / b, c, c / c0, cs }'
done
