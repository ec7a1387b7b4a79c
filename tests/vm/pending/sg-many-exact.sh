#!/bin/sh
# Exact bytes for huge scatterlists (issue 23): the gdt-misuse test driver
# (tests/vm/gdt-misuse) maps lists of 4096 and 20000 entries (4 a page,
# chained past 128) with dma_map_sg and unmaps them. The edu's bytes in the
# final live --json must equal the driver's own totals to the byte, with
# nothing marked truncated: on 6.12 from dma:dma_map_sg, on 6.1 from the
# hooks (check=sg-many-exact).
# gdt-vm: kernels=6.1,6.12 devices=edu iommu=intel kmods=gdt-misuse timeout=400 check=sg-many-exact
. /scenarios/common.lib
. /scenarios/misuse.lib
gpudirect-trace live --json --duration 300s > /tmp/l.json 2> /tmp/l.err &
t=$!
wait_for /tmp/l.err "probes attached" $t || exit 1
misuse_load || exit 1
for n in 4096 20000; do
    run_cmd sg-many $n
done
sleep 2
kill -INT $t
wait $t
echo "LIVE $(tail -n 1 /tmp/l.json)"
exit $fails
