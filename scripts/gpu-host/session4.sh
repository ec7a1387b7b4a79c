#!/bin/bash
# One batched session on the GPU test host (issues 16, 17, 20), with the
# binary that has the counter cache, the invalidation hooks and the
# interrupt-context flag:
#   progcost  per-program cost (kernel.bpf_stats_enabled) streaming and
#             aggregate-only under the PyTorch workload (progcost.sh);
#   irq       `record` around the workload, `export --format jsonl`: how many
#             of the GPU's maps/unmaps were flagged interrupt context, and
#             the probe list's word on the preempt count and the IOMMU hooks.
# Usage: OUT=DIR scripts/gpu-host/session4.sh BIN
set -u
USAGE="session4.sh BIN"
. "$(dirname "$0")/prelude.sh"
PARTS=${PARTS:-progcost irq}
T=/sys/kernel/tracing
[ -d $T/events ] || mount -t tracefs nodev $T 2>/dev/null
{ uname -r; nvidia-smi -L; head -1 /proc/driver/nvidia/version; nproc;
  grep -c ' [dDbB] ' /proc/kallsyms; ls /sys/class/iommu; } > "$OUT/host.txt" 2>&1
"$BIN" --version > "$OUT/version.txt" 2>&1
"$BIN" probes > "$OUT/probes.txt" 2>&1
for part in $PARTS; do
  echo "== $part $(date -u +%T)"
  case $part in
  progcost)
    MODES="streaming aggregate" OUT=$OUT/progcost timeout 300 "$HERE/progcost.sh" "$BIN" 3000
    ;;
  irq)
    d=$OUT/irq; mkdir -p $d
    timeout 200 "$BIN" record -o $d/w.gdt -- python3 "$HERE/workload.py" --iters 300 \
      > $d/record.out 2> $d/record.err
    "$BIN" export $d/w.gdt --format jsonl -o $d/w.jsonl 2> $d/export.err
    python3 - $d/w.jsonl > $d/irq.json <<'P'
import json, sys, collections
c = collections.Counter()
for l in open(sys.argv[1]):
    try: e = json.loads(l)
    except Exception: continue
    k = e.get("kind", "")
    if not k.startswith(("dma_map", "dma_unmap", "iommu_map", "iommu_unmap")): continue
    c[(e.get("device"), k, e.get("context", "task"))] += 1
print(json.dumps([{"device": d, "kind": k, "context": x, "n": n} for (d, k, x), n in sorted(c.items())]))
P
    "$BIN" report $d/w.gdt > $d/report.txt 2>&1
    rm -f $d/w.jsonl
    ;;
  esac
done
