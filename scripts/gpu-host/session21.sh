#!/bin/bash
# Which frames a real driver stack holds, and what keeping fewer saves with
# the stack filter (session 21). Issue 28's 700 ns per call was missed by
# ~60-220 ns in session 20, by the maps' walks alone; session 15 measured
# depth without the filter. In one device call, the most wanted first:
# 1. per hit on real events (progcost.sh around workload.py), the modes
#    check, stacks, stacks-24 and stacks-16 interleaved over PC_ROUNDS rounds;
# 2. the frames themselves: a `record --check --stacks --stacks-every-call`
#    around workload.py, exported, its "stacks" lines kept (symbolized), so
#    that what a depth cuts off is seen, not guessed.
# Usage: session21.sh BIN; results in $OUT.
set -u
USAGE="session21.sh BIN"
. "$(dirname "$0")/prelude.sh"
{ uname -r; nproc; nvidia-smi -L 2>/dev/null; cat /proc/loadavg; } > "$OUT/host.txt" 2>&1
stamp() { echo "$1 rc=$2 at ${SECONDS}s load $(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/host.txt"; }
for round in $(seq 1 "${PC_ROUNDS:-3}"); do
    MODES="check stacks stacks-24 stacks-16" OUT="$OUT/round$round" timeout 200 \
        bash "$HERE/progcost.sh" "$BIN" "${PC_ITERS:-1500}" > "$OUT/progcost.$round.txt" 2>&1
    stamp "progcost round $round" $?
done
timeout 120 "$BIN" record -o /tmp/s21.gdt --force --check --stacks --stacks-every-call \
    -- python3 "$HERE/workload.py" --iters 300 > "$OUT/record.out" 2> "$OUT/record.err"
stamp record $?
timeout 60 "$BIN" export /tmp/s21.gdt --format jsonl 2> "$OUT/export.err" \
    | grep '"kind":"stacks"' > "$OUT/stacks.jsonl"
stamp export $?
