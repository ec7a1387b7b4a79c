#!/bin/sh
# gdt-misuse without an IOMMU (dma-direct, no swiotlb in a 1 GiB guest):
# every command runs and the guest survives. Buffers come from ZONE_DMA so
# the edu's 28-bit mask reaches them; the control's edu DMA still lands.
# What needs an IOMMU fails cleanly with DMA_MAPPING_ERROR and -EIO: the
# BAR's map_resource (above the mask), and the kernel text/rodata maps when
# KASLR put the kernel above 256 MiB; the IOVA API's commands (6.17+
# headers) do nothing and return -EOPNOTSUPP (dma_iova_try_alloc declines
# without an IOMMU).
# gdt-vm: kernels=6.1,6.12,6.18,newest devices=nvme,edu iommu=none kmods=gdt-misuse timeout=300
. /scenarios/misuse.lib
misuse_load || exit 1
grep -q 'iommu=direct buffers=zone-dma' $MISUSE_LOG/all || fail "probe did not see dma-direct"
for c in $(cut -f1 /sys/kernel/debug/gdt-misuse/commands); do
    case $c in
        leak | release-leaks) continue ;; # below: the unbind ends the commands
        sg-many) run_cmd sg-many 4096 ;;
        *) run_cmd $c ;;
    esac
    case "$c:$rc" in
        *:0 | unmap-class-page:-5 | map-text:-5 | map-rodata:-5 | iova-*:-95) ;;
        *) fail "$c: rc=$rc" ;;
    esac
done
run_cmd leak
[ "$rc" = 0 ] || fail "leak: rc=$rc"
echo $GDT_EDU_BDF > $MISUSE_DRV/unbind
run_cmd release-leaks
expect release-leaks 2 0
[ "$(grep -c 'verify cmd=control edu .* ok' $MISUSE_LOG/control)" = 3 ] || fail "control: edu DMA not verified"
grep -q 'sg-many entries=4096 bytes=1966080 mapped=4096 ' $MISUSE_LOG/sg-many-4096 || fail "sg-many"
grep -q 'fn=dma_map_page .* error=DMA_MAPPING_ERROR' $MISUSE_LOG/map-fail || fail "map-fail"
rmmod gdt_misuse || fail "rmmod"
dd if=/dev/nvme0n1 of=/tmp/s bs=4096 count=1 skip=100 iflag=direct 2>/dev/null
head -c 19 /tmp/s | grep -q 'gdt-sector-00000800' || fail "nvme read after the misuse"
echo "misuse scenario (no IOMMU): $fails failures"
[ $fails = 0 ]
