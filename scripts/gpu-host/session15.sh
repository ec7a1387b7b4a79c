#!/bin/bash
# Issue 28 on the GPU host after the byte-loop memset was removed (b477287)
# and the stacks' cost was benched (70c6cf9), in one device call, the most
# wanted first so that a cut run loses the least:
# 1. per hit on real events (progcost.sh), the four modes interleaved over
#    PC_ROUNDS rounds, then one round of --check --stacks at the default
#    depth and at 16 (real driver stacks, not the test run's short one);
# 2. bench_stack_cost of NEW, STACK_ROUNDS times;
# 3. the sg walk, BASE against NEW interleaved (session12.sh), SG_ROUNDS;
# 4. bench_program_cost of NEW, COST_ROUNDS times.
# Usage: session15.sh BIN BASE_HOSTTEST NEW_HOSTTEST; results in $OUT.
set -u
USAGE="session15.sh BIN BASE_HOSTTEST NEW_HOSTTEST"
. "$(dirname "$0")/prelude.sh"
BASE=${2:?usage: $USAGE}
NEW=${3:?usage: $USAGE}
chmod +x "$BASE" "$NEW"
# session12.sh takes OUT from the environment.
export OUT
{ uname -r; nproc; nvidia-smi -L 2>/dev/null; cat /proc/loadavg; } > "$OUT/host.txt" 2>&1
stamp() { echo "$1 rc=$2 at ${SECONDS}s load $(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/host.txt"; }
for round in $(seq 1 "${PC_ROUNDS:-3}"); do
    MODES="streaming aggregate aggregate-every aggregate-nolife" \
        OUT="$OUT/round$round" timeout 100 bash "$HERE/progcost.sh" "$BIN" "${PC_ITERS:-1500}" \
        > "$OUT/progcost.$round.txt" 2>&1
    stamp "progcost round $round" $?
done
MODES="streaming stacks stacks-16" OUT="$OUT/stacks" timeout 100 \
    bash "$HERE/progcost.sh" "$BIN" "${PC_ITERS:-1500}" > "$OUT/progcost.stacks.txt" 2>&1
stamp "progcost stacks" $?
for round in $(seq 1 "${STACK_ROUNDS:-3}"); do
    timeout 60 "$NEW" --ignored --exact bench::bench_stack_cost --nocapture --test-threads=1 \
        > "$OUT/bench_stack_cost.$round.txt" 2>&1
    stamp "bench_stack_cost round $round" $?
done
timeout 200 bash "$HERE/session12.sh" "${SG_ROUNDS:-3}" bench_sg_walk:30 base="$BASE" new="$NEW"
stamp "sg A/B" $?
timeout 120 bash "$HERE/session12.sh" "${COST_ROUNDS:-2}" bench_program_cost:55 new="$NEW"
stamp "program_cost" $?
