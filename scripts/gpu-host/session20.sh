#!/bin/bash
# The stack filter on real driver stacks (session 20): `--check --stacks`
# takes a stack for every map but for an unmap or single sync only where
# the mapping table does not hold its mapping as it should be;
# `--stacks-every-call` takes one for every call (what --stacks did before).
# In one device call, the most wanted first:
# 1. per hit on real events (progcost.sh around workload.py), the modes
#    check, stacks and stacks-every interleaved over PC_ROUNDS rounds;
# 2. bench_stack_cost of HOSTTEST (the test run's short stack), STACK_ROUNDS.
# Usage: session20.sh BIN HOSTTEST; results in $OUT.
set -u
USAGE="session20.sh BIN HOSTTEST"
. "$(dirname "$0")/prelude.sh"
HT=${2:?usage: $USAGE}
chmod +x "$HT"
{ uname -r; nproc; nvidia-smi -L 2>/dev/null; cat /proc/loadavg; } > "$OUT/host.txt" 2>&1
stamp() { echo "$1 rc=$2 at ${SECONDS}s load $(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/host.txt"; }
for round in $(seq 1 "${PC_ROUNDS:-3}"); do
    MODES="check stacks stacks-every" OUT="$OUT/round$round" timeout 150 \
        bash "$HERE/progcost.sh" "$BIN" "${PC_ITERS:-1500}" > "$OUT/progcost.$round.txt" 2>&1
    stamp "progcost round $round" $?
done
for round in $(seq 1 "${STACK_ROUNDS:-2}"); do
    timeout 60 "$HT" --ignored --exact bench::bench_stack_cost --nocapture --test-threads=1 \
        > "$OUT/bench_stack_cost.$round.txt" 2>&1
    stamp "bench_stack_cost round $round" $?
done
