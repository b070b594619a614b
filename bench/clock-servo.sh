#!/bin/sh
# Benchmark 8(a): PI and linreg servos against the simulated PHC
# (100 ppm, 50 ns read jitter, 1 s updates; simulated time, runs in seconds).
set -eu
cd "$(dirname "$0")/.."
exec cargo run --release -q -p clocksync --example servo_bench
