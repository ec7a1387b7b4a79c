#!/bin/sh
# Interrupt context (issue 20): the NVMe's unmaps run in its completion
# interrupt (hard IRQ, or the block softirq), its maps in dd's submission.
# Records made in interrupt context must carry the flag (export's
# "context":"interrupt") and the probe list must say how the preempt count
# was read: the typed ksym of __preempt_count (6.1, 6.18+) or of
# pcpu_hot.preempt_count (6.12); 5.10's BTF has no variables, so there
# the kernel read at kallsyms' address of __preempt_count
# (check=irq-context).
# gdt-vm: kernels=5.10,6.1,6.12,6.18,newest devices=nvme iommu=intel timeout=400 check=irq-context
set -e
. /scenarios/common.lib
# The typed ksym needs kallsyms to list the variable's name, not to show its
# address: hide every address (5.10 reads the address, so it keeps them).
case "$(uname -r)" in
5.10.*) ;;
*) echo 2 > /proc/sys/kernel/kptr_restrict ;;
esac
traced - /tmp/rec.err record -o /tmp/t.gdt --duration 8s
dd if=/dev/nvme0n1 of=/dev/null bs=64k count=512 iflag=direct
wait $tracer
gpudirect-trace probes | grep '^interrupt context' | sed 's/^/PROBE /'
gpudirect-trace export /tmp/t.gdt --format jsonl -o /tmp/t.jsonl
grep "\"device\":\"$GDT_NVME_BDF\"" /tmp/t.jsonl > /tmp/nvme.jsonl || true
count() { grep -E "\"kind\":\"$1\"" /tmp/nvme.jsonl | grep -c "$2" || true; }
m=$(count 'dma_map(_sg)?' '')
mi=$(count 'dma_map(_sg)?' '"context":"interrupt"')
u=$(count 'dma_unmap(_sg)?' '')
ui=$(count 'dma_unmap(_sg)?' '"context":"interrupt"')
echo "IRQCTX {\"maps\":$m,\"maps_in_interrupt\":$mi,\"unmaps\":$u,\"unmaps_in_interrupt\":$ui}"
gpudirect-trace report /tmp/t.gdt | grep -A4 '^processes mapping' || true
