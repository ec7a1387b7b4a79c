#!/bin/sh
# virtio-iommu (qemu's virtio-iommu-pci, ACPI VIOT; the guest's virtio_iommu
# module loads before the endpoints' drivers). The edu has no driver, and
# without a probe the VIOT path never gives it an IOMMU group (its DMA would
# bypass translation): binding it to pci-stub once attaches it to a DMA
# domain that stays after unbind. Then an edu DMA to an unmapped IOVA is
# reported by the guest as "page fault from EP 24 at 0x123000 []" (EP = the
# requester id of 00:03.0), and NVMe reads map through virtio-iommu. The host
# check (check=virtio-fault) wants the fault decoded on the edu's bus id and
# the NVMe's iommu maps attributed to it.
# gdt-vm: kernels=6.12 devices=nvme,edu iommu=virtio modules=pci_stub timeout=300 check=virtio-fault
set -e
. /scenarios/common.lib
edu=/sys/bus/pci/devices/$GDT_EDU_BDF
echo pci-stub > $edu/driver_override
echo "$GDT_EDU_BDF" > /sys/bus/pci/drivers_probe
echo "$GDT_EDU_BDF" > /sys/bus/pci/drivers/pci-stub/unbind
echo "GROUP_TYPE $GDT_EDU_BDF $(cat $edu/iommu_group/type)"
traced /tmp/live.json /tmp/live.err live --json --duration 6s
dd if=/dev/nvme0n1 of=/dev/null bs=64k count=64 iflag=direct
gdt-dma-inject --device "$GDT_EDU_BDF" --iova 0x123000 --len 64 --dir write
wait $tracer
dmesg | grep "fault from EP" | head -n 2
dmesg | grep "fault from EP" | head -n 1 | gpudirect-trace explain --json -
tail -n 1 /tmp/live.json
