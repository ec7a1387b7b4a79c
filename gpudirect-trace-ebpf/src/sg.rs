//! Scatter-gather mappings: walk the scatterlist for the byte total and the
//! per-entry lengths, following chained lists (sg_next() semantics).

use aya_ebpf::{helpers::bpf_probe_read_kernel, macros::map, maps::PerCpuArray};
use gpudirect_trace_common::{flags, kind, SgEvent, SG_LENS, SG_WALK_MAX};

use crate::{
    emit::{add_counter, base_event, cfg_stream, config, output_hot, stamp},
    lifetime,
};

/// The record is built in a per-CPU map value, not on the stack: the
/// verifier tracks each stack slot's type (zero vs. written) per path, and a
/// 16-entry array written on some paths only gives it 2^16 states to explore.
/// One slot per program: dma_unmap_sg runs from the completion interrupt and
/// can interrupt dma_map_sg's program on the same CPU mid-record (seen on
/// 6.12: a map counted as an unmap). The kernel never nests a program in
/// itself, so a slot per program is never shared.
#[map]
static SG_SCRATCH: PerCpuArray<SgEvent> = PerCpuArray::with_max_entries(2, 0);

/// `page_link` bit 0: this entry is a chain pointer to the next array.
const SG_CHAIN: u64 = 0x01;
/// `page_link` bit 1: this entry is the last one.
const SG_END: u64 = 0x02;

#[inline(always)]
fn read_u64(addr: u64) -> Option<u64> {
    // SAFETY: bpf_probe_read_kernel tolerates any address.
    unsafe { bpf_probe_read_kernel(addr as *const u64) }.ok()
}

#[inline(always)]
fn read_2u64(addr: u64) -> Option<[u64; 2]> {
    // SAFETY: as above.
    unsafe { bpf_probe_read_kernel(addr as *const [u64; 2]) }.ok()
}

#[inline(always)]
fn read_u32(addr: u64) -> Option<u32> {
    // SAFETY: as above.
    unsafe { bpf_probe_read_kernel(addr as *const u32) }.ok()
}

#[inline(always)]
pub fn sg_event(k: u16, dev: u64, sgl: u64, nents: u32, ents: u32, dir: u32, attrs: u64) {
    let cfg = config();
    let off = cfg.offsets;
    let slot = u32::from(k == kind::DMA_UNMAP_SG);
    let Some(scratch) = SG_SCRATCH.get_ptr_mut(slot) else {
        return;
    };
    // SAFETY: this CPU's slot, used only for the duration of this program.
    let ev = unsafe { &mut *scratch };
    ev.event = base_event(k, dev, 0);
    ev.nents = nents;
    ev.ents = ents;
    ev.n_lens = 0;
    ev.event.dir = dir;
    ev.event.aux = attrs;
    if let Some(a) = read_u64(sgl + off.sg_dma_address as u64) {
        ev.event.addr = a;
    }
    // One loop counter only: a second counter that diverges from it at chain
    // entries multiplies the verifier's states past its 1M-instruction limit.
    // The list ends at the entry marked SG_END (sg_mark_end(), set on the
    // last entry of every table); `nents` is kept for the record only.
    let len_in_head =
        off.sg_length >= off.sg_page_link + 8 && off.sg_length + 4 <= off.sg_page_link + 16;
    let len_shift = (off.sg_length.wrapping_sub(off.sg_page_link + 8) & 7) * 8;
    let mut sg = sgl;
    let mut total: u64 = 0;
    let mut ended = false;
    let mut n_lens: u32 = 0;
    for i in 0..SG_WALK_MAX {
        if sg == 0 {
            ended = true;
            break;
        }
        // One read covers page_link and length when they share 16 bytes
        // (every x86_64 kernel: offsets 0 and 12), else two reads.
        let Some(head) = read_2u64(sg + off.sg_page_link as u64) else {
            ended = true;
            break;
        };
        let page_link = head[0];
        let mut len: u32 = 0;
        if page_link & SG_CHAIN != 0 {
            sg = page_link & !(SG_CHAIN | SG_END);
        } else {
            len = if len_in_head {
                (head[1] >> len_shift) as u32
            } else {
                read_u32(sg + off.sg_length as u64).unwrap_or(0)
            };
            total += len as u64;
            sg += off.sg_stride as u64;
        }
        if (i as usize) < SG_LENS {
            // Chain entries leave a 0 here; userspace skips zero lengths.
            ev.lens[i as usize] = len;
            n_lens = i + 1;
        }
        if page_link & (SG_END | SG_CHAIN) == SG_END {
            ended = true;
            break;
        }
    }
    if !ended {
        ev.event.flags |= flags::SG_TRUNCATED;
    }
    ev.n_lens = n_lens;
    ev.event.size = total;
    add_counter(&ev.event);
    if k == kind::DMA_MAP_SG {
        lifetime::mapped(&ev.event);
    } else {
        lifetime::unmapped(&ev.event);
    }
    if cfg_stream() {
        stamp(&mut ev.event);
        output_hot(ev);
    }
}
