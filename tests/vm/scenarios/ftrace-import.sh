#!/bin/sh
# `import` on each kernel's own ftrace text: with the dma, iommu and swiotlb
# events on in tracefs, an O_DIRECT read of the NVMe under VT-d prints lines
# (6.1: iommu:map/unmap only; 6.12: dma_map_sg and friends too; 6.18 and
# newer: the block layer's IOVA API, iommu:map/unmap again) that import must
# read whole: no unreadable body, no line it takes for foreign text, one
# record per event line of a tracepoint it reads, and the same count of each
# kind out of `export` as the text holds; where the kernel has the `fields`
# option, the same ring printed by fields imports to the same records.
# 5.10 is left out: nothing of these
# fires there (nvme-iommu-tracefs says why).
# gdt-vm: kernels=6.1,6.12,6.18,newest devices=nvme iommu=intel timeout=300
set -e
T=/sys/kernel/tracing
events() { for e in dma iommu swiotlb; do [ ! -d $T/events/$e ] || echo "$1" > $T/events/$e/enable; done; }
events 1
echo > $T/trace
dd if=/dev/nvme0n1 of=/dev/null bs=64k count=256 iflag=direct
events 0
cat $T/trace > /tmp/trace.txt
# The event lines of the tracepoints import reads (iommu's are map/unmap).
known=$(grep -cE ': (map|unmap|dma_[a-z_]+|swiotlb_bounced): ' /tmp/trace.txt || true)
echo "event lines: $known of $(grep -vc '^#' /tmp/trace.txt || true)"
grep -m 3 -E ': (map|dma_map_sg|dma_map_phys|dma_map_page): ' /tmp/trace.txt | cut -c1-300 || true
gpudirect-trace import /tmp/trace.txt -o /tmp/t.gdt --json > /tmp/import.json
cat /tmp/import.json
grep -q '"unreadable":0,' /tmp/import.json
grep -q '"not_ftrace":0,' /tmp/import.json
grep -q "\"events\":$known," /tmp/import.json
[ "$known" -gt 0 ]
gpudirect-trace report /tmp/t.gdt | head -n 12
gpudirect-trace export /tmp/t.gdt --format jsonl > /tmp/t.jsonl
for pair in "map:iommu_map" "unmap:iommu_unmap" "dma_map_sg:dma_map_sg" "dma_unmap_sg:dma_unmap_sg"; do
    text=$(grep -c ": ${pair%%:*}: " /tmp/trace.txt || true)
    out=$(grep -c "\"kind\":\"${pair##*:}\"" /tmp/t.jsonl || true)
    echo "${pair%%:*}: $text in the text, $out exported"
    [ "$text" = "$out" ]
done
# The same ring read again by fields (options/fields, 6.3+; the form a
# persistent ring buffer prints after a reboot): the same records.
if [ -e $T/options/fields ]; then
    echo 1 > $T/options/fields
    cat $T/trace > /tmp/fields.txt
    echo 0 > $T/options/fields
    grep -m 2 -E ': (map|dma_map_sg|dma_map_phys|dma_map_page): ' /tmp/fields.txt | cut -c1-300 || true
    gpudirect-trace import /tmp/fields.txt -o /tmp/f.gdt --json > /tmp/fields.json
    cat /tmp/fields.json
    grep -q '"unreadable":0,' /tmp/fields.json
    grep -q "\"events\":$known," /tmp/fields.json
    gpudirect-trace export /tmp/f.gdt --format jsonl | grep '"kind"' > /tmp/f.jsonl
    grep '"kind"' /tmp/t.jsonl | cmp - /tmp/f.jsonl
    echo "fields form: $(wc -l < /tmp/f.jsonl) records, the same as the print formats'"
else
    echo "fields form: this kernel has no options/fields (6.3+), not read"
fi
echo "ftrace import: ok"
