//! `export --redact`: physical addresses as per-file pseudonyms, and DMA
//! addresses too where the recording's host had no IOMMU for the device
//! (there the DMA address is the physical address).

use std::collections::HashMap;

use gpudirect_trace_common::kind;

use super::hex;
use crate::{
    memory_budget::{self, Keeper},
    tracefile::{self, Header},
};

/// Distinct physical addresses given their own pseudonym (~48 MiB; the
/// reader's memory budget may stop it sooner).
pub const MAX_PSEUDONYMS: usize = 1 << 20;
/// What one pseudonym costs the reader's memory budget.
const PSEUDONYM_BYTES: usize = 48;

/// Stable per-file pseudonyms for physical addresses.
#[derive(Default)]
pub struct Redactor {
    pub(super) on: bool,
    ids: HashMap<u64, u64>,
    /// Devices whose DMA addresses are physical addresses (no IOMMU, or an
    /// identity domain): their `addr` is a pseudonym too.
    physical_dma: std::collections::HashSet<String>,
    /// Where the header lists no devices: no device is known to have an
    /// IOMMU or not.
    unknown_iommu: bool,
    /// Events whose `addr` was pseudonymized for that reason.
    pub addr_redacted: u64,
}

impl Redactor {
    pub fn new(on: bool) -> Self {
        Self {
            on,
            ..Self::default()
        }
    }

    /// A redactor for a recording: which devices' DMA addresses are
    /// physical comes from its header's PCI inventory (a device without an
    /// IOMMU group, or whose group's domain is `identity`; any device the
    /// inventory does not list, where none has a group: a host without an
    /// IOMMU).
    pub fn for_header(on: bool, h: &Header) -> Self {
        let mut r = Self::new(on);
        if !on {
            return r;
        }
        let no_iommu = |d: &tracefile::PciDevice| {
            d.iommu_group.is_none() || d.iommu_type.as_deref() == Some("identity")
        };
        r.physical_dma = h
            .devices
            .iter()
            .filter(|d| no_iommu(d))
            .map(|d| d.bus_id.clone())
            .collect();
        if !h.devices.is_empty() && h.devices.iter().all(no_iommu) {
            // No IOMMU on the host: every device's, named or not.
            r.physical_dma.insert(String::new());
        }
        r.unknown_iommu = h.devices.is_empty();
        r
    }

    fn dma_is_physical(&self, device: &str) -> bool {
        self.physical_dma.contains(device) || self.physical_dma.contains("")
    }

    pub fn phys(&mut self, v: u64) -> String {
        if !self.on || v == 0 {
            return format!("{v:#x}");
        }
        if let Some(id) = self.ids.get(&v) {
            return format!("p{id}");
        }
        // Bounded (a crafted file may hold any number of distinct addresses):
        // past the limit new ones share one pseudonym, never their value.
        if self.ids.len() >= MAX_PSEUDONYMS
            || !memory_budget::take_or_drop(Keeper::Pseudonyms, PSEUDONYM_BYTES)
        {
            return "p-more".to_owned();
        }
        let next = self.ids.len() as u64 + 1;
        self.ids.insert(v, next);
        format!("p{next}")
    }

    /// An event's DMA address: itself, or its pseudonym where it is a
    /// physical address (IOMMU-level events carry IOVAs: an IOMMU exists).
    pub(super) fn addr(&mut self, device: &str, k: u16, v: u64) -> String {
        let iommu_level = matches!(k, kind::IOMMU_MAP | kind::IOMMU_UNMAP);
        if !self.on || v == 0 || iommu_level || !self.dma_is_physical(device) {
            return hex(v);
        }
        self.addr_redacted += 1;
        self.phys(v)
    }

    /// What `--redact` did about DMA addresses, for stderr.
    pub fn note(&self) -> Option<String> {
        if !self.on {
            return None;
        }
        if self.addr_redacted > 0 {
            return Some(format!(
                "--redact: the recording's host had no IOMMU for some devices (or an identity \
                 domain): their DMA addresses are physical addresses, so `addr` was \
                 pseudonymized too ({} events)",
                self.addr_redacted
            ));
        }
        self.unknown_iommu.then(|| {
            "--redact: the recording names no PCI devices, so whether its DMA addresses are \
             physical (a host without an IOMMU) is unknown: `addr` was kept as recorded"
                .to_owned()
        })
    }
}
