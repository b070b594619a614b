#!/usr/bin/env bash
# Benchmark 8(a): PI and linreg servos against the simulated PHC
# (100 ppm, 50 ns read jitter, 1 s updates; simulated time, runs in seconds).
#
# Then phc2sys parity, side by side: linuxptp's own servo.c + pi.c, built
# at run time from a linuxptp checkout with the closed-loop driver
# bench/ref/pi_parity.c, and this crate's servo in the same loop
# (examples/pi_parity.rs) get identical inputs; every update's offset,
# state and servo output, and phc2sys's -m line, are compared.
#
# linuxptp source: LINUXPTP_SRC=/path/to/linuxptp, else a clone of
# LINUXPTP_GIT at LINUXPTP_REF into a temporary directory (removed after).
# The "kp=0 with ki set" case needs linuxptp after v4.4 (commit 9db3cf9,
# per-term constants); older trees differ there and only there.
# SKIP_SIM=1 runs the parity check alone.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${SKIP_SIM:-}" ]; then
    cargo run --release -q -p clocksync --example servo_bench
    echo
fi

LINUXPTP_GIT=${LINUXPTP_GIT:-https://github.com/richardcochran/linuxptp}
LINUXPTP_REF=${LINUXPTP_REF:-f98cb5de87e63696599c59d0a9df7dc04d08d40d}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

src=${LINUXPTP_SRC:-}
if [ -z "$src" ]; then
    git clone -q "$LINUXPTP_GIT" "$work/linuxptp"
    git -C "$work/linuxptp" checkout -q "$LINUXPTP_REF"
    src=$work/linuxptp
fi
for f in pi.c servo.c config.h servo.h servo_private.h print.h; do
    [ -f "$src/$f" ] || { echo "clock-servo: $src has no $f (not a linuxptp tree?)" >&2; exit 1; }
done
if git -C "$src" rev-parse HEAD >/dev/null 2>&1; then
    echo "linuxptp: $(git -C "$src" log -1 --format='%h %cs %s')"
else
    echo "linuxptp: $src"
fi

gcc -O2 -Wall -I"$src" -o "$work/pi_parity_c" bench/ref/pi_parity.c "$src/pi.c" "$src/servo.c" -lm
cargo build --release -q -p clocksync --example pi_parity
rust=target/release/examples/pi_parity

# key=value arguments shared by both halves (see bench/ref/pi_parity.c).
scenarios=(
    "n=60 drift_ppb=50000 phase_ns=3000 noise_ns=200 seed=7"
    "n=60 interval=0.25 drift_ppb=50000 phase_ns=3000 noise_ns=200 seed=7"
    "n=60 interval=4 drift_ppb=50000 phase_ns=3000 noise_ns=200 seed=7"
    "n=60 interval=0.0625 drift_ppb=-20000 phase_ns=-1500 noise_ns=50 seed=3"
    "n=60 interval=0.25 kp=0 ki=0 drift_ppb=50000 phase_ns=3000 noise_ns=200 seed=7"
    "n=60 interval=4 kp=0 ki=0 drift_ppb=50000 phase_ns=3000 noise_ns=200 seed=7"
    "n=60 interval=2 kp=0 drift_ppb=50000 phase_ns=3000 noise_ns=200 seed=7"
    "n=80 sw_ts=1 kp=0 ki=0 drift_ppb=30000 noise_ns=500 seed=5"
    "n=20 step=0.001 phase_ns=5000000 drift_ppb=10000 event_at=2 event_ns=3000000"
    "n=20 step=0.001 phase_ns=5000000 drift_ppb=10000 event_at=2 event_ns=-800000"
    "n=30 step=0.0001 drift_ppb=10000 noise_ns=100 event_at=10 event_ns=2000000"
    "n=40 max_ppb=50000 drift_ppb=100000 first_step=0 noise_ns=20"
    "n=40 max_ppb=50000 max_frequency=20000 drift_ppb=30000 first_step=0 phase_ns=100000"
    "n=40 offset_threshold=100 num_offset_values=5 drift_ppb=10000 noise_ns=30 seed=11"
    "n=40 first_step=0 phase_ns=1000000 drift_ppb=-40000 noise_ns=10"
    "n=40 interval=0.5 delay=1234 phase_ns=-30000 drift_ppb=12345.678 noise_ns=77 seed=99"
)

printf '%-84s %7s %9s %9s\n' scenario updates values lines
bad=0
for s in "${scenarios[@]}"; do
    # shellcheck disable=SC2086 # the scenario is a list of arguments
    "$work/pi_parity_c" $s >"$work/c.out"
    # shellcheck disable=SC2086
    "$rust" $s >"$work/r.out"
    n=$(wc -l <"$work/c.out")
    values=$(diff <(cut -d'|' -f1 "$work/c.out") <(cut -d'|' -f1 "$work/r.out") | grep -c '^<' || true)
    lines=$(diff <(cut -d'|' -f2 "$work/c.out") <(cut -d'|' -f2 "$work/r.out") | grep -c '^<' || true)
    printf '%-84s %7d %9s %9s\n' "$s" "$n" "$values" "$lines"
    if [ "$values" != 0 ] || [ "$lines" != 0 ]; then
        bad=1
        diff <(cut -d'|' -f1 "$work/c.out") <(cut -d'|' -f1 "$work/r.out") | head -6 || true
    fi
done
echo "(values / lines: updates whose offset, state or servo output / whose -m line differ from linuxptp's)"
exit $bad
