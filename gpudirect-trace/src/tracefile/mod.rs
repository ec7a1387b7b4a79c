//! The native trace file (`record` writes it; `report` and `export` read it).
//! Layout and rationale: docs/trace-format.md.
//!
//! - [`format`]: preamble, block framing (length, type, flags, crc32c, zstd
//!   payload, length again), header and small block payloads;
//! - [`columns`]: the compact column encoding of events;
//! - [`writer`] / [`reader`]: appending blocks; reading them back, tolerating
//!   truncation and damage.

pub mod columns;
pub mod format;
mod legacy;
pub mod reader;
pub mod sequence;
pub mod varint;
pub mod writer;

#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod tests_bounds;
#[cfg(test)]
mod tests_inventory;

use std::{fs, io::BufReader, path::Path, time::Duration};

pub use format::{
    Checkpoint, CounterRow, End, Header, Loss, PciDevice, ProbeInfo, SnapshotInfo, Trigger,
};
pub use reader::{Item, OpenError, ReadStats, TraceReader};
pub use writer::{BlockOut, TraceWriter};

use crate::ebpf::ProbeStatus;

/// Opens a trace file for reading; the error says what is wrong with it.
pub fn open(path: &Path) -> anyhow::Result<TraceReader<BufReader<fs::File>>> {
    let f = fs::File::open(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    TraceReader::new(BufReader::with_capacity(1 << 20, f))
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// A window of a recording in its clock, from `--from`/`--to` (offsets from
/// its start): what `report` replays and what `export` writes, cut alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// Where records start to count: `from`, or 0 without it (events
    /// stamped just before the header, between attach and the header's
    /// clock reading, belong to the recording too).
    pub lo_ns: u64,
    /// The window's start as shown: `from`, or the recording's start.
    pub from_ns: u64,
    /// Its end (exclusive), where `--to` gave one.
    pub to_ns: Option<u64>,
}

impl Span {
    pub fn of(
        header: &Header,
        from: Option<Duration>,
        to: Option<Duration>,
    ) -> anyhow::Result<Self> {
        let offset = |d: Duration| {
            let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
            header.start_ts_ns.saturating_add(ns)
        };
        let span = Self {
            lo_ns: from.map_or(0, offset),
            from_ns: from.map_or(header.start_ts_ns, offset),
            to_ns: to.map(offset),
        };
        if span.to_ns.is_some_and(|t| t <= span.from_ns) {
            anyhow::bail!("--to must be later than --from (both count from the recording's start)");
        }
        Ok(span)
    }

    /// Whether a record of time `ts` is inside the window.
    pub fn holds(&self, ts: u64) -> bool {
        ts >= self.lo_ns && self.before_end(ts)
    }

    /// Whether `ts` is before the window's end (always, without `--to`).
    pub fn before_end(&self, ts: u64) -> bool {
        self.to_ns.is_none_or(|t| ts < t)
    }
}

fn read_trim(path: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

fn link_name(path: &Path) -> Option<String> {
    fs::read_link(path)
        .ok()?
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
}

/// PCI devices under `sysfs`/bus/pci/devices: bus id, ids, driver, IOMMU
/// group, NUMA node.
pub fn pci_inventory(sysfs: &Path) -> Vec<PciDevice> {
    let Ok(dir) = fs::read_dir(sysfs.join("bus/pci/devices")) else {
        return Vec::new();
    };
    let mut out: Vec<PciDevice> = dir
        .filter_map(Result::ok)
        .map(|e| {
            let p = e.path();
            PciDevice {
                bus_id: e.file_name().to_string_lossy().into_owned(),
                vendor: read_trim(p.join("vendor")).unwrap_or_default(),
                device: read_trim(p.join("device")).unwrap_or_default(),
                class: read_trim(p.join("class")).unwrap_or_default(),
                driver: link_name(&p.join("driver")),
                iommu_group: link_name(&p.join("iommu_group")).and_then(|g| g.parse().ok()),
                iommu_type: read_trim(p.join("iommu_group/type")),
                numa_node: read_trim(p.join("numa_node")).and_then(|n| n.parse().ok()),
                upstream: fs::read_link(&p)
                    .ok()
                    .and_then(|l| crate::model::pci::parent_from_devpath(&l.to_string_lossy())),
                names: Vec::new(),
            }
        })
        .collect();
    out.sort_by(|a, b| a.bus_id.cmp(&b.bus_id));
    for (bdf, name) in class_names(sysfs) {
        if let Ok(i) = out.binary_search_by(|d| d.bus_id.as_str().cmp(&bdf)) {
            let names = &mut out[i].names;
            if names.len() < format::MAX_CLASS_NAMES && !names.contains(&name) {
                names.push(name);
            }
        }
    }
    for d in &mut out {
        d.names.sort();
    }
    out
}

/// (PCI function, name) of every class device under `sysfs`/class whose
/// link leads below a PCI function (`block/nvme0n1` ->
/// `.../0000:00:04.0/nvme/nvme0/nvme0n1`: `function_from_devpath`, as live
/// looks a name up on the host). In name order, so that which names a
/// function past `MAX_CLASS_NAMES` keeps does not depend on the directory.
fn class_names(sysfs: &Path) -> Vec<(String, String)> {
    let Ok(classes) = fs::read_dir(sysfs.join("class")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for class in classes.filter_map(Result::ok) {
        let Ok(entries) = fs::read_dir(class.path()) else {
            continue;
        };
        for e in entries.filter_map(Result::ok) {
            let name = e.file_name().to_string_lossy().into_owned();
            // Entries named by bus numbers or ids (pci_bus's `0000:01`)
            // name nothing a user types for a device.
            if name.len() > format::MAX_CLASS_NAME || name.contains(':') {
                continue;
            }
            let Ok(target) = fs::read_link(e.path()) else {
                continue;
            };
            let target = target.to_string_lossy();
            if let Some(bdf) = crate::model::pci::function_from_devpath(&target) {
                out.push((bdf.to_owned(), name));
            }
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    out
}

/// The IOMMU policy of every PCI device of an inventory, by bus id.
pub fn policies(devices: &[PciDevice]) -> std::collections::HashMap<String, String> {
    devices
        .iter()
        .filter_map(|d| d.iommu_type.clone().map(|t| (d.bus_id.clone(), t)))
        .collect()
}

/// The driver bound to every PCI device of an inventory that has one, by
/// bus id.
pub fn drivers(devices: &[PciDevice]) -> std::collections::HashMap<String, String> {
    devices
        .iter()
        .filter_map(|d| d.driver.clone().map(|drv| (d.bus_id.clone(), drv)))
        .collect()
}

/// The header of a recording starting now on this host.
pub fn host_header(
    kernel_release: &str,
    probes: &[ProbeStatus],
    aggregate_only: bool,
    command: &[String],
) -> Header {
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    Header {
        hostname: read_trim("/proc/sys/kernel/hostname").unwrap_or_default(),
        kernel_release: kernel_release.to_owned(),
        boot_id: read_trim("/proc/sys/kernel/random/boot_id").unwrap_or_default(),
        clock: "CLOCK_MONOTONIC".to_owned(),
        tool_version: env!("CARGO_PKG_VERSION").to_owned(),
        start_ts_ns: crate::kernel::monotonic_ns(),
        start_unix_ns: unix,
        aggregate_only,
        command: command.to_vec(),
        checks: None,
        probes: probes
            .iter()
            .map(|p| ProbeInfo {
                name: p.name.to_owned(),
                kind: p.kind.to_owned(),
                program: p.program.to_owned(),
                status: p.status.as_str().to_owned(),
                reason: p.reason.clone(),
                hot: p.hot,
            })
            .collect(),
        devices: pci_inventory(Path::new("/sys")),
        gpus: Vec::new(),
        snapshot: None,
    }
}

/// A copy of the trace `bytes` with its header edited and every other byte
/// as it was (the header block is unnumbered, so the blocks' sequence
/// still checks): the tests' synthetic fleet hosts are real recordings
/// under other host names and boot ids.
pub fn with_header(bytes: &[u8], edit: impl FnOnce(&mut Header)) -> anyhow::Result<Vec<u8>> {
    let mut header = TraceReader::new(bytes)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .header()
        .clone();
    edit(&mut header);
    let p = format::PREAMBLE_LEN;
    let len = bytes
        .get(p..p + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or_else(|| anyhow::anyhow!("no header block"))?;
    let rest = bytes
        .get(p + len + format::BLOCK_OVERHEAD..)
        .ok_or_else(|| anyhow::anyhow!("the header block is cut short"))?;
    let mut out = bytes[..p].to_vec();
    format::frame(
        &mut out,
        format::block::HEADER,
        0,
        &serde_json::to_vec(&header)?,
    );
    out.extend_from_slice(rest);
    Ok(out)
}
