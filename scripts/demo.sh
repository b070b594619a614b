#!/usr/bin/env bash
# The main job, end to end on one machine: two network namespaces joined by
# a veth pair play two hosts; tracer-sink runs on "server", tracer-agent on
# "client", iperf3 sends a TCP flow from client to server, and the trace is
# written to traces/*.pcapng and summarised by tshark with our dissector.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

OUT=${OUT:-traces}
SECONDS_OF_TRAFFIC=${SECONDS_OF_TRAFFIC:-3}
RATE=${RATE:-200M}
NS_C=ntr-demo-client NS_S=ntr-demo-server
ADDR_C=10.210.0.1 ADDR_S=10.210.0.2
LUA=wireshark/nettrace.lua

cleanup() {
    [[ -n ${AGENT:-} ]] && kill -INT "$AGENT" 2>/dev/null || true
    [[ -n ${SINK:-} ]] && kill -TERM "$SINK" 2>/dev/null || true
    [[ -n ${IPERF:-} ]] && kill "$IPERF" 2>/dev/null || true
    wait 2>/dev/null || true
    ip netns del "$NS_C" 2>/dev/null || true
    ip netns del "$NS_S" 2>/dev/null || true
}
trap cleanup EXIT

echo "== building (release)"
cargo build --release --bins --locked -q
BIN=target/release

echo "== two hosts: $NS_C ($ADDR_C) and $NS_S ($ADDR_S) over veth"
cleanup
ip netns add "$NS_C"
ip netns add "$NS_S"
ip link add ntrdemo-c netns "$NS_C" type veth peer name ntrdemo-s netns "$NS_S"
ip -n "$NS_C" addr add "$ADDR_C/24" dev ntrdemo-c
ip -n "$NS_S" addr add "$ADDR_S/24" dev ntrdemo-s
for ns in "$NS_C" "$NS_S"; do
    ip -n "$ns" link set lo up
done
ip -n "$NS_C" link set ntrdemo-c up
ip -n "$NS_S" link set ntrdemo-s up
# nsenter (not `ip netns exec`) keeps /sys and its cgroup2 mount visible;
# backgrounded directly so $! is the program itself and gets our signals.
in_ns() { local ns=$1; shift; nsenter --net="/run/netns/$ns" -- "$@"; }

mkdir -p "$OUT"
rm -f "$OUT"/trace-*.pcapng
echo "== tracer-sink on $NS_S, writing $OUT/"
nsenter --net="/run/netns/$NS_S" -- "$BIN/tracer-sink" --listen "$ADDR_S:7420" --output "$OUT" \
    > "$OUT/sink.log" 2>&1 &
SINK=$!
echo "== tracer-agent on $NS_C"
nsenter --net="/run/netns/$NS_C" -- "$BIN/tracer-agent" --sink "$ADDR_S:7420" --probes tx \
    --hostname client --clock sink > "$OUT/agent.log" 2>&1 &
AGENT=$!
for _ in $(seq 100); do
    grep -q "tx probe attached" "$OUT/agent.log" && break
    kill -0 "$AGENT" 2>/dev/null || { cat "$OUT/agent.log"; exit 1; }
    sleep 0.1
done

echo "== iperf3: ${SECONDS_OF_TRAFFIC}s of TCP at $RATE from client to server"
nsenter --net="/run/netns/$NS_S" -- iperf3 -s -1 -B "$ADDR_S" > /dev/null 2>&1 &
IPERF=$!
sleep 0.5
in_ns "$NS_C" iperf3 -c "$ADDR_S" -t "$SECONDS_OF_TRAFFIC" -b "$RATE" | tail -4
sleep 0.5

kill -INT "$AGENT"; wait "$AGENT" || true; AGENT=
sleep 0.3
kill -TERM "$SINK"; wait "$SINK" || true; SINK=
echo "== agent counters"; sed -n '/final tracer-agent statistics/,$p' "$OUT/agent.log"
echo "== sink counters"; grep -v '^\s*$' "$OUT/sink.log" | tail -15

FILE=$(ls "$OUT"/trace-*.pcapng | head -1)
echo "== $FILE through tshark + $LUA"
ts() { tshark -X "lua_script:$LUA" -r "$FILE" "$@"; }
ERR=$(mktemp)
STAGES='BEGIN{n["0"]="SENDMSG";n["1"]="SCHED";n["2"]="SND_SW";n["3"]="SND_HW";n["4"]="ACK"}'
echo "-- events by kind (host, kind/stage)"
ts -T fields -e nettrace.host -e nettrace.kind -e nettrace.stage 2>"$ERR" \
    | awk -F'\t' "$STAGES"' {k = ($2 == 2) ? "CLOCK" : "TX " n[$3]; c[$1" "k]++}
        END {for (k in c) printf "  %-22s %8d\n", k, c[k]}' | sort
if grep -q "Lua: " "$ERR"; then cat "$ERR"; echo "dissector failed" >&2; exit 1; fi
echo "-- the agent's clock updates (following the sink's clock), last 5"
ts -Y "nettrace.kind == 2" -T fields -e frame.number -e nettrace.clock.state \
    -e nettrace.clock.offset_ns -e nettrace.clock.freq_ppb -e nettrace.clock.delay_ns \
    -e nettrace.clock.error_estimate_ns 2>/dev/null | tail -5 \
    | awk -F'\t' 'BEGIN {s[0]="UNLOCKED";s[1]="JUMP";s[2]="LOCKED";s[3]="LOCKED_STABLE";
        printf "%6s %-14s %10s %10s %9s %9s\n", "frame", "state", "offset ns", "freq ppb", "delay ns", "err ns"}
        {printf "%6s %-14s %10s %10.1f %9s %9s\n", $1, s[$2], $3, $4, $5, $6}'
echo "-- first decoded TX frames"
ts -Y "nettrace.kind == 1" -T fields -e frame.number -e frame.time_epoch -e nettrace.host \
    -e nettrace.stage -e nettrace.cookie -e nettrace.tskey -e nettrace.cpu -e nettrace.comm \
    -e nettrace.lat.total_ns 2>/dev/null | awk "NR <= 10" \
    | awk -F'\t' "$STAGES"' BEGIN {printf "%5s %-22s %-8s %-8s %8s %12s %3s %-8s %s\n", "frame", "time (TAI, s)", "host", "stage", "cookie", "tskey", "cpu", "comm", "since SENDMSG (ns)"}
        {printf "%5s %-22s %-8s %-8s %8s %12s %3s %-8s %s\n", $1, $2, $3, n[$4], $5, $6, $7, $8, $9}'
echo "-- per-stage latency from the dissector (ns): median and p99 over all skbs"
lat() { # stage-number field
    ts -Y "nettrace.stage == $1" -T fields -e "nettrace.lat.$2" 2>/dev/null \
        | awk -F, 'NF && $1 != "" {print $1}' | sort -n \
        | awk -v f="$2" '{a[NR]=$1} END {if (NR) {p=int(NR*0.99); if (p < 1) p=1; printf "  %-10s median %8d  p99 %8d  (n=%d)\n", f, a[int((NR+1)/2)], a[p], NR}}'
}
lat 1 sched_ns; lat 2 snd_sw_ns; lat 4 ack_ns; lat 4 total_ns
echo "-- the first SND_SW frame in full"
ts -Y "nettrace.stage == 2" -V 2>/dev/null | awk '/^Frame /{n++} n==1' | sed -n '/^Network stack trace/,/^$/p'
echo "== done: open $FILE in Wireshark with $LUA installed (see wireshark/README.md)"
