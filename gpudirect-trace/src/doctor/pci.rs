//! PCI configuration space decoding (the bytes of `/sys/bus/pci/devices/BDF/config`)
//! and of the sysfs `resource` file. Offsets and bit layouts follow the PCI Express
//! Base Specification (the same fields `lspci -vvv` prints).

use serde::Serialize;

/// Capability IDs (standard list, from offset 0x34).
pub const CAP_PCIE: u8 = 0x10;
/// Extended capability IDs (list from offset 0x100).
pub const EXT_AER: u16 = 0x0001;
pub const EXT_ACS: u16 = 0x000d;
pub const EXT_ARI: u16 = 0x000e;
pub const EXT_ATS: u16 = 0x000f;
pub const EXT_REBAR: u16 = 0x0015;

/// A device's config space as read (64, 256 or 4096 bytes depending on the
/// device and on privileges).
#[derive(Debug, Clone)]
pub struct Config<'a> {
    b: &'a [u8],
}

impl<'a> Config<'a> {
    pub fn new(b: &'a [u8]) -> Self {
        Self { b }
    }

    pub fn len(&self) -> usize {
        self.b.len()
    }

    pub fn is_empty(&self) -> bool {
        self.b.is_empty()
    }

    pub fn u8(&self, off: usize) -> Option<u8> {
        self.b.get(off).copied()
    }

    pub fn u16(&self, off: usize) -> Option<u16> {
        Some(u16::from_le_bytes([self.u8(off)?, self.u8(off + 1)?]))
    }

    pub fn u32(&self, off: usize) -> Option<u32> {
        Some(u32::from_le_bytes(
            self.b.get(off..off + 4)?.try_into().ok()?,
        ))
    }

    /// Offset of a standard capability (walks the list from 0x34; needs the
    /// Capabilities List bit in the Status register).
    pub fn find_cap(&self, id: u8) -> Option<usize> {
        if self.u16(0x06)? & 0x10 == 0 {
            return None;
        }
        let mut off = usize::from(self.u8(0x34)? & 0xfc);
        for _ in 0..48 {
            if off < 0x40 {
                return None;
            }
            if self.u8(off)? == id {
                return Some(off);
            }
            off = usize::from(self.u8(off + 1)? & 0xfc);
        }
        None
    }

    /// Whether the extended space (0x100..0x1000) was readable at all.
    pub fn has_extended(&self) -> bool {
        self.b.len() >= 0x1000
    }

    /// Offset of an extended capability. Entries with ID 0 (hidden by a
    /// hypervisor) are skipped but their next pointer is followed, as Linux does.
    pub fn find_ext_cap(&self, id: u16) -> Option<usize> {
        let mut off = 0x100usize;
        for _ in 0..((0x1000 - 0x100) / 8) {
            let hdr = self.u32(off)?;
            if hdr == 0 || hdr == 0xffff_ffff {
                return None;
            }
            if (hdr & 0xffff) as u16 == id {
                return Some(off);
            }
            off = ((hdr >> 20) & 0xffc) as usize;
            if off < 0x100 {
                return None;
            }
        }
        None
    }

    pub fn pcie(&self) -> Option<PcieCap> {
        let o = self.find_cap(CAP_PCIE)?;
        let caps = self.u16(o + 2)?;
        let devcap = self.u32(o + 4)?;
        let devctl = self.u16(o + 8)?;
        let lnkcap = self.u32(o + 0x0c)?;
        let lnksta = self.u16(o + 0x12)?;
        Some(PcieCap {
            offset: o,
            port_type: ((caps >> 4) & 0xf) as u8,
            mps_supported: 128 << (devcap & 0x7),
            devctl,
            mps: 128 << ((devctl >> 5) & 0x7),
            mrrs: 128 << ((devctl >> 12) & 0x7),
            relaxed_ordering: devctl & (1 << 4) != 0,
            no_snoop: devctl & (1 << 11) != 0,
            link_cap_speed: (lnkcap & 0xf) as u8,
            link_cap_width: ((lnkcap >> 4) & 0x3f) as u8,
            link_speed: (lnksta & 0xf) as u8,
            link_width: ((lnksta >> 4) & 0x3f) as u8,
        })
    }

    /// ACS capability and control registers.
    pub fn acs(&self) -> Option<Acs> {
        let o = self.find_ext_cap(EXT_ACS)?;
        Some(Acs {
            offset: o,
            cap: self.u16(o + 4)?,
            ctl: self.u16(o + 6)?,
        })
    }

    /// AER uncorrectable and correctable status registers.
    pub fn aer(&self) -> Option<Aer> {
        let o = self.find_ext_cap(EXT_AER)?;
        Some(Aer {
            offset: o,
            uncorrectable: self.u32(o + 4)?,
            uncorrectable_mask: self.u32(o + 8)?,
            correctable: self.u32(o + 0x10)?,
        })
    }

    /// ATS present, and its Enable bit (control register bit 15).
    pub fn ats_enabled(&self) -> Option<bool> {
        let o = self.find_ext_cap(EXT_ATS)?;
        Some(self.u16(o + 6)? & 0x8000 != 0)
    }

    /// Resizable BAR entries: (BAR index, current size, largest supported size).
    pub fn rebar(&self) -> Vec<RebarEntry> {
        let Some(o) = self.find_ext_cap(EXT_REBAR) else {
            return Vec::new();
        };
        let n = self
            .u32(o + 8)
            .map(|c| ((c >> 5) & 0x7) as usize)
            .unwrap_or(0);
        (0..n.clamp(1, 6))
            .filter_map(|i| {
                let cap = self.u32(o + 4 + i * 8)?;
                let ctl = self.u32(o + 8 + i * 8)?;
                let supported = cap >> 4;
                let max_bit = 31 - supported.leading_zeros();
                Some(RebarEntry {
                    bar: (ctl & 0x7) as u8,
                    current: 1u64 << (20 + ((ctl >> 8) & 0x3f)),
                    max_supported: (supported != 0).then(|| 1u64 << (20 + max_bit)),
                })
            })
            .collect()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PcieCap {
    pub offset: usize,
    /// 0 endpoint, 1 legacy endpoint, 4 root port, 5 switch upstream, 6 switch
    /// downstream, 9 RC integrated endpoint.
    pub port_type: u8,
    pub mps_supported: u32,
    pub devctl: u16,
    pub mps: u32,
    pub mrrs: u32,
    pub relaxed_ordering: bool,
    pub no_snoop: bool,
    pub link_cap_speed: u8,
    pub link_cap_width: u8,
    pub link_speed: u8,
    pub link_width: u8,
}

/// Link speed code (Link Capabilities/Status) -> GT/s.
pub fn speed_gts(code: u8) -> Option<f64> {
    Some(match code {
        1 => 2.5,
        2 => 5.0,
        3 => 8.0,
        4 => 16.0,
        5 => 32.0,
        6 => 64.0,
        _ => return None,
    })
}

/// Parse a sysfs link speed (`32.0 GT/s PCIe`, older kernels `8 GT/s`).
pub fn parse_sysfs_speed(s: &str) -> Option<f64> {
    s.split_whitespace().next()?.parse().ok()
}

pub fn port_type_name(t: u8) -> &'static str {
    match t {
        0 => "endpoint",
        1 => "legacy endpoint",
        4 => "root port",
        5 => "switch upstream port",
        6 => "switch downstream port",
        7 => "PCIe-to-PCI bridge",
        8 => "PCI-to-PCIe bridge",
        9 => "RC integrated endpoint",
        10 => "RC event collector",
        _ => "unknown port type",
    }
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Acs {
    pub offset: usize,
    pub cap: u16,
    pub ctl: u16,
}

pub const ACS_BITS: [(u16, &str); 7] = [
    (1 << 0, "SrcValid"),
    (1 << 1, "TransBlk"),
    (1 << 2, "ReqRedir"),
    (1 << 3, "CmpltRedir"),
    (1 << 4, "UpstreamFwd"),
    (1 << 5, "EgressCtrl"),
    (1 << 6, "DirectTrans"),
];

impl Acs {
    /// `lspci`-style rendering of the control register.
    pub fn describe_ctl(&self) -> String {
        ACS_BITS
            .iter()
            .map(|(bit, name)| format!("{name}{}", if self.ctl & bit != 0 { '+' } else { '-' }))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Controls that send peer-to-peer requests/completions up to the root
    /// complex instead of straight across the switch (Request/Completion
    /// Redirect, Egress Control).
    pub fn redirects_p2p(&self) -> bool {
        self.ctl & ((1 << 2) | (1 << 3) | (1 << 5)) != 0
    }
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Aer {
    pub offset: usize,
    pub uncorrectable: u32,
    pub uncorrectable_mask: u32,
    pub correctable: u32,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct RebarEntry {
    pub bar: u8,
    pub current: u64,
    pub max_supported: Option<u64>,
}

/// One line of the sysfs `resource` file.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Resource {
    pub index: usize,
    pub start: u64,
    pub end: u64,
    pub flags: u64,
}

pub const IORESOURCE_IO: u64 = 0x100;
pub const IORESOURCE_MEM: u64 = 0x200;
pub const IORESOURCE_PREFETCH: u64 = 0x2000;
pub const IORESOURCE_MEM_64: u64 = 0x0010_0000;

impl Resource {
    pub fn size(&self) -> u64 {
        if self.end == 0 && self.start == 0 {
            0
        } else {
            self.end.wrapping_sub(self.start).wrapping_add(1)
        }
    }

    pub fn is_mem(&self) -> bool {
        self.flags & IORESOURCE_MEM != 0
    }
}

/// Parse a sysfs `resource` file; lines 0..=5 are the BARs by register index,
/// line 6 the expansion ROM. Malformed lines are skipped.
pub fn parse_resources(text: &str) -> Vec<Resource> {
    text.lines()
        .enumerate()
        .filter_map(|(index, line)| {
            let mut it = line
                .split_whitespace()
                .map(|t| u64::from_str_radix(t.trim_start_matches("0x"), 16));
            Some(Resource {
                index,
                start: it.next()?.ok()?,
                end: it.next()?.ok()?,
                flags: it.next()?.ok()?,
            })
        })
        .collect()
}

/// `16 MiB`, `256 GiB`.
pub fn human_size(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n;
    let mut u = 0;
    while v >= 1024 && v % 1024 == 0 && u < UNITS.len() - 1 {
        v /= 1024;
        u += 1;
    }
    format!("{v} {}", UNITS[u])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::testutil::config_with;

    #[test]
    fn devctl_decodes_mps_mrrs_ro() {
        // 0x5134: MRRS code 5 (4096), MPS code 1 (256), RO on, no-snoop off.
        let c = config_with(0x5134, 0x0045_7905, 0x1105, &[]);
        let p = Config::new(&c).pcie().expect("pcie cap");
        assert_eq!(
            (p.mps, p.mrrs, p.relaxed_ordering, p.no_snoop),
            (256, 4096, true, false)
        );
        assert_eq!((p.link_cap_speed, p.link_cap_width), (5, 16));
        assert_eq!((p.link_speed, p.link_width), (5, 16));
        // 0x2810: MRRS code 2 (512), MPS 128, RO on, no-snoop on.
        let c = config_with(0x2810, 0x0045_7905, 0x1083, &[]);
        let p = Config::new(&c).pcie().expect("pcie cap");
        assert_eq!((p.mps, p.mrrs, p.no_snoop), (128, 512, true));
        assert_eq!((p.link_speed, p.link_width), (3, 8));
    }

    #[test]
    fn ext_caps_found_past_hidden_entries() {
        // ACS control 0x001d = SrcValid ReqRedir CmpltRedir UpstreamFwd.
        let c = config_with(0, 0, 0, &[(0, &[]), (EXT_ACS, &[0x7f, 0, 0x1d, 0])]);
        let acs = Config::new(&c).acs().expect("acs");
        assert_eq!(acs.ctl, 0x1d);
        assert!(acs.redirects_p2p());
        assert_eq!(
            acs.describe_ctl(),
            "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
        );
        assert!(Config::new(&c).find_ext_cap(EXT_ARI).is_none());
    }

    #[test]
    fn rebar_current_and_max() {
        // BAR 1, 1 resizable BAR, current size code 8 (256 MiB), supports up to 64 GiB (bit 16).
        let cap: u32 = ((1 << 17) - 1) << 4;
        let ctl: u32 = 1 | (1 << 5) | (8 << 8);
        let mut body = cap.to_le_bytes().to_vec();
        body.extend_from_slice(&ctl.to_le_bytes());
        let c = config_with(0, 0, 0, &[(EXT_REBAR, &body)]);
        let r = Config::new(&c).rebar();
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].bar, r[0].current), (1, 256 << 20));
        assert_eq!(r[0].max_supported, Some(64 << 30));
    }

    #[test]
    fn resources_sizes() {
        let r = parse_resources(
            "0x0000104002000000 0x0000104002ffffff 0x000000000014220c\n\
             0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
             0x0000100000000000 0x0000103fffffffff 0x000000000014220c\n",
        );
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].size(), 16 << 20);
        assert_eq!(r[1].size(), 0);
        assert_eq!(r[2].size(), 256 << 30);
        assert!(r[2].is_mem() && r[2].flags & IORESOURCE_MEM_64 != 0);
        assert_eq!(human_size(256 << 30), "256 GiB");
    }

    #[test]
    fn short_config_has_no_caps_and_no_panic() {
        let c = [0u8; 64];
        let cfg = Config::new(&c);
        assert!(cfg.pcie().is_none() && cfg.acs().is_none() && cfg.rebar().is_empty());
        assert!(Config::new(&[]).pcie().is_none());
    }
}
