#!/bin/sh
# The NVIDIA hooks' loader on a real module, with a stand-in for the driver
# (the NVIDIA module cannot exist in these VMs): `selftest module-hook`
# attaches the nv_dma_map_sgt slot's fentry/fexit programs to nvme's
# nvme_queue_rq through the nvme module's BTF object (attach_btf_obj_fd),
# the same path they take to nv_dma_map_sgt on a GPU host, and must count
# the calls that NVMe reads make. The selftest exits non-zero otherwise.
# gdt-vm: kernels=6.1,6.12,6.18,newest devices=nvme iommu=intel timeout=300
set -e
. /scenarios/common.lib
test -e /sys/kernel/btf/nvme
gpudirect-trace selftest module-hook --module nvme --function nvme_queue_rq --duration 6s \
    > /tmp/selftest.json 2> /tmp/selftest.err &
st=$!
wait_for /tmp/selftest.err "selftest:module-hook" $st
dd if=/dev/nvme0n1 of=/dev/null bs=64k count=64 iflag=direct
rc=0
wait $st || rc=$?
cat /tmp/selftest.json
exit $rc
