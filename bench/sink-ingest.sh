#!/usr/bin/env bash
# Sink ingest benchmark: events/s that tracer-sink writes to pcapng with
# zero loss, on this machine, over loopback UDP.
#
# 1. flat out: the flood example sends EVENTS events as fast as it can
#    (median of RUNS runs) and we report the send rate and the loss;
# 2. paced: the send rate steps up through RATES until the first loss; the
#    highest loss-free rate is the sink's sustainable ingest rate.
#    Each loss-free step also shows the sink's CPU time per event (user +
#    system, both threads), steadier than rates on a shared machine.
# Both with and without per-event comments, for MTU-sized (1472-byte) and
# large (65000-byte) datagrams; and each of those without and with a key
# (`--key-file` on sink and senders: every datagram tagged by the sender
# and checked by the sink), the two alternating step by step in one run so
# the machine's load drifts alike for both. The keyed zero-loss rate is
# reported as a share of the keyless one (target >= 80 %). Last, the
# auth_cost example times the one step a key adds to the receive path (the
# tag check) against the validation every datagram gets, on one core:
# steadier than whole-sink rates on a busy machine.
#
# Environment knobs: EVENTS (default 2000000), SENDERS (2), RUNS (3),
# RATES ("250000 500000 750000 1000000 1250000 1500000 1750000 2000000"),
# AUTH ("off on": which modes to run), SIZES ("1472 65000"),
# COMMENTS ("on off"), FLAT (1: also the flat-out runs),
# BENCH_OUT_DIR (where the sink writes; default a fresh dir under
# ${TMPDIR:-/tmp}; use /dev/shm to take the disk out of the picture),
# SINK_BIN (the sink binary to measure; default this tree's
# target/release/tracer-sink: point it at a build of another commit to
# compare two sinks against the same senders; target/release/examples/
# null_sink gives the floor under the sink's figures: it reads the
# datagrams and appends them to one file, with SINK_ARGS=--discard it only
# reads them), SINK_ARGS (more options for the sink), BUILD (1: cargo
# build this tree's sink and examples first; 0: use what is built),
# SEND_ARGS (more options for the flood senders: "--connected --gso 44"
# sends UDP GSO batches of 44 datagrams, as agents do by default, which
# the sink takes whole with UDP_GRO).
set -euo pipefail

cd "$(dirname "$0")/.."
EVENTS=${EVENTS:-2000000}
SENDERS=${SENDERS:-2}
RUNS=${RUNS:-3}
RATES=${RATES:-"250000 500000 750000 1000000 1250000 1500000 1750000 2000000"}
AUTH=${AUTH:-"off on"}
SIZES=${SIZES:-"1472 65000"}
COMMENTS=${COMMENTS:-"on off"}
FLAT=${FLAT:-1}
BASE=${BENCH_OUT_DIR:-${TMPDIR:-/tmp}}
WORK=$(mktemp -d "$BASE/sink-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

BUILD=${BUILD:-1}
SEND_ARGS=${SEND_ARGS:-}
[[ $BUILD == 1 ]] && cargo build --release -q -p tracer-sink --bins --examples
HZ=$(getconf CLK_TCK)
SINK=${SINK_BIN:-target/release/tracer-sink}
FLOOD=target/release/examples/flood

echo "# sink $SINK, output on $(stat -f -c %T "$WORK") ($WORK), $(nproc) cores, senders=$SENDERS"
# One deployment key for the keyed runs (owner-only, as the tools demand).
KEY="$WORK/bench.key"
head -c 32 /dev/urandom >"$KEY"
chmod 600 "$KEY"

json_field() { # name, json line
    sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" <<<"$2"
}

# run_once SIZE RATE EVENTS COMMENTS AUTH -> "sent written send_rate sink_cpu_ticks"
run_once() {
    local size=$1 rate=$2 events=$3 comments=$4 auth=${5:-off}
    local port=$((20000 + RANDOM % 20000))
    local out="$WORK/out.$port.$RANDOM"
    local extra=() keyed=()
    [[ $comments == on ]] && extra+=(--comments)
    [[ $auth == on ]] && keyed+=(--key-file "$KEY")
    # Fresh log and stats files per run: with shared ones, the previous
    # run's "started" line could let the senders start before this sink
    # has bound its socket (all of a short run then lost).
    local log="$out.log" stats="$out.stats.json"
    # shellcheck disable=SC2086 # SINK_ARGS: words on purpose
    "$SINK" --listen "127.0.0.1:$port" --output "$out" --json --stats-interval 0 \
        "${extra[@]}" "${keyed[@]}" ${SINK_ARGS:-} >"$stats" 2>"$log" &
    local pid=$!
    for _ in $(seq 50); do
        grep -q " started" "$log" 2>/dev/null && break
        sleep 0.1
    done
    local f
    f=$("$FLOOD" --target "127.0.0.1:$port" --senders "$SENDERS" --events "$events" \
        --datagram-size "$size" --rate "$rate" "${keyed[@]}" $SEND_ARGS)
    sleep 0.5 # let the reorder window pass; SIGTERM drains the socket anyway
    # Sink CPU time (user + system, clock ticks) before the final drain.
    local ticks
    ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    kill -TERM "$pid"
    wait "$pid"
    local s
    s=$(tail -n 1 "$stats")
    echo "$(json_field events_sent "$f") $(json_field events_written "$s") $(json_field events_per_s "$f") $ticks"
    rm -rf "$out" "$log" "$stats" 2>/dev/null || true
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

if [[ $FLAT == 1 ]]; then
for size in $SIZES; do
    for comments in $COMMENTS; do
        for auth in $AUTH; do
            rates=()
            losses=()
            for _ in $(seq "$RUNS"); do
                read -r sent written rate _ < <(run_once "$size" 0 "$EVENTS" "$comments" "$auth")
                rates+=("$rate")
                losses+=("$(awk -v s="$sent" -v w="$written" 'BEGIN {printf "%.2f", 100 * (s - w) / s}')")
            done
            echo "flat-out size=$size comments=$comments key=$auth: send rate median $(printf '%s\n' "${rates[@]}" | median) ev/s," \
                "loss per run ${losses[*]} %"
        done
    done
done
fi

# Paced: every mode of AUTH at each rate in turn (alternating), each mode
# stopping at its first loss.
for size in $SIZES; do
    for comments in $COMMENTS; do
        declare -A best=() done_mode=() cpus=()
        for rate in $RATES; do
            n=$((rate * 2)) # two seconds at this rate
            for auth in $AUTH; do
                [[ -n ${done_mode[$auth]:-} ]] && continue
                read -r sent written actual ticks < <(run_once "$size" "$rate" "$n" "$comments" "$auth")
                cpu=$(awk -v t="$ticks" -v hz="$HZ" -v w="$written" 'BEGIN {printf "%.0f", w ? 1e9 * t / hz / w : 0}')
                if [[ $sent == "$written" ]]; then
                    best[$auth]=$rate
                    cpus[$auth]="${cpus[$auth]:-} $cpu"
                    echo "paced size=$size comments=$comments key=$auth rate=$rate (actual ${actual}): zero loss, sink CPU ${cpu} ns/event"
                else
                    done_mode[$auth]=1
                    echo "paced size=$size comments=$comments key=$auth rate=$rate (actual ${actual}): lost $((sent - written)) of $sent"
                fi
            done
        done
        for auth in $AUTH; do
            echo "RESULT size=$size comments=$comments key=$auth: highest zero-loss rate ${best[$auth]:-0} events/s" \
                "(sink CPU ns/event per loss-free step:${cpus[$auth]:-})"
        done
        if [[ -n ${best[off]:-} && -n ${best[on]:-} ]]; then
            awk -v on="${best[on]}" -v off="${best[off]}" -v s="$size" -v c="$comments" \
                'BEGIN {printf "RATIO size=%s comments=%s: keyed / keyless zero-loss rate = %.2f (target >= 0.80)\n", s, c, on / off}'
        fi
        unset best done_mode cpus
    done
done

if [[ " $AUTH " == *" on "* ]]; then
    echo "# receive path per event, one core (tracer-sink/examples/auth_cost.rs):"
    target/release/examples/auth_cost
fi
