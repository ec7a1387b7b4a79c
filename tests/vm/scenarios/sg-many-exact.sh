#!/bin/sh
# Exact bytes for huge scatterlists (issue 23): the gdt-misuse test driver
# (tests/vm/gdt-misuse) maps lists of 4096 and 20000 entries (4 a page,
# chained past 128) with dma_map_sg and unmaps them. The edu's bytes in the
# final live --json must equal the driver's own totals to the byte, with
# nothing marked truncated: on 6.12 from dma:dma_map_sg, on 6.1 and 5.10
# from the hooks (5.10 has no bpf_loop(): its walk goes on in tail-called
# chunks). Two tracers: one on fentry/fexit, one forced onto kprobes
# (check=sg-many-exact).
# gdt-vm: kernels=5.10,6.1,6.12,newest devices=edu iommu=intel kmods=gdt-misuse timeout=400 check=sg-many-exact
. /scenarios/common.lib
. /scenarios/misuse.lib
two_tracers 300s || exit 1
gpudirect-trace probes | grep -E '^time:dma_(map|unmap)_sg '
misuse_load || exit 1
for n in 4096 20000; do
    run_cmd sg-many $n
done
end_two_tracers
exit $fails
