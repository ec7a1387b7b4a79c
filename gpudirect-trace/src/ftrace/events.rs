//! The bodies of the dma:*, iommu:* and swiotlb:* events as the kernel's
//! TP_printk formats print them, into the records the eBPF programs write
//! for the same tracepoints (gpudirect-trace-ebpf/src/main.rs and
//! dmarec.rs), so that everything after the source is one path.
//!
//! Read by key, not by position: the formats grew fields over the years
//! (6.12's dma_map_sg has none of 6.18's `nents=` / `ents=`), and a
//! scatterlist's lists may be cut short by the kernel's print buffer.

use gpudirect_trace_common::{flags, kind, Event, SgEvent, DMA_MAPPING_ERROR, SG_LENS};

use super::body::Fields;
use crate::{aggregate::UNATTRIBUTED, decode::Record};

/// One event of the trace, for the importer to place.
pub enum Parsed<'a> {
    /// A record of `device`.
    Record { record: Record, device: &'a str },
    /// A dma_unmap_sg, which prints only its physical addresses: the
    /// importer finds its map (`first_phys`) for the DMA address and size.
    UnmapSg {
        event: SgEvent,
        device: &'a str,
        first_phys: u64,
        phys_whole: bool,
    },
}

/// The event's record; `None` for an event this importer does not read
/// (counted by name by the caller) or a body it cannot (counted as bad).
pub fn parse<'a>(name: &str, body: &'a str, base: Event) -> Result<Option<Parsed<'a>>, ()> {
    let f = Fields::of(body);
    let mut ev = base;
    let dev = |f: &Fields<'a>| f.device().ok_or(());
    let rec = |ev: Event, device: &'a str| {
        Ok(Some(Parsed::Record {
            record: Record::Event(ev),
            device,
        }))
    };
    match name {
        "dma_map_page" | "dma_map_phys" | "dma_map_resource" => {
            ev.addr = f.hex("dma_addr").ok_or(())?;
            ev.kind = if ev.addr == DMA_MAPPING_ERROR {
                kind::DMA_MAP_ERR
            } else {
                kind::DMA_MAP
            };
            ev.phys = f.hex("phys_addr").unwrap_or(0);
            ev.size = f.dec("size").ok_or(())?;
            ev.dir = f.dir();
            ev.flags |= resource(name, &f);
            rec(ev, dev(&f)?)
        }
        "dma_unmap_page" | "dma_unmap_phys" | "dma_unmap_resource" => {
            ev.kind = kind::DMA_UNMAP;
            ev.addr = f.hex("dma_addr").ok_or(())?;
            ev.size = f.dec("size").ok_or(())?;
            ev.dir = f.dir();
            ev.flags |= resource(name, &f);
            rec(ev, dev(&f)?)
        }
        "dma_map_sg" => {
            let (dma, dma_whole) = f.list("dma_addrs");
            let (sizes, sizes_whole) = f.list("sizes");
            let (phys, _) = f.list("phys_addrs");
            let ents = f.count("ents").map_or(dma.len() as u64, |(_, full)| full);
            let nents = f.count("nents").map_or(phys.len() as u64, |(_, full)| full);
            let complete = dma_whole && sizes_whole && sizes.len() as u64 >= ents;
            ev.kind = kind::DMA_MAP_SG;
            ev.addr = *dma.first().ok_or(())?;
            ev.phys = phys.first().copied().unwrap_or(0);
            ev.size = sizes.iter().fold(0u64, |a, &s| a.saturating_add(s));
            ev.dir = f.dir();
            if !complete {
                ev.flags |= flags::SG_TRUNCATED;
            }
            let mut sg = sg_event(ev, nents, ents);
            for (slot, &s) in sg.lens.iter_mut().zip(&sizes) {
                *slot = u32::try_from(s).unwrap_or(u32::MAX);
            }
            sg.n_lens = sizes.len().min(SG_LENS) as u32;
            Ok(Some(Parsed::Record {
                record: Record::Sg(sg),
                device: dev(&f)?,
            }))
        }
        "dma_unmap_sg" => {
            let (phys, phys_whole) = f.list("phys_addrs");
            let nents = f.count("nents").map_or(phys.len() as u64, |(_, full)| full);
            ev.kind = kind::DMA_UNMAP_SG;
            ev.dir = f.dir();
            ev.phys = *phys.first().ok_or(())?;
            Ok(Some(Parsed::UnmapSg {
                event: sg_event(ev, nents, 0),
                device: dev(&f)?,
                first_phys: ev.phys,
                phys_whole,
            }))
        }
        // `dma_addrs=` holds the list's physical addresses here.
        "dma_map_sg_err" => {
            ev.kind = kind::DMA_MAP_SG_ERR;
            ev.size = f
                .count("nents")
                .map_or(f.list("dma_addrs").0.len() as u64, |(_, full)| full);
            let err = f.signed("err").unwrap_or(0);
            // As the programs keep it: the errno as an i32 in the low half.
            ev.aux = u64::from(err as i32 as u32);
            ev.dir = f.dir();
            rec(ev, dev(&f)?)
        }
        // dma_alloc, dma_alloc_pages, dma_alloc_sgt (noncontiguous: no
        // kernel address), dma_alloc_sgt_err, and their frees.
        n if n.starts_with("dma_alloc") || n.starts_with("dma_free") => {
            let alloc = n.starts_with("dma_alloc");
            ev.addr = f.hex("dma_addr").ok_or(())?;
            ev.size = f.dec("size").ok_or(())?;
            ev.phys = f.hex("virt_addr").unwrap_or(0);
            ev.dir = f.dir();
            ev.flags |= flags::COHERENT;
            let sgt = n.contains("_sgt");
            if sgt {
                ev.flags |= flags::NONCONTIG;
            }
            // As the programs: an allocation that returned nothing is a
            // failed map, not a mapping (NULL prints as zeros).
            let failed = n.ends_with("_err") || (alloc && !sgt && ev.phys == 0 && ev.addr == 0);
            ev.kind = match (alloc, failed) {
                (true, true) => kind::DMA_MAP_ERR,
                (true, false) => kind::DMA_ALLOC,
                (false, _) => kind::DMA_FREE,
            };
            rec(ev, dev(&f)?)
        }
        n if n.starts_with("dma_sync_") => {
            ev.kind = if n.ends_with("for_device") {
                kind::DMA_SYNC_DEVICE
            } else {
                kind::DMA_SYNC_CPU
            };
            ev.dir = f.dir();
            if n.starts_with("dma_sync_sg") {
                let (dma, whole) = f.list("dma_addrs");
                let (sizes, _) = f.list("sizes");
                ev.flags |= flags::SCATTERLIST;
                if !whole {
                    ev.flags |= flags::SG_TRUNCATED;
                }
                ev.addr = dma.first().copied().unwrap_or(0);
                ev.size = sizes.iter().fold(0u64, |a, &s| a.saturating_add(s));
                ev.aux = f.count("nents").map_or(dma.len() as u64, |(_, full)| full);
            } else {
                ev.addr = f.hex("dma_addr").ok_or(())?;
                ev.size = f.dec("size").ok_or(())?;
            }
            rec(ev, dev(&f)?)
        }
        // `IOMMU: iova=0x... - 0x... paddr=0x... size=N`: no device (the
        // live programs find it through the DMA-API call around the map).
        "map" | "iommu_map" => {
            ev.kind = kind::IOMMU_MAP;
            ev.flags |= flags::NO_DEVICE;
            ev.addr = f.hex("iova").ok_or(())?;
            ev.phys = f.hex("paddr").unwrap_or(0);
            ev.size = f.dec("size").ok_or(())?;
            rec(ev, UNATTRIBUTED)
        }
        "unmap" | "iommu_unmap" => {
            ev.kind = kind::IOMMU_UNMAP;
            ev.flags |= flags::NO_DEVICE;
            ev.addr = f.hex("iova").ok_or(())?;
            ev.size = f.dec("size").ok_or(())?;
            ev.aux = f.dec("unmapped_size").unwrap_or(ev.size);
            rec(ev, UNATTRIBUTED)
        }
        // `IOMMU:DRIVER DEVICE iova=0x... flags=0x...`
        "io_page_fault" => {
            ev.kind = kind::IO_PAGE_FAULT;
            ev.addr = f.hex("iova").ok_or(())?;
            ev.aux = f.hex("flags").unwrap_or(0);
            rec(ev, f.fault_device().ok_or(())?)
        }
        // `IOMMU: groupID=N device=NAME`
        "add_device_to_group" | "remove_device_from_group" => {
            ev.kind = if name.starts_with("add") {
                kind::GROUP_ADD_DEVICE
            } else {
                kind::GROUP_REMOVE_DEVICE
            };
            ev.aux = f.dec("groupID").ok_or(())?;
            rec(ev, f.get("device").ok_or(())?)
        }
        "swiotlb_bounced" => {
            ev.kind = kind::SWIOTLB_BOUNCED;
            ev.addr = f.hex("dev_addr").ok_or(())?;
            ev.size = f.dec("size").ok_or(())?;
            rec(ev, dev(&f)?)
        }
        _ => Ok(None),
    }
}

/// dma_map_resource, or 6.18's dma_map_phys of MMIO (DMA_ATTR_MMIO).
fn resource(name: &str, f: &Fields<'_>) -> u16 {
    if name.ends_with("resource") || f.mmio() {
        flags::RESOURCE
    } else {
        0
    }
}

fn sg_event(ev: Event, nents: u64, ents: u64) -> SgEvent {
    SgEvent {
        event: ev,
        nents: u32::try_from(nents).unwrap_or(u32::MAX),
        ents: u32::try_from(ents).unwrap_or(u32::MAX),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str, body: &str) -> (Record, String) {
        match parse(name, body, Event::default()) {
            Ok(Some(Parsed::Record { record, device })) => (record, device.to_owned()),
            _ => panic!("{name}: {body}"),
        }
    }

    #[test]
    fn page_maps_of_6_12_and_6_18() {
        let (r, d) = record(
            "dma_map_phys",
            "0000:00:06.0 dir=BIDIRECTIONAL dma_addr=10b000000 size=4096 phys_addr=10b000000 attrs=",
        );
        let e = r.event();
        assert_eq!(d, "0000:00:06.0");
        assert_eq!(
            (e.kind, e.addr, e.phys, e.size, e.dir),
            (kind::DMA_MAP, 0x10b000000, 0x10b000000, 4096, 0)
        );
        let (r, _) = record(
            "dma_unmap_page",
            "0000:00:04.0 dir=FROM_DEVICE dma_addr=fffff000 size=512 attrs=SKIP_CPU_SYNC",
        );
        assert_eq!(
            (r.event().kind, r.event().addr, r.event().dir),
            (kind::DMA_UNMAP, 0xfffff000, 2)
        );
        let (r, _) = record(
            "dma_map_phys",
            "0000:00:04.0 dir=TO_DEVICE dma_addr=ffffffffffffffff size=8 phys_addr=1000 attrs=MMIO",
        );
        assert_eq!(r.event().kind, kind::DMA_MAP_ERR);
        assert_eq!(r.event().flags, flags::RESOURCE);
        assert!(parse(
            "dma_map_phys",
            "0000:00:04.0 dir=TO_DEVICE size=8",
            Event::default()
        )
        .is_err());
    }

    #[test]
    fn scatterlists_whole_and_cut() {
        let (r, _) = record(
            "dma_map_sg",
            "0000:00:06.0 dir=BIDIRECTIONAL nents=2/2 ents=2/2 dma_addrs={0x2a0a00000,0x2a4800000} sizes={0x200000,0x241000} phys_addrs={0x2a0a00000,0x2a4800000} attrs=",
        );
        let Record::Sg(sg) = r else { panic!() };
        assert_eq!((sg.nents, sg.ents, sg.n_lens), (2, 2, 2));
        assert_eq!(sg.event.size, 0x200000 + 0x241000);
        assert_eq!(sg.event.addr, 0x2a0a00000);
        assert_eq!(sg.event.flags & flags::SG_TRUNCATED, 0);
        // 7.x: the list capped at 128 entries and said so.
        let (r, _) = record(
            "dma_map_sg",
            "0000:00:06.0 dir=TO_DEVICE nents=128/262 ents=128/200 [TRUNCATED] dma_addrs={0x1000} sizes={0x1000} phys_addrs={0x1000} attrs=",
        );
        let Record::Sg(sg) = r else { panic!() };
        assert_eq!((sg.nents, sg.ents), (262, 200));
        assert_eq!(sg.event.flags & flags::SG_TRUNCATED, flags::SG_TRUNCATED);
        // 6.12: no counts; a line cut by the kernel's print buffer.
        let (r, _) = record(
            "dma_map_sg",
            "0000:00:04.0 dir=FROM_DEVICE dma_addrs={0x1000,0x3000} sizes={0x1000,0x10",
        );
        let Record::Sg(sg) = r else { panic!() };
        assert_eq!(sg.event.flags & flags::SG_TRUNCATED, flags::SG_TRUNCATED);
        assert_eq!(sg.ents, 2);
        match parse(
            "dma_unmap_sg",
            "0000:00:07.0 dir=BIDIRECTIONAL phys_addrs={0x2baf43000,0x2bb418000} attrs=",
            Event::default(),
        ) {
            Ok(Some(Parsed::UnmapSg {
                event,
                first_phys,
                phys_whole,
                device,
            })) => {
                assert_eq!(
                    (first_phys, phys_whole, event.nents),
                    (0x2baf43000, true, 2)
                );
                assert_eq!(device, "0000:00:07.0");
            }
            _ => panic!("unmap_sg"),
        }
    }

    #[test]
    fn iommu_swiotlb_and_others() {
        let (r, d) = record(
            "map",
            "IOMMU: iova=0x0000000000001000 - 0x0000000000003000 paddr=0x0000000123456000 size=8192",
        );
        assert_eq!(d, UNATTRIBUTED);
        assert_eq!(
            (r.event().kind, r.event().addr, r.event().size),
            (kind::IOMMU_MAP, 0x1000, 8192)
        );
        let (r, _) = record(
            "unmap",
            "IOMMU: iova=0x0000000000001000 - 0x0000000000003000 size=8192 unmapped_size=4096",
        );
        assert_eq!((r.event().kind, r.event().aux), (kind::IOMMU_UNMAP, 4096));
        let (r, d) = record(
            "io_page_fault",
            "IOMMU:nvidia 0000:00:06.0 iova=0x0000000000123000 flags=0x0002",
        );
        assert_eq!(d, "0000:00:06.0");
        assert_eq!(
            (r.event().kind, r.event().addr, r.event().aux),
            (kind::IO_PAGE_FAULT, 0x123000, 2)
        );
        let (r, d) = record(
            "swiotlb_bounced",
            "dev_name: 0000:00:04.0 dma_mask=ffffffff dev_addr=7f000000 size=4096 NORMAL",
        );
        assert_eq!(d, "0000:00:04.0");
        assert_eq!(
            (r.event().kind, r.event().addr),
            (kind::SWIOTLB_BOUNCED, 0x7f000000)
        );
        // 7.x's coherent family (include/trace/events/dma.h).
        let (r, _) = record(
            "dma_alloc_pages",
            "0000:00:04.0 dir=BIDIRECTIONAL dma_addr=fee00000 size=8192 virt_addr=00000000a1b2c3d4 flags=GFP_KERNEL attrs=",
        );
        assert_eq!((r.event().kind, r.event().size), (kind::DMA_ALLOC, 8192));
        let (r, _) = record(
            "dma_alloc_sgt_err",
            "0000:00:04.0 dir=FROM_DEVICE dma_addr=0 size=65536 virt_addr=0000000000000000 flags=GFP_KERNEL attrs=",
        );
        assert_eq!(
            (r.event().kind, r.event().flags),
            (kind::DMA_MAP_ERR, flags::COHERENT | flags::NONCONTIG)
        );
        let (r, _) = record(
            "dma_free_sgt",
            "0000:00:04.0 dir=FROM_DEVICE dma_addr=fee00000 size=65536 phys_addrs={0x1000,0x5000}",
        );
        assert_eq!(r.event().kind, kind::DMA_FREE);
        let (r, _) = record(
            "dma_map_sg_err",
            "0000:00:04.0 dir=TO_DEVICE dma_addrs={0x1000,0x2000,0x3000} err=-12 attrs=",
        );
        assert_eq!((r.event().kind, r.event().size), (kind::DMA_MAP_SG_ERR, 3));
        assert_eq!(r.event().aux as u32 as i32, -12);
        let (r, d) = record(
            "add_device_to_group",
            "IOMMU: groupID=7 device=0000:00:04.0",
        );
        assert_eq!(
            (r.event().kind, r.event().aux, d.as_str()),
            (kind::GROUP_ADD_DEVICE, 7, "0000:00:04.0")
        );
        assert!(matches!(
            parse("sched_switch", "prev_comm=a", Event::default()),
            Ok(None)
        ));
    }
}
