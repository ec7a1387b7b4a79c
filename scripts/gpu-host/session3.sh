#!/bin/bash
# One batched session on the GPU test host (issues 13, 14, 15, 20, 23):
#   golden  `record --check --stacks --json` around the PyTorch workload and a
#           real Xid 31, then `report --json` of the file: the golden H200
#           recording and the live JSON it must replay to (and what the misuse
#           checks say of the NVIDIA driver's real DMA-API traffic);
#   flight  `serve --check --snapshot-dir --ring 60s` during the workload and an
#           Xid 31: the snapshot, its report, the metrics;
#   nvml    scripts/gpu-host/nvml-check.sh (NVML facts against nvidia-smi while
#           1 and 4 GiB are pinned, the Xid's process);
#   sgbig   scripts/gpu-host/sgbig.sh (exact bytes of 0.25..16 GiB registrations).
# Each part has its own time limit; PARTS picks them (default: all four).
# Usage: OUT=DIR scripts/gpu-host/session3.sh BIN
set -u
USAGE="session3.sh BIN"
. "$(dirname "$0")/prelude.sh"
PARTS=${PARTS:-golden flight nvml sgbig}
T=/sys/kernel/tracing
[ -d $T/events ] || mount -t tracefs nodev $T 2>/dev/null
{ uname -r; nvidia-smi -L; head -1 /proc/driver/nvidia/version; nproc; free -g; } > "$OUT/host.txt" 2>&1
"$BIN" --version > "$OUT/version.txt" 2>&1
"$BIN" probes > "$OUT/probes.txt" 2>&1
"$BIN" probes --json > "$OUT/probes.json" 2>/dev/null
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
"$NVCC" -O2 -o /tmp/xid31 "$HERE/xid31.cu" > "$OUT/nvcc.txt" 2>&1

# The workload, then a CUDA kernel writing to an unmapped address (Xid 31).
cat > /tmp/gdt-work.sh <<EOF
#!/bin/bash
python3 "$HERE/workload.py" --iters \${ITERS:-300} > "\$1/workload.json" 2>&1
sleep 1
/tmp/xid31 > "\$1/xid31.txt" 2>&1
sleep 3
EOF
chmod +x /tmp/gdt-work.sh

for part in $PARTS; do
  echo "== $part $(date -u +%T)"
  case $part in
  golden)
    d=$OUT/golden; mkdir -p $d
    timeout 240 "$BIN" record --check --stacks --json -o $d/h200.gdt -- /tmp/gdt-work.sh $d \
      > $d/record.json 2> $d/record.err
    echo "record exit $?" >> $d/record.err
    "$BIN" report --json $d/h200.gdt > $d/report.json 2> $d/report.err
    "$BIN" report $d/h200.gdt > $d/report.txt 2>&1
    ls -l $d
    ;;
  flight)
    d=$OUT/flight; mkdir -p $d/snaps
    "$BIN" serve --check --listen 127.0.0.1:9435 --snapshot-dir $d/snaps --ring 60s --after 5s \
      > $d/serve.out 2> $d/serve.err & sv=$!
    for i in $(seq 1 120); do grep -q "probes attached" $d/serve.err && break; sleep 0.5; done
    ITERS=200 timeout 180 /tmp/gdt-work.sh $d
    sleep 8
    curl -s http://127.0.0.1:9435/metrics > $d/metrics.txt
    kill -TERM $sv; wait $sv; echo "serve exit $?" >> $d/serve.err
    for f in $d/snaps/*.gdt; do
      [ -e "$f" ] || continue
      "$BIN" report --json "$f" > "$f.report.json" 2> "$f.report.err"
      "$BIN" report "$f" > "$f.report.txt" 2>&1
    done
    ls -l $d $d/snaps
    ;;
  nvml)
    OUT=$OUT timeout 300 bash "$HERE/nvml-check.sh" "$BIN" 20 > $OUT/nvml-check.out 2>&1
    echo "nvml-check exit $?" >> $OUT/nvml-check.out
    ;;
  sgbig)
    OUT=$OUT timeout 300 bash "$HERE/sgbig.sh" "$BIN" > $OUT/sgbig.out 2>&1
    echo "sgbig exit $?" >> $OUT/sgbig.out
    ;;
  esac
done
echo "== done $(date -u +%T)"
