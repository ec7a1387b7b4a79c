//! Scatter-gather mappings: walk the scatterlist for the byte total and the
//! per-entry lengths, following chained lists (sg_next() semantics).

use aya_ebpf::helpers::bpf_probe_read_kernel;
use gpudirect_trace_common::{flags, SgEvent, SG_LENS, SG_WALK_MAX};

use crate::emit::{add_counter, base_event, config, count, output_hot};

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
fn read_u32(addr: u64) -> Option<u32> {
    // SAFETY: as above.
    unsafe { bpf_probe_read_kernel(addr as *const u32) }.ok()
}

#[inline(always)]
pub fn sg_event(k: u16, dev: u64, sgl: u64, nents: u32, ents: u32, dir: u32, attrs: u64) {
    let cfg = config();
    let off = cfg.offsets;
    let mut ev = SgEvent {
        event: base_event(k, dev, 0),
        nents,
        ents,
        n_lens: 0,
        _pad: 0,
        lens: [0; SG_LENS],
    };
    ev.event.dir = dir;
    ev.event.aux = attrs;
    if let Some(a) = read_u64(sgl + off.sg_dma_address as u64) {
        ev.event.addr = a;
    }
    let mut sg = sgl;
    let mut walked: u32 = 0;
    let mut total: u64 = 0;
    let mut n_lens: usize = 0;
    let mut i: u32 = 0;
    while i < SG_WALK_MAX * 2 {
        i += 1;
        if walked >= nents || sg == 0 {
            break;
        }
        let Some(page_link) = read_u64(sg + off.sg_page_link as u64) else {
            break;
        };
        if page_link & SG_CHAIN != 0 {
            sg = page_link & !(SG_CHAIN | SG_END);
            continue;
        }
        let len = read_u32(sg + off.sg_length as u64).unwrap_or(0);
        total += len as u64;
        if n_lens < SG_LENS {
            ev.lens[n_lens] = len;
            n_lens += 1;
        }
        walked += 1;
        if page_link & SG_END != 0 {
            break;
        }
        sg += off.sg_stride as u64;
    }
    if walked < nents {
        ev.event.flags |= flags::SG_TRUNCATED;
    }
    ev.n_lens = n_lens as u32;
    ev.event.size = total;
    count(k);
    add_counter(&ev.event);
    output_hot(&ev);
}
