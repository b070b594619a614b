#!/usr/bin/env bash
# Matcher throughput and memory: events per second nettrace-match reads and
# matches, and its peak RSS, on synthetic traces of ~1 M and ~5 M events at
# the same event rate (same trace-time density), side by side. Memory must
# be bounded by the windows, not the trace: both sizes should show about the
# same peak RSS; a wider --window should show more.
#
# The traces come from `cargo run -p tracer-testdata --example synth-trace`:
# two hosts exchanging TCP data both ways (GRO of 2, one RX skb in 200 lost
# and retransmitted, host 1's clock 2 µs off), simulated in true time and
# written as the sink writes its files: SHB, one IDB per host, one EPB per
# event whose payload is the codec's capture record (tracer-codec encodes
# the records, pcap-file the blocks), ISBs at the end of each file, rotated
# every 1 M events. About 4.8 events per TX skb and direction.
#
# Environment knobs: SMALL_SKBS (default 92000, ~1.0 M events), BIG_SKBS
# (550000, ~5.2 M events), INTERVAL_NS (20000: 100 k TX skbs/s per direction,
# ~1.1 M events per second of trace time), RUNS (3, alternating small/big;
# medians reported), WIDE_WINDOW (1s), BENCH_OUT_DIR (where traces go; default
# a fresh dir under ${TMPDIR:-/tmp}; traces take ~1 GB for 5 M events).
set -euo pipefail

cd "$(dirname "$0")/.."
SMALL_SKBS=${SMALL_SKBS:-92000}
BIG_SKBS=${BIG_SKBS:-550000}
INTERVAL_NS=${INTERVAL_NS:-20000}
RUNS=${RUNS:-3}
WIDE_WINDOW=${WIDE_WINDOW:-1s}
BASE=${BENCH_OUT_DIR:-${TMPDIR:-/tmp}}
WORK=$(mktemp -d "$BASE/match-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

if [[ ! -x /usr/bin/time ]]; then
    echo "installing GNU time (peak RSS)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q time >/dev/null \
        || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q time >/dev/null; }
fi
cargo build --release -q -p tracer-match -p tracer-testdata --bins --examples
MATCH=target/release/nettrace-match
SYNTH=target/release/examples/synth-trace

gen() { # name skbs
    local dir="$WORK/$1"
    "$SYNTH" --out "$dir" --skbs "$2" --both-ways --interval-ns "$INTERVAL_NS" \
        --offset-ns 2000 --lose-one-in 200 --events-per-file 1000000
}

echo "# $(nproc) cores; traces in $WORK ($(stat -f -c %T "$WORK"))"
echo "generate small: $(gen small "$SMALL_SKBS")"
echo "generate big:   $(gen big "$BIG_SKBS")"

# run_once NAME [ARGS...] -> "events wall_s cpu_s rss_kb matched peak_held input_peak"
run_once() {
    local name=$1
    shift
    local tfile="$WORK/time.$name.$RANDOM" out="$WORK/out.$name.json"
    /usr/bin/time -v -o "$tfile" "$MATCH" --json "$@" "$WORK/$name" >"$out"
    python3 - "$tfile" "$out" <<'EOF'
import json, sys
t = open(sys.argv[1]).read().splitlines()
def field(name):
    for l in t:
        if l.strip().startswith(name):
            return l.split(": ", 1)[1].strip()
    raise SystemExit(f"no {name} in /usr/bin/time output")
wall = field("Elapsed (wall clock) time")
parts = [float(p) for p in wall.split(":")]
secs = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
cpu = float(field("User time (seconds)")) + float(field("System time (seconds)"))
rss = int(field("Maximum resident set size (kbytes)"))
r = json.load(open(sys.argv[2]))
matched = sum(d["matched"] for d in r["directions"])
sent = sum(d["sent"] for d in r["directions"])
print(r["input"]["events"], f"{secs:.2f}", f"{cpu:.2f}", rss, matched, sent,
      r["peak_held_by_matcher"], r["input"]["peak_held"])
EOF
}

declare -A RES
for ((i = 0; i < RUNS; i++)); do
    RES[small]+="$(run_once small)"$'\n'
    RES[big]+="$(run_once big)"$'\n'
done
RES[wide]="$(run_once big --window "$WIDE_WINDOW")"$'\n'

report() { # label lines
    python3 - "$1" <<EOF
import statistics, sys
rows = [l.split() for l in """$2""".strip().splitlines()]
ev = int(rows[0][0]); matched = int(rows[0][4]); sent = int(rows[0][5])
wall = statistics.median(float(r[1]) for r in rows)
cpu = statistics.median(float(r[2]) for r in rows)
rss = statistics.median(int(r[3]) for r in rows)
print(f"{sys.argv[1]:<22} {ev:>9} events  {ev / wall / 1e6:5.2f} M events/s wall, {ev / cpu / 1e6:5.2f} M per CPU-second (wall {wall:.2f} s, cpu {cpu:.2f} s)"
      f"  peak RSS {rss / 1024:6.1f} MiB  matched {matched}/{sent}"
      f"  held: matcher {rows[0][6]}, input {rows[0][7]}  (n={len(rows)})")
EOF
}
echo
report "small, window 250ms" "${RES[small]}"
report "big, window 250ms" "${RES[big]}"
report "big, window $WIDE_WINDOW" "${RES[wide]}"
