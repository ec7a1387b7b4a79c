#!/bin/bash
# A/B on the GPU host, a quiet 16-CPU machine: the same benchmark from two
# or more builds of the host tests, interleaved round by round so that a
# drift of the machine falls on every build alike. Used in session 12 for
# the devices epoch's cost on the hot path (bench_program_cost: main
# against names6) and for the reader's cuts (bench_reader_cpu: main
# against reader5).
# Usage: session12.sh ROUNDS BENCH:SECONDS LABEL=HOSTTEST...; results in $OUT.
set -u
ROUNDS=${1:?usage: session12.sh ROUNDS BENCH:SECONDS LABEL=HOSTTEST...}
BENCH=${2:?usage: session12.sh ROUNDS BENCH:SECONDS LABEL=HOSTTEST...}
shift 2
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT"
limit=${BENCH#*:} bench=${BENCH%:*}
{ uname -r; nproc; cat /proc/loadavg; } >> "$OUT/host.txt" 2>&1
for round in $(seq 1 "$ROUNDS"); do
    for pair in "$@"; do
        label=${pair%%=*} bin=${pair#*=}
        chmod +x "$bin"
        timeout "$limit" "$bin" --ignored --nocapture --test-threads=1 "$bench" \
            > "$OUT/$bench.$label.$round.txt" 2>&1
        echo "$bench $label round $round rc=$? load $(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/host.txt"
    done
done
