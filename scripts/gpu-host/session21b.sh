#!/bin/bash
# Session 21's second call, with the recorder writing every stack its
# records name (not only the findings'): the frames of the NVIDIA driver's
# real DMA-API stacks, as `export` now shows them, and one more round of
# session21.sh's depths. Usage: session21b.sh BIN; results in $OUT.
set -u
USAGE="session21b.sh BIN"
. "$(dirname "$0")/prelude.sh"
{ uname -r; nproc; nvidia-smi -L 2>/dev/null; cat /proc/loadavg; } > "$OUT/host.txt" 2>&1
stamp() { echo "$1 rc=$2 at ${SECONDS}s load $(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/host.txt"; }
timeout 120 "$BIN" record -o /tmp/s21.gdt --force --check --stacks --stacks-every-call \
    -- python3 "$HERE/workload.py" --iters 300 > "$OUT/record.out" 2> "$OUT/record.err"
stamp record $?
timeout 60 "$BIN" export /tmp/s21.gdt --format jsonl > /tmp/s21.jsonl 2> "$OUT/export.err"
stamp export $?
grep -c '"stack_id"' /tmp/s21.jsonl > "$OUT/stack-id-records.txt"
grep '"kind":"stacks"' /tmp/s21.jsonl > "$OUT/stacks.jsonl"
MODES="check stacks stacks-24 stacks-16" OUT="$OUT/round3" timeout 100 \
    bash "$HERE/progcost.sh" "$BIN" "${PC_ITERS:-1500}" > "$OUT/progcost.3.txt" 2>&1
stamp "progcost round 3" $?
