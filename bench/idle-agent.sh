#!/usr/bin/env bash
# What an agent costs a host while nothing it traces happens: the price of
# leaving it on. A tracer-sink on loopback and an agent with --probes
# tx,rx,drops (every probe attached, no traffic to trace; the agent's own
# datagrams to the sink and the clock's exchange are excluded from the
# trace but still run the hooks), for SECS seconds per round, after a
# settling time. Per round: the agent's CPU in ms per second, summed over
# its threads from their scheduler run time (/proc/PID/task/*/schedstat,
# exact to the ns, unlike utime/stime), and its wakeups per second
# (voluntary context switches). Beside each agent, the same round runs
# the floor: tracer-agent's wake_floor example, a process that only wakes
# up, as often as the agent woke, read the same way; on a VM a wakeup
# costs its sleeper tens of µs by itself (the timer and the switch are
# charged to it), so agent / floor is what the agent does beyond being
# woken. With AGENT_ALT_BIN a second build runs in
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
cargo build --release --locked -q -p tracer-agent --example wake_floor
AGENT_BIN=${AGENT_BIN:-$PWD/target/release/tracer-agent}
BINS=("$AGENT_BIN")
[[ -n ${AGENT_ALT_BIN:-} ]] && BINS+=("$AGENT_ALT_BIN")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/idle-agent.XXXXXX")
SINK_PID= AGENT_PID= FLOOR_PID=
# Every step whatever the one before did: under set -e a failed kill (a
# process already gone) would end the trap before the sink is stopped.
cleanup() {
    set +e
    [[ -n $FLOOR_PID ]] && kill -INT "$FLOOR_PID" 2>/dev/null
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
# "run_ns voluntary_switches" summed over the threads of process $1.
snap() {
    local rt=0 sw=0 t
    for t in /proc/"$1"/task/*; do
        rt=$((rt + $(awk '{print $1}' "$t/schedstat")))
        sw=$((sw + $(awk '/^voluntary_ctxt_switches/ {print $2}' "$t/status")))
    done
    echo "$rt $sw"
}

echo "== idle agent (--probes tx,rx,drops, no traffic), $ROUNDS rounds of ${SECS}s"
echo "   columns: build round cpu_ms_per_s wakeups_per_s floor_cpu_ms_per_s floor_wakeups_per_s"
: > "$WORK/rows"
# "cpu_ms_per_s wakeups_per_s" of process $1 over SECS.
measure() {
    local rt0 sw0 rt1 sw1
    read -r rt0 sw0 < <(snap "$1")
    sleep "$SECS"
    read -r rt1 sw1 < <(snap "$1")
    python3 -c "print(round(($rt1 - $rt0) / $SECS / 1e6, 3), round(($sw1 - $sw0) / $SECS, 1))"
}
for r in $(seq "$ROUNDS"); do
    for i in "${!BINS[@]}"; do
        start_agent "${BINS[$i]}"
        read -r cpu wk < <(measure "$AGENT_PID")
        stop_agent
        target/release/examples/wake_floor --rate "$wk" > /dev/null &
        FLOOR_PID=$!
        sleep "$SETTLE"
        read -r fcpu fwk < <(measure "$FLOOR_PID")
        kill -INT "$FLOOR_PID"; wait "$FLOOR_PID" || true
        FLOOR_PID=
        echo "   $i $r $cpu $wk $fcpu $fwk" | tee -a "$WORK/rows"
    done
done
python3 - "$WORK/rows" "${BINS[@]}" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = statistics.median
for i, b in enumerate(sys.argv[2:]):
    mine = [r for r in rows if r[0] == str(i)]
    cpu, wk = med(float(r[2]) for r in mine), med(float(r[3]) for r in mine)
    fl = med(float(r[4]) for r in mine)
    paired = med(float(r[2]) / float(r[4]) for r in mine if float(r[4]) > 0)
    print(f"{b}: median {cpu:.3f} ms of CPU per second ({cpu / 10:.4f} % of one CPU), {wk:.1f} wakeups/s;"
          f" a process only waking as often: {fl:.3f} ms/s ({fl / wk * 1e3 if wk else 0:.0f} µs per wakeup);"
          f" agent / floor {cpu / fl if fl else float('nan'):.2f} (paired {paired:.2f})")
PY
if [[ -n $STRACE ]]; then
    for b in "${BINS[@]}"; do
        start_agent "$b"
        echo "== system calls of $b over 10 s (strace -c -f)"
        timeout 10 strace -c -f -p "$AGENT_PID" 2>&1 | awk 'NR <= 2 || /^ *[0-9]/' | head -12 || true
        stop_agent
    done
fi
