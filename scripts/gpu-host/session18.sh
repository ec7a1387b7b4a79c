#!/bin/bash
# Issue 28 on real hardware at main's head after stops 46-56 (the reader's
# fat-LTO build, the writer's tries, the typed preempt-count ksym), in one
# device call, the most wanted first so that a cut run loses the least:
# 1. bench_reader_cpu (live 50 ns, record 70 ns), READER_ROUNDS times;
# 2. per hit on real events (progcost.sh), the three modes over PC_ROUNDS;
# 3. bench_program_cost and bench_hot_path_parts (what the kernel's parts
#    cost on this card's host), COST_ROUNDS times;
# 4. bench_stack_cost, STACK_ROUNDS times;
# 5. bench_lossless_rate once (16 CPUs: the injectors do not share the
#    reader's CPU, as they must on the 2-CPU CI host).
# Usage: session18.sh BIN HOSTTEST; results in $OUT/session18.tgz.
set -u
USAGE="session18.sh BIN HOSTTEST"
. "$(dirname "$0")/prelude.sh"
HT=${2:?usage: $USAGE}
chmod +x "$HT"
{ uname -r; nproc; nvidia-smi -L 2>/dev/null; "$BIN" --version; cat /proc/loadavg;
  grep -H . /sys/devices/system/cpu/vulnerabilities/{spec_rstack_overflow,spectre_v2,retbleed} 2>/dev/null;
  cat /sys/devices/system/clocksource/clocksource0/current_clocksource; } > "$OUT/host.txt" 2>&1
stamp() { echo "$1 rc=$2 at ${SECONDS}s load $(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/host.txt"; }
bench() { # bench NAME LIMIT ROUND
    timeout "$2" "$HT" --ignored --exact --nocapture --test-threads=1 "$1" > "$OUT/$1.$3.txt" 2>&1
    stamp "$1 round $3" $?
}
for round in $(seq 1 "${READER_ROUNDS:-4}"); do
    bench bench_reader::bench_reader_cpu 60 "$round"
done
for round in $(seq 1 "${PC_ROUNDS:-2}"); do
    MODES="streaming aggregate aggregate-nolife" OUT="$OUT/round$round" timeout 100 \
        bash "$HERE/progcost.sh" "$BIN" "${PC_ITERS:-1500}" > "$OUT/progcost.$round.txt" 2>&1
    stamp "progcost round $round" $?
done
for round in $(seq 1 "${COST_ROUNDS:-3}"); do
    bench bench::bench_program_cost 60 "$round"
    bench bench_parts::bench_hot_path_parts 40 "$round"
done
for round in $(seq 1 "${STACK_ROUNDS:-2}"); do
    bench bench::bench_stack_cost 60 "$round"
done
bench bench_lossless::bench_lossless_rate 120 1
cd "$OUT" && tar czf session18.tgz host.txt ./*.txt round*/ 2> /dev/null
