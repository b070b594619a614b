#!/usr/bin/env bash
# What an agent costs a host while nothing it traces happens: the price of
# leaving it on. A tracer-sink on loopback and an agent with --probes
# tx,rx,drops (every probe attached, no traffic to trace; the agent's own
# datagrams to the sink and the clock's exchange are excluded from the
# trace but still run the hooks), for SECS seconds per round, after a
# settling time. Per round: the agent's CPU in ms per second, summed over
# its threads from their scheduler run time (/proc/PID/task/*/schedstat,
# exact to the ns, unlike utime/stime), and its wakeups per second
# (voluntary context switches). With AGENT_ALT_BIN a second build runs in
# alternating rounds beside it (old vs new, same run). With STRACE=1 one
# more pass per build counts its system calls by kind over 10 s (strace
# -c; strace slows what it counts, so its CPU is not reported).
#
# Env: ROUNDS (3), SECS (20), SETTLE (3), AGENT_BIN (target/release/
# tracer-agent), AGENT_ALT_BIN, STRACE.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
ROUNDS=${ROUNDS:-3} SECS=${SECS:-20} SETTLE=${SETTLE:-3} STRACE=${STRACE:-}
if [[ -n $STRACE ]] && ! command -v strace >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends strace >/dev/null \
        || { apt-get update -q >/dev/null \
            && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends strace >/dev/null; }
fi
cargo build --release --locked -q -p tracer-agent -p tracer-sink
AGENT_BIN=${AGENT_BIN:-$PWD/target/release/tracer-agent}
BINS=("$AGENT_BIN")
[[ -n ${AGENT_ALT_BIN:-} ]] && BINS+=("$AGENT_ALT_BIN")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/idle-agent.XXXXXX")
SINK_PID= AGENT_PID=
cleanup() {
    [[ -n $AGENT_PID ]] && kill -INT "$AGENT_PID" 2>/dev/null && wait "$AGENT_PID" 2>/dev/null
    [[ -n $SINK_PID ]] && kill -TERM "$SINK_PID" 2>/dev/null && wait "$SINK_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

PORT=$(python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
target/release/tracer-sink --listen "127.0.0.1:$PORT" --output "$WORK/out" \
    --stats-interval 0 >"$WORK/sink.out" 2>"$WORK/sink.log" &
SINK_PID=$!
for _ in $(seq 50); do
    grep -q " started" "$WORK/sink.log" 2>/dev/null && break
    sleep 0.1
done

start_agent() {
    : > "$WORK/agent.log"
    "$1" --sink "127.0.0.1:$PORT" --probes tx,rx,drops >"$WORK/agent.out" 2>"$WORK/agent.log" &
    AGENT_PID=$!
    for _ in $(seq 200); do
        [[ $(grep -c "probe attached" "$WORK/agent.log") -ge 3 ]] && break
        sleep 0.05
    done
    [[ $(grep -c "probe attached" "$WORK/agent.log") -ge 3 ]] \
        || { echo "agent did not start:"; cat "$WORK/agent.log"; exit 1; }
    sleep "$SETTLE"
}
stop_agent() {
    kill -INT "$AGENT_PID"
    wait "$AGENT_PID" || echo "agent exit $?: $(tail -2 "$WORK/agent.log")" >&2
    AGENT_PID=
}
# "run_ns voluntary_switches" summed over the agent's threads.
snap() {
    local rt=0 sw=0 t
    for t in /proc/"$AGENT_PID"/task/*; do
        rt=$((rt + $(awk '{print $1}' "$t/schedstat")))
        sw=$((sw + $(awk '/^voluntary_ctxt_switches/ {print $2}' "$t/status")))
    done
    echo "$rt $sw"
}

echo "== idle agent (--probes tx,rx,drops, no traffic), $ROUNDS rounds of ${SECS}s"
echo "   columns: build round cpu_ms_per_s wakeups_per_s"
: > "$WORK/rows"
for r in $(seq "$ROUNDS"); do
    for i in "${!BINS[@]}"; do
        start_agent "${BINS[$i]}"
        read -r rt0 sw0 < <(snap)
        sleep "$SECS"
        read -r rt1 sw1 < <(snap)
        stop_agent
        row=$(python3 -c "print($i, $r, round(($rt1 - $rt0) / $SECS / 1e6, 3), round(($sw1 - $sw0) / $SECS, 1))")
        echo "   $row"
        echo "$row" >> "$WORK/rows"
    done
done
python3 - "$WORK/rows" "${BINS[@]}" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for i, b in enumerate(sys.argv[2:]):
    mine = [r for r in rows if r[0] == str(i)]
    cpu = statistics.median(float(r[2]) for r in mine)
    wk = statistics.median(float(r[3]) for r in mine)
    print(f"{b}: median {cpu:.3f} ms of CPU per second ({cpu / 10:.4f} % of one CPU), {wk:.1f} wakeups/s")
PY
if [[ -n $STRACE ]]; then
    for b in "${BINS[@]}"; do
        start_agent "$b"
        echo "== system calls of $b over 10 s (strace -c -f)"
        timeout 10 strace -c -f -p "$AGENT_PID" 2>&1 | awk 'NR <= 2 || /^ *[0-9]/' | head -12 || true
        stop_agent
    done
fi
