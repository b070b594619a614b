#!/bin/bash
# Benchmark 8(b): the kernel-stamped two-way exchange over a veth pair
# between two network namespaces (one kernel, one clock: true offset 0),
# idle and under an iperf3 load on the same veth, against the same exchange
# stamped in user space. Needs root. Usage: bench/clock-exchange.sh [samples]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh # iperf3, iproute2 on a fresh machine
SAMPLES=${1:-300}
NA=cs-bench-a NB=cs-bench-b
A=10.77.0.1 B=10.77.0.2
PORT=31900

cleanup() {
    [ -n "${RESP:-}" ] && kill "$RESP" 2>/dev/null || true
    [ -n "${IPERF_S:-}" ] && kill "$IPERF_S" 2>/dev/null || true
    ip netns del $NA 2>/dev/null || true
    ip netns del $NB 2>/dev/null || true
}
trap cleanup EXIT INT TERM
cleanup   # leftovers of a killed run

cargo build --release -q -p clocksync --example exchange_bench
BIN=target/release/examples/exchange_bench

ip netns add $NA
ip netns add $NB
ip link add cs-bench-va netns $NA type veth peer name cs-bench-vb netns $NB
ip -n $NA addr add $A/24 dev cs-bench-va
ip -n $NB addr add $B/24 dev cs-bench-vb
ip -n $NA link set lo up
ip -n $NB link set lo up
ip -n $NA link set cs-bench-va up
ip -n $NB link set cs-bench-vb up

ip netns exec $NB $BIN responder --bind $B --port $PORT &
RESP=$!
sleep 0.5

echo "== idle =="
ip netns exec $NA $BIN client --server $B --port $PORT --samples "$SAMPLES" --label idle

echo "== iperf3 load on the same veth =="
ip netns exec $NB iperf3 -s -B $B -p 31950 >/dev/null 2>&1 &
IPERF_S=$!
sleep 0.5
ip netns exec $NA iperf3 -c $B -p 31950 -t 600 >/dev/null 2>&1 &
IPERF_C=$!
sleep 1
ip netns exec $NA $BIN client --server $B --port $PORT --samples "$SAMPLES" --label loaded
kill $IPERF_C 2>/dev/null || true
wait $IPERF_C 2>/dev/null || true
