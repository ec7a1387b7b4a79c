#!/bin/bash
# Issue 28 on the GPU host, in one device call (session 14):
# 1. per hit on real events (progcost.sh, three rounds) for streaming, aggregate-only with
#    sampled lifetimes (the default since stop 43), with every lifetime timed
#    and without lifetimes;
# 2. the sg walk per entry, A/B: BASE (before the eight-entry reads) against
#    NEW, interleaved round by round;
# 3. bench_program_cost of NEW, twice (the sampled and the every-lifetime
#    rows through BPF_PROG_TEST_RUN).
# Usage: session14.sh BIN BASE_HOSTTEST NEW_HOSTTEST; results in $OUT.
# Rounds and sizes (this lease's run-to-run spread is up to 2x for the same
# build, so the more rounds the better): PC_ROUNDS and PC_ITERS for
# progcost.sh (3 and 1500), SG_ROUNDS (3), COST_ROUNDS (2).
set -u
BIN=${1:?usage: session14.sh BIN BASE_HOSTTEST NEW_HOSTTEST}
BASE=${2:?usage: session14.sh BIN BASE_HOSTTEST NEW_HOSTTEST}
NEW=${3:?usage: session14.sh BIN BASE_HOSTTEST NEW_HOSTTEST}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OUT=${OUT:-./gpu-out}
mkdir -p "$OUT"
chmod +x "$BIN" "$BASE" "$NEW"
{ uname -r; nproc; nvidia-smi -L 2>/dev/null; cat /proc/loadavg; } > "$OUT/host.txt" 2>&1
# Rounds of the four modes, interleaved: one run of 1500 iterations is
# short (~7 s) and a single round's sg programs moved by 2x.
for round in $(seq 1 "${PC_ROUNDS:-3}"); do
    MODES="streaming aggregate aggregate-every aggregate-nolife" \
        OUT="$OUT/round$round" timeout 100 bash "$HERE/progcost.sh" "$BIN" "${PC_ITERS:-1500}" \
        > "$OUT/progcost.$round.txt" 2>&1
    echo "progcost round $round rc=$?" >> "$OUT/host.txt"
done
timeout 200 bash "$HERE/session12.sh" "${SG_ROUNDS:-3}" bench_sg_walk:30 base="$BASE" new="$NEW"
echo "sg A/B rc=$?" >> "$OUT/host.txt"
timeout 120 bash "$HERE/session12.sh" "${COST_ROUNDS:-2}" bench_program_cost:55 new="$NEW"
echo "program_cost rc=$?" >> "$OUT/host.txt"
cat /proc/loadavg >> "$OUT/host.txt"
