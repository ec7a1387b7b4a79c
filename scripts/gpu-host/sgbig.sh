#!/bin/bash
# Exact bytes for huge scatter-gather mappings on the GPU host (issue 23):
# cudaHostRegister of 0.25, 1, 4 and 16 GiB (21.25 GiB) under live --json,
# and, in a run of its own, just the CUDA context (its own mappings). The
# GPU's bytes mapped and unmapped must equal the registered total plus the
# context's, with nothing marked truncated (sg_truncated == 0). Needs ~17 GiB
# of free RAM (one buffer resident at a time). Writes $OUT/sgbig-*.json and
# prints a verdict line per check.
# Usage: scripts/gpu-host/sgbig.sh BIN [SIZES_GIB]   (SIZES default 0.25,1,4,16)
set -u
USAGE="sgbig.sh BIN [SIZES_GIB]"
. "$(dirname "$0")/prelude.sh"
SIZES=${2:-0.25,1,4,16}

# trace NAME ARGS...: live --json around one run of sgbig.py ARGS.
trace() {
  local name=$1; shift
  start_live /tmp/sgbig-$name.jsonl "$OUT/sgbig-$name.err" --interval 600s
  local tr=$LIVE_PID
  python3 "$HERE/sgbig.py" "$@" > "$OUT/sgbig-$name-work.json" 2> "$OUT/sgbig-$name-work.err"
  sleep 2
  kill -INT $tr; wait $tr
  tail -n 1 /tmp/sgbig-$name.jsonl > "$OUT/sgbig-$name.json"
}

trace context --context-only
trace register --sizes "$SIZES"

python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
ctx, reg = (json.load(open(f"{out}/sgbig-{n}.json")) for n in ("context", "register"))
work = json.load(open(f"{out}/sgbig-register-work.json"))
want = work["total_bytes"]
print("registered:", [(r["gib"], r["register_rc"], round(r["register_s"], 3)) for r in work["registered"]],
      "total", want, "bytes")
def gpus(doc):
    return {d["device"]: d for d in doc["devices"] if d.get("sg_maps", 0) or d.get("maps", 0)}
c, r = gpus(ctx), gpus(reg)
ok = True
for dev, d in r.items():
    base = c.get(dev, {})
    mapped = d["bytes_mapped"] - base.get("bytes_mapped", 0)
    unmapped = d["bytes_unmapped"] - base.get("bytes_unmapped", 0)
    line = (f'{dev}: source {d.get("dma_source")} bytes_mapped {d["bytes_mapped"]} (context alone '
            f'{base.get("bytes_mapped", 0)}) -> registered part {mapped}, unmapped part {unmapped}, '
            f'sg_maps {d["sg_maps"]} sg_entries {d["sg_entries"]} sg_truncated {d.get("sg_truncated")} '
            f'unmap_truncated {d.get("sg_unmap_truncated")}')
    print(line)
    if d["sg_maps"] == 0:
        continue
    for what, got in (("mapped", mapped), ("unmapped", unmapped)):
        # The context's own mappings vary a little between runs (a few
        # pages): allow 1 MiB, report the exact difference.
        verdict = "PASS" if abs(got - want) <= (1 << 20) else "FAIL"
        ok &= verdict == "PASS"
        print(f"{verdict}: {dev} bytes {what} beyond the context {got} vs registered {want} "
              f"(difference {got - want})")
    t = d.get("sg_truncated", 0) + d.get("sg_unmap_truncated", 0)
    print(("PASS" if t == 0 else "FAIL") + f": {dev} scatterlists truncated: {t}")
    ok &= t == 0
print("lost", reg["lost_events"], "missed", reg["missed_events"])
print("RESULT", "PASS" if ok else "FAIL")
PY
