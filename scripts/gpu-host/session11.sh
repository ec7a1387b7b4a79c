#!/bin/bash
# Issue 28 on the GPU host, a quiet 16-CPU machine, for what the 2-core CI
# host cannot say cleanly:
# 1. the reader's CPU per event (bench_reader_cpu: raw drain, live, record)
#    after this stop's reader work;
# 2. the highest lossless rate (bench_lossless_rate): with 16 CPUs the
#    injectors no longer share the reader's CPU;
# 3. the sg walk per entry and the stack cost through BPF_PROG_TEST_RUN
#    (bench_sg_walk, bench_program_cost), for comparison with session 10.
# Usage: session11.sh HOSTTEST; results in $OUT.
set -u
HOSTTEST=${1:?usage: session11.sh HOSTTEST}
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT"
chmod +x "$HOSTTEST"
{ uname -r; nproc; nvidia-smi -L 2>/dev/null; cat /proc/loadavg; } > "$OUT/host.txt" 2>&1
# Each bench in its own time box: the whole must fit one device call.
for b in bench_reader_cpu:150 bench_lossless_rate:240 bench_sg_walk:60 bench_program_cost:90; do
    limit=${b#*:} b=${b%:*}
    timeout "$limit" "$HOSTTEST" --ignored --nocapture --test-threads=1 "$b" \
        > "$OUT/$b.txt" 2>&1
    echo "$b rc=$?" >> "$OUT/host.txt"
done
cat /proc/loadavg >> "$OUT/host.txt"
