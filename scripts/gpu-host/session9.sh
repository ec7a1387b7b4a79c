#!/bin/bash
# Issue 28 (line-rate cost) on the GPU host, a quiet 16-CPU machine:
# 1. the programs' per-hit cost through BPF_PROG_TEST_RUN (the host test
#    binary's bench_program_cost and bench_hot_path_parts: the slot table
#    of aggregate-only mode against streaming and --no-lifetimes);
# 2. per hit on real events, three modes (progcost.sh, PyTorch DMA);
# 3. the workload's slowdown: the pin/copy/unpin loop of workload.py
#    without the tracer and with each mode, interleaved, ROUNDS rounds.
# Usage: session9.sh BIN HOSTTEST (PCITERS, ITERS, ROUNDS: iterations of
# progcost.sh and of each slowdown run, and rounds); results in $OUT.
set -u
USAGE="session9.sh BIN HOSTTEST"
. "$(dirname "$0")/prelude.sh"
HOSTTEST=${2:?usage: $USAGE}
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-1500}
chmod +x "$HOSTTEST"
{ uname -r; nproc; nvidia-smi -L 2>/dev/null; } > "$OUT/host.txt" 2>&1

"$HOSTTEST" --ignored --nocapture --test-threads=1 bench_program_cost bench_hot_path_parts \
    > "$OUT/bench-testrun.txt" 2>&1

OUT=$OUT MODES="streaming aggregate aggregate-nolife" bash "$HERE/progcost.sh" "$BIN" ${PCITERS:-3000} \
    > "$OUT/progcost.txt" 2>&1

for round in $(seq 1 "$ROUNDS"); do
  for mode in none streaming aggregate aggregate-nolife; do
    tp=
    case $mode in
      streaming) flag="" ;;
      aggregate) flag=--aggregate-only ;;
      aggregate-nolife) flag="--aggregate-only --no-lifetimes" ;;
    esac
    if [ "$mode" != none ]; then
      "$BIN" live --json $flag --interval 60s > /tmp/s9.jsonl 2> /tmp/s9.err & tp=$!
      for i in $(seq 1 120); do grep -q "probes attached" /tmp/s9.err && break; sleep 0.5; done
    fi
    python3 "$HERE/workload.py" --iters "$ITERS" > "$OUT/slow-$round-$mode.json" 2>&1
    if [ -n "$tp" ]; then kill -INT $tp; wait $tp; fi
  done
done
