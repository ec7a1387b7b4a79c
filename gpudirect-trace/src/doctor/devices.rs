//! PCI device inventory from `/sys/bus/pci/devices`: class, place in the bridge
//! hierarchy, NUMA node, MSI vectors, config space, BARs.

use serde::Serialize;

use super::{
    pci::{parse_resources, Resource},
    tree::Tree,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Class 0x03xx (0x0300 VGA, 0x0302 3D controller).
    Gpu,
    /// Class 0x02xx (0x0200 Ethernet, 0x0207 InfiniBand).
    Nic,
    /// Class 0x0604 PCI-to-PCI bridge (root ports and switch ports).
    Bridge,
    Other,
}

#[derive(Debug, Clone)]
pub struct Device {
    pub bdf: String,
    pub class: u32,
    pub vendor: u16,
    pub device: u16,
    pub kind: Kind,
    /// Real sysfs path, e.g. `/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0`;
    /// `None` when neither a link nor `pci-device-paths.txt` says where it is.
    pub sys_path: Option<String>,
    /// Host bridge (`pci0000:00`) from the sysfs path.
    pub host_bridge: Option<String>,
    /// Bridges above the device, root port first.
    pub upstream: Vec<String>,
    pub numa_node: Option<i32>,
    pub local_cpus: Option<String>,
    pub msi_irqs: Option<Vec<u32>>,
    pub config: Option<Vec<u8>>,
    pub config_err: Option<String>,
    pub resources: Option<Vec<Resource>>,
    pub driver: Option<String>,
    pub iommu_group: Option<String>,
}

impl Device {
    pub fn dir(&self) -> String {
        format!("/sys/bus/pci/devices/{}", self.bdf)
    }

    /// `GPU 0000:00:06.0 (10de:2335)`.
    pub fn label(&self) -> String {
        let k = match self.kind {
            Kind::Gpu => "GPU",
            Kind::Nic => "NIC",
            Kind::Bridge => "bridge",
            Kind::Other => "device",
        };
        format!("{k} {} ({:04x}:{:04x})", self.bdf, self.vendor, self.device)
    }

    pub fn is_endpoint_of_interest(&self) -> bool {
        matches!(self.kind, Kind::Gpu | Kind::Nic)
    }
}

pub fn kind_of(class: u32) -> Kind {
    match (class >> 16, (class >> 8) & 0xff) {
        (0x03, _) => Kind::Gpu,
        (0x02, _) => Kind::Nic,
        (0x06, 0x04) => Kind::Bridge,
        _ => Kind::Other,
    }
}

fn hex_u32(s: &str) -> Option<u32> {
    u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

/// BDFs listed under `/sys/bus/pci/devices` (real links, directories or
/// `BDF.link` files).
pub fn list_bdfs(tree: &Tree) -> std::io::Result<Vec<String>> {
    let mut v: Vec<String> = tree
        .list("/sys/bus/pci/devices")?
        .into_iter()
        .map(|n| n.trim_end_matches(".link").to_string())
        .collect();
    v.sort();
    v.dedup();
    Ok(v)
}

pub fn read_device(tree: &Tree, bdf: &str) -> Device {
    let dir = format!("/sys/bus/pci/devices/{bdf}");
    let rd = |f: &str| tree.read(&format!("{dir}/{f}")).ok();
    let class = rd("class").and_then(|s| hex_u32(&s)).unwrap_or(0);
    let sys_path = tree.pci_device_path(bdf);
    let (host_bridge, upstream) = match &sys_path {
        Some(p) => split_path(p, bdf),
        None => (None, Vec::new()),
    };
    let (config, config_err) = match tree.read_bytes(&format!("{dir}/config")) {
        Ok(b) => (Some(b), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let msi_irqs = tree.list(&format!("{dir}/msi_irqs")).ok().map(|v| {
        let mut irqs: Vec<u32> = v.iter().filter_map(|s| s.parse().ok()).collect();
        irqs.sort_unstable();
        irqs
    });
    let last = |p: String| p.rsplit('/').next().map(String::from);
    Device {
        bdf: bdf.to_string(),
        class,
        vendor: rd("vendor").and_then(|s| hex_u32(&s)).unwrap_or(0) as u16,
        device: rd("device").and_then(|s| hex_u32(&s)).unwrap_or(0) as u16,
        kind: kind_of(class),
        sys_path,
        host_bridge,
        upstream,
        numa_node: rd("numa_node").and_then(|s| s.parse().ok()),
        local_cpus: rd("local_cpulist"),
        msi_irqs,
        config,
        config_err,
        resources: rd("resource").map(|s| parse_resources(&s)),
        driver: tree.link(&format!("{dir}/driver")).and_then(last),
        iommu_group: tree.link(&format!("{dir}/iommu_group")).and_then(last),
    }
}

/// `/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0` ->
/// (`pci0000:00`, [`0000:00:01.0`]).
pub fn split_path(path: &str, bdf: &str) -> (Option<String>, Vec<String>) {
    let rest = path.trim_start_matches("/sys/devices/");
    let mut parts = rest.split('/').filter(|p| !p.is_empty());
    let host = parts
        .next()
        .filter(|h| h.starts_with("pci"))
        .map(String::from);
    let upstream = parts
        .filter(|p| *p != bdf && looks_like_bdf(p))
        .map(String::from)
        .collect();
    (host, upstream)
}

fn looks_like_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.'
}

pub fn read_all(tree: &Tree) -> std::io::Result<Vec<Device>> {
    Ok(list_bdfs(tree)?
        .iter()
        .map(|b| read_device(tree, b))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_codes() {
        assert_eq!(kind_of(0x030200), Kind::Gpu);
        assert_eq!(kind_of(0x030000), Kind::Gpu);
        assert_eq!(kind_of(0x020700), Kind::Nic);
        assert_eq!(kind_of(0x020000), Kind::Nic);
        assert_eq!(kind_of(0x060400), Kind::Bridge);
        assert_eq!(kind_of(0x060000), Kind::Other);
        assert_eq!(kind_of(0x018000), Kind::Other);
    }

    #[test]
    fn sysfs_path_gives_bridge_chain() {
        let (h, up) = split_path(
            "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0",
            "0000:03:00.0",
        );
        assert_eq!(h.as_deref(), Some("pci0000:00"));
        assert_eq!(up, ["0000:00:01.0", "0000:01:00.0", "0000:02:08.0"]);
        let (h, up) = split_path("/sys/devices/pci0000:00/0000:00:06.0", "0000:00:06.0");
        assert_eq!(h.as_deref(), Some("pci0000:00"));
        assert!(up.is_empty());
    }
}
