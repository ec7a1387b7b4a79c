//! Who a GPU is, in the words its users know: index (`nvidia-smi`'s GPU0,
//! GPU1, ...), UUID (`CUDA_VISIBLE_DEVICES=GPU-...`), product name, and the PCI
//! bus id the kernel (and so the DMA view) uses.
//!
//! Read without NVML from the driver's `/proc/driver/nvidia/gpus/<bdf>/information`
//! (model, UUID, bus location, device minor; the real 2x H200 snapshot in
//! shared/fixtures/gpu-host-h200x2 is the reference), and from sysfs for NVIDIA
//! GPUs the driver does not list (not loaded, or GPU excluded).
//!
//! **Index order.** NVML numbers GPUs in its own enumeration order, which NVIDIA
//! documents as not guaranteed across reboots; in practice it is PCI bus order, and
//! it is the index `nvidia-smi` prints. Without NVML the index is the position in
//! bus-id order among the GPUs the driver manages (excluded GPUs get none), which
//! is what NVML would give. CUDA's own device numbers differ: by default
//! (`CUDA_DEVICE_ORDER=FASTEST_FIRST`) CUDA puts the fastest GPU first, so on a host
//! with mixed GPUs cuda:0 need not be GPU0; `CUDA_DEVICE_ORDER=PCI_BUS_ID` makes
//! CUDA follow bus order (= these indices), and `CUDA_VISIBLE_DEVICES` renumbers
//! from 0 inside the process. UUIDs are the one name every tool agrees on.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{faults::normalize_bdf, hosttree::Tree};

/// Where a GPU's index came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexSource {
    /// `nvmlDeviceGetIndex`: the number nvidia-smi prints.
    Nvml,
    /// Position in bus-id order among the driver's GPUs (NVML unavailable).
    PciOrder,
}

/// One GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuIdentity {
    /// GPU0, GPU1, ...; `None` for a GPU the driver does not manage (excluded, or
    /// the driver is not loaded).
    pub index: Option<u32>,
    pub index_source: IndexSource,
    /// `GPU-acbd8c60-66a2-c5f7-967a-de51ca969cb3`; `None` when unknown.
    pub uuid: Option<String>,
    /// `ssss:bb:dd.f`, lower case: the kernel's `dev_name()` for the GPU.
    pub bus_id: String,
    /// `NVIDIA H200`.
    pub name: String,
    /// N of /dev/nvidiaN.
    pub minor: Option<u32>,
}

impl GpuIdentity {
    /// `GPU0` (or `GPU?` when it has no index).
    pub fn short(&self) -> String {
        match self.index {
            Some(i) => format!("GPU{i}"),
            None => "GPU?".to_owned(),
        }
    }
}

/// `GPU0 NVIDIA H200 (GPU-acbd8c60..., 0000:00:06.0)`; the alternate form
/// (`{:#}`) prints the whole UUID.
impl fmt::Display for GpuIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} (", self.short(), self.name)?;
        if let Some(u) = &self.uuid {
            // "GPU-" and the first 8 hex digits identify a GPU on any host seen
            // so far and keep table lines short.
            match u.get(..12) {
                Some(head) if !f.alternate() && u.len() > 12 => write!(f, "{head}..., ")?,
                _ => write!(f, "{u}, ")?,
            }
        }
        write!(f, "{})", self.bus_id)
    }
}

/// Fields of one `/proc/driver/nvidia/gpus/<bdf>/information` file.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DriverInfo {
    pub model: Option<String>,
    pub uuid: Option<String>,
    pub bus_location: Option<String>,
    pub minor: Option<u32>,
    pub excluded: bool,
}

/// Parse the driver's `information` file (`Key: \t value` lines).
pub fn parse_information(text: &str) -> DriverInfo {
    let mut info = DriverInfo::default();
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim();
        match k.trim() {
            "Model" => info.model = Some(v.to_owned()),
            // Before the GPU is first initialised the driver prints
            // `GPU-????????-????-...`: no UUID known yet.
            "GPU UUID" if !v.contains('?') && !v.is_empty() => info.uuid = Some(v.to_owned()),
            "Bus Location" => info.bus_location = normalize_bdf(v),
            "Device Minor" => info.minor = v.parse().ok(),
            "GPU Excluded" => info.excluded = v.eq_ignore_ascii_case("yes"),
            _ => {}
        }
    }
    info
}

fn hex(s: &str) -> Option<u32> {
    u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

/// Every NVIDIA GPU of `tree` (live host or capture), without NVML: the driver's
/// /proc files first, then sysfs for NVIDIA display-class devices it does not
/// list. Sorted by bus id; indices as NVML would number them.
pub fn from_tree(tree: &Tree) -> Vec<GpuIdentity> {
    let mut gpus: Vec<(GpuIdentity, bool)> = Vec::new();
    for dir in tree.list("/proc/driver/nvidia/gpus").unwrap_or_default() {
        let path = format!("/proc/driver/nvidia/gpus/{dir}/information");
        let Ok(text) = tree.read(&path) else {
            continue;
        };
        let info = parse_information(&text);
        let Some(bus_id) = info.bus_location.clone().or_else(|| normalize_bdf(&dir)) else {
            continue;
        };
        gpus.push((
            GpuIdentity {
                index: None,
                index_source: IndexSource::PciOrder,
                uuid: info.uuid,
                bus_id,
                name: info.model.unwrap_or_else(|| "NVIDIA GPU".to_owned()),
                minor: info.minor,
            },
            !info.excluded,
        ));
    }
    for bdf in tree.list("/sys/bus/pci/devices").unwrap_or_default() {
        let bdf = bdf.trim_end_matches(".link").to_owned();
        if gpus.iter().any(|(g, _)| g.bus_id == bdf) {
            continue;
        }
        let d = format!("/sys/bus/pci/devices/{bdf}");
        let vendor = tree.read(&format!("{d}/vendor")).ok().and_then(|s| hex(&s));
        let class = tree.read(&format!("{d}/class")).ok().and_then(|s| hex(&s));
        if vendor != Some(0x10de) || class.map(|c| c >> 16) != Some(0x03) {
            continue;
        }
        let device = tree.read(&format!("{d}/device")).ok().and_then(|s| hex(&s));
        let name = match device {
            Some(id) => format!("NVIDIA GPU [10de:{id:04x}]"),
            None => "NVIDIA GPU".to_owned(),
        };
        gpus.push((
            GpuIdentity {
                index: None,
                index_source: IndexSource::PciOrder,
                uuid: None,
                bus_id: bdf,
                name,
                minor: None,
            },
            false,
        ));
    }
    gpus.sort_by(|a, b| a.0.bus_id.cmp(&b.0.bus_id));
    let mut next = 0;
    gpus.into_iter()
        .map(|(mut g, managed)| {
            if managed {
                g.index = Some(next);
                next += 1;
            }
            g
        })
        .collect()
}

/// Replace identities with the ones NVML gave (same bus id), and add GPUs only
/// NVML knows. NVML's index and name win: they are what nvidia-smi prints.
pub fn merge(mut gpus: Vec<GpuIdentity>, nvml: &[GpuIdentity]) -> Vec<GpuIdentity> {
    for n in nvml {
        match gpus.iter_mut().find(|g| g.bus_id == n.bus_id) {
            Some(g) => {
                let minor = n.minor.or(g.minor);
                let uuid = n.uuid.clone().or_else(|| g.uuid.take());
                *g = GpuIdentity {
                    minor,
                    uuid,
                    ..n.clone()
                };
            }
            None => gpus.push(n.clone()),
        }
    }
    gpus.sort_by(|a, b| a.bus_id.cmp(&b.bus_id));
    gpus
}

/// A `--device` value as a bus id: a GPU index (`0`, `GPU0`), a UUID (whole,
/// or a prefix matching one GPU, with or without `GPU-`), or a bus id in any
/// printed shape (`00:06.0`, `0000:00:06.0`, NVML's `00000000:00:06.0`). A bus
/// id is returned normalised even when it is not a GPU's: `--device` also
/// names NICs and NVMe drives. `place` says where `gpus` are from in the
/// error (`on this host`, `in the recording`).
pub fn resolve_device(spec: &str, gpus: &[GpuIdentity], place: &str) -> anyhow::Result<String> {
    let s = spec.trim();
    let index = s
        .strip_prefix("GPU")
        .or_else(|| s.strip_prefix("gpu"))
        .unwrap_or(s);
    if !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()) {
        let i: u32 = index
            .parse()
            .map_err(|_| anyhow::anyhow!("--device {spec}: GPU index out of range"))?;
        if let Some(g) = gpus.iter().find(|g| g.index == Some(i)) {
            return Ok(g.bus_id.clone());
        }
        // All-digit UUID prefixes exist ("1059d476-..."): try those before
        // giving up on the index.
        if index.len() < 4 || index.len() != s.len() {
            return Err(no_match(spec, "no GPU has that index", gpus, place));
        }
    }
    if let Some(bdf) = normalize_bdf(s) {
        return Ok(bdf);
    }
    let want = s.to_ascii_lowercase();
    let want = want.strip_prefix("gpu-").unwrap_or(&want);
    let is_uuid_text = !want.is_empty() && want.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
    if is_uuid_text {
        let hits: Vec<&GpuIdentity> = gpus
            .iter()
            .filter(|g| {
                g.uuid.as_deref().is_some_and(|u| {
                    let u = u.to_ascii_lowercase();
                    u.strip_prefix("gpu-").unwrap_or(&u).starts_with(want)
                })
            })
            .collect();
        return match hits[..] {
            [g] => Ok(g.bus_id.clone()),
            [] => Err(no_match(
                spec,
                "no GPU's UUID starts with that",
                gpus,
                place,
            )),
            _ => Err(no_match(
                spec,
                &format!(
                    "{} GPUs' UUIDs start with that; give more of it",
                    hits.len()
                ),
                gpus,
                place,
            )),
        };
    }
    Err(no_match(
        spec,
        "not a GPU index (0, GPU0), a UUID (GPU-...) or a PCI bus id (0000:00:06.0)",
        gpus,
        place,
    ))
}

/// What a host calls a `--device` name (`nvme0`, `eth0`, `mlx5_0`, `vda`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostName {
    /// A class device under a PCI function: the tables name that function
    /// (the DMA API maps for the PCI device, never for `nvme0`).
    PciFunction(String),
    /// A device of that name with no PCI function above it (a platform
    /// device's name is what the tables show): kept as it is.
    Device,
    /// Nothing of that name on this host.
    Unknown,
}

/// `name` looked up in a host's sysfs: `/sys/class/*/NAME` links into
/// `/sys/devices/...`, and the last bus id on that path is the PCI function
/// whose DMA the device does (`nvme0n1` -> `.../0000:00:04.0/nvme/nvme0/nvme0n1`).
pub fn host_device_name(tree: &Tree, name: &str) -> HostName {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return HostName::Unknown;
    }
    let mut seen = false;
    for class in tree.list("/sys/class").unwrap_or_default() {
        let Some(target) = tree.resolve_link(&format!("/sys/class/{class}/{name}")) else {
            continue;
        };
        seen = true;
        if let Some(bdf) = crate::model::pci::function_from_devpath(&target) {
            return HostName::PciFunction(bdf.to_owned());
        }
    }
    let on_a_bus = || {
        tree.list("/sys/bus")
            .unwrap_or_default()
            .iter()
            .any(|bus| tree.exists(&format!("/sys/bus/{bus}/devices/{name}")))
    };
    if seen || on_a_bus() {
        HostName::Device
    } else {
        HostName::Unknown
    }
}

fn no_match(spec: &str, why: &str, gpus: &[GpuIdentity], place: &str) -> anyhow::Error {
    let list = if gpus.is_empty() {
        format!("no NVIDIA GPUs {place}")
    } else {
        // A recording's GPU names are the file's: one field each.
        let names: Vec<String> = gpus
            .iter()
            .map(|g| crate::sanitize::text(&format!("{g:#}")).into_owned())
            .collect();
        format!("GPUs {place}: {}", names.join("; "))
    };
    // As typed, one field: a line feed in it must not start a line.
    let spec = crate::sanitize::text(spec);
    anyhow::anyhow!("--device {spec}: {why}. {list}")
}

#[cfg(test)]
#[path = "identity_tests.rs"]
mod tests;
