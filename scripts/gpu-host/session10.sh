#!/bin/bash
# Issue 28 on the GPU host, a quiet 16-CPU machine:
# 1. per hit through BPF_PROG_TEST_RUN (bench_program_cost): aggregate-only
#    unmaps with the per-CPU lifetime cache;
# 2. per hit on real events (progcost.sh, PyTorch DMA): the three modes, and
#    --check --stacks at stack depths 127, 32, 16 and 8 (item 3), whose
#    stacks are the driver's real ones (cudaHostRegister's ioctl path);
# 3. the depth each stack really had: the misuse report's frames per stack.
# Usage: session10.sh BIN HOSTTEST; results in $OUT.
set -u
USAGE="session10.sh BIN HOSTTEST"
. "$(dirname "$0")/prelude.sh"
HOSTTEST=${2:?usage: $USAGE}
chmod +x "$HOSTTEST"
{ uname -r; nproc; nvidia-smi -L 2>/dev/null; } > "$OUT/host.txt" 2>&1

"$HOSTTEST" --ignored --nocapture --test-threads=1 bench_program_cost bench_hot_path_parts \
    > "$OUT/bench-testrun.txt" 2>&1

OUT=$OUT MODES="streaming aggregate aggregate-nolife check stacks-127 stacks-32 stacks-16 stacks-8" \
    bash "$HERE/progcost.sh" "$BIN" ${PCITERS:-1500} > "$OUT/progcost.txt" 2>&1

# What a finding's stacks look like at depth 16: record with --check
# --stacks, then the report's text.
"$BIN" record --check --stacks --stack-depth 16 -o /tmp/s10.gdtrace \
    -- python3 "$HERE/workload.py" --iters 200 > "$OUT/record-16.out" 2> "$OUT/record-16.err"
"$BIN" report /tmp/s10.gdtrace > "$OUT/report-16.txt" 2>&1
"$BIN" report --json /tmp/s10.gdtrace > "$OUT/report-16.json" 2>&1
rm -f /tmp/s10.gdtrace
