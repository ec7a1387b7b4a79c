//! P2P path matrix between GPUs and NICs in `nvidia-smi topo -m` vocabulary,
//! derived from the sysfs bridge chains, plus the ACS check on the bridges each
//! path crosses.

use serde::Serialize;

use super::{
    devices::{Device, Kind},
    findings::{Findings, Severity},
    pci::Config,
    tree::Tree,
};

#[derive(Debug, Clone, Serialize)]
pub struct TopoDevice {
    pub name: String,
    pub bdf: String,
    pub kind: Kind,
    pub numa_node: Option<i32>,
    pub local_cpus: Option<String>,
    pub host_bridge: Option<String>,
    /// Bridges from the root port down.
    pub upstream: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Topology {
    pub devices: Vec<TopoDevice>,
    /// `matrix[i][j]`: X, PIX, PXB, PHB, NODE, SYS, NV# or `?` (path unknown).
    pub matrix: Vec<Vec<String>>,
    /// Where NV# entries came from, when any.
    pub nvlink_source: Option<String>,
}

/// PCIe path class between two devices.
pub fn path_class(a: &Device, b: &Device) -> &'static str {
    if a.bdf == b.bdf {
        return "X";
    }
    let (Some(ha), Some(hb)) = (&a.host_bridge, &b.host_bridge) else {
        return "?";
    };
    if ha != hb {
        return if a.numa_node == b.numa_node {
            "NODE"
        } else {
            "SYS"
        };
    }
    let common = shared_bridges(a, b);
    if common == 0 {
        return "PHB";
    }
    // Below the deepest shared bridge (a switch's upstream port, typically)
    // each side crosses at most one more bridge (its downstream port): one switch.
    if a.upstream.len() - common <= 1 && b.upstream.len() - common <= 1 {
        "PIX"
    } else {
        "PXB"
    }
}

/// How many bridges `a` and `b` share, counted down from the host bridge
/// (their upstream paths' common start).
fn shared_bridges(a: &Device, b: &Device) -> usize {
    a.upstream
        .iter()
        .zip(&b.upstream)
        .take_while(|(x, y)| x == y)
        .count()
}

/// Bridges a peer transaction between `a` and `b` passes through: the deepest
/// shared bridge and every bridge below it on either side. Under one host
/// bridge with nothing shared, the two root ports.
pub fn bridges_between(a: &Device, b: &Device) -> Vec<String> {
    if a.host_bridge != b.host_bridge {
        return Vec::new();
    }
    let common = shared_bridges(a, b);
    let mut v: Vec<String> = Vec::new();
    if common > 0 {
        v.push(a.upstream[common - 1].clone());
    }
    v.extend(a.upstream[common..].iter().cloned());
    v.extend(b.upstream[common..].iter().cloned());
    v
}

/// NVLink entries from a saved `nvidia-smi topo -m` (GPU index -> row).
pub fn parse_topo_m(text: &str) -> Vec<(usize, usize, String)> {
    let clean: String = strip_ansi(text);
    let mut lines = clean.lines();
    let Some(header) = lines.find(|l| l.split_whitespace().next() == Some("GPU0")) else {
        return Vec::new();
    };
    let cols: Vec<&str> = header.split_whitespace().collect();
    let mut out = Vec::new();
    for l in lines {
        let mut cells = l.split('\t').map(str::trim);
        let Some(row) = cells
            .next()
            .and_then(|r| r.strip_prefix("GPU")?.parse::<usize>().ok())
        else {
            continue;
        };
        for (col, cell) in cols.iter().zip(cells) {
            if let Some(j) = col
                .strip_prefix("GPU")
                .and_then(|c| c.parse::<usize>().ok())
            {
                if cell.starts_with("NV") {
                    out.push((row, j, cell.to_string()));
                }
            }
        }
    }
    out
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c2 in chars.by_ref() {
                if c2.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// nvidia-smi's GPU order: the `GPU 00000000:BB:DD.F` headings of a saved
/// `nvidia-smi -q`, else PCI order.
fn nvidia_smi_order(tree: &Tree, gpus: &[&Device]) -> Vec<String> {
    if let Ok(q) = tree.read_capture_file("nvidia-smi-q.txt") {
        let order: Vec<String> = q
            .lines()
            .filter_map(|l| l.strip_prefix("GPU "))
            .filter_map(|id| {
                let id = id.trim().to_ascii_lowercase();
                let tail = id.get(id.len().checked_sub(7)?..)?.to_string();
                gpus.iter()
                    .find(|g| g.bdf.ends_with(&tail))
                    .map(|g| g.bdf.clone())
            })
            .collect();
        if order.len() == gpus.len() {
            return order;
        }
    }
    gpus.iter().map(|g| g.bdf.clone()).collect()
}

pub fn build(tree: &Tree, devs: &[Device], f: &mut Findings) -> Topology {
    let gpus: Vec<&Device> = devs.iter().filter(|d| d.kind == Kind::Gpu).collect();
    let nics: Vec<&Device> = devs.iter().filter(|d| d.kind == Kind::Nic).collect();
    let gpu_order = nvidia_smi_order(tree, &gpus);
    let mut ordered: Vec<(String, &Device)> = gpu_order
        .iter()
        .enumerate()
        .filter_map(|(i, b)| Some((format!("GPU{i}"), *gpus.iter().find(|g| &g.bdf == b)?)))
        .collect();
    ordered.extend(
        nics.iter()
            .enumerate()
            .map(|(i, d)| (format!("NIC{i}"), *d)),
    );
    let mut matrix: Vec<Vec<String>> = ordered
        .iter()
        .map(|(_, a)| {
            ordered
                .iter()
                .map(|(_, b)| path_class(a, b).to_string())
                .collect()
        })
        .collect();

    // NVLink from a saved topo -m (capture) or a live nvidia-smi.
    let (text, source) = match tree.read_capture_file("nvidia-smi-topo-m.txt") {
        Ok(t) => (Some(t), "nvidia-smi-topo-m.txt"),
        Err(_) if tree.is_live() => (
            super::capture::run_tool("nvidia-smi", &["topo", "-m"]).ok(),
            "nvidia-smi topo -m",
        ),
        Err(_) => (None, ""),
    };
    let mut nvlink_source = None;
    if let Some(t) = text {
        for (i, j, nv) in parse_topo_m(&t) {
            if i < gpus.len() && j < gpus.len() && i != j {
                matrix[i][j] = nv;
                nvlink_source = Some(source.to_string());
            }
        }
    }
    for (i, (na, a)) in ordered.iter().enumerate() {
        for (j, (nb, b)) in ordered.iter().enumerate().skip(i + 1) {
            check_acs_between(tree, (na, a), (nb, b), &matrix[i][j], f);
            if matrix[i][j] == "SYS" && a.kind != b.kind {
                f.add(
                    "topology.cross_numa",
                    Severity::Warn,
                    &a.bdf,
                    format!(
                        "{na} ({}, NUMA {}) and {nb} ({}, NUMA {}) are on different NUMA nodes: \
                         GPUDirect RDMA between them crosses the CPU interconnect (SYS)",
                        a.bdf,
                        a.numa_node.unwrap_or(-1),
                        b.bdf,
                        b.numa_node.unwrap_or(-1)
                    ),
                    vec![
                        format!("{}/numa_node = {}", a.dir(), a.numa_node.unwrap_or(-1)),
                        format!("{}/numa_node = {}", b.dir(), b.numa_node.unwrap_or(-1)),
                    ],
                    "pair each GPU with a NIC on its own NUMA node (NCCL does this when it \
                     sees the topology; check NCCL_IB_HCA / CUDA_VISIBLE_DEVICES), and pin \
                     the process to that node",
                );
            }
        }
    }
    Topology {
        devices: ordered
            .iter()
            .map(|(name, d)| TopoDevice {
                name: name.clone(),
                bdf: d.bdf.clone(),
                kind: d.kind,
                numa_node: d.numa_node,
                local_cpus: d.local_cpus.clone(),
                host_bridge: d.host_bridge.clone(),
                upstream: d.upstream.clone(),
            })
            .collect(),
        matrix,
        nvlink_source,
    }
}

fn check_acs_between(
    tree: &Tree,
    (na, a): (&str, &Device),
    (nb, b): (&str, &Device),
    class: &str,
    f: &mut Findings,
) {
    for br in bridges_between(a, b) {
        let p = format!("/sys/bus/pci/devices/{br}/config");
        let bytes = match tree.read_bytes(&p) {
            Ok(b) => b,
            Err(e) => {
                f.unreadable("acs", &br, &p, &e);
                continue;
            }
        };
        let Some(acs) = Config::new(&bytes).acs() else {
            continue;
        };
        if !acs.redirects_p2p() {
            continue;
        }
        let nvlink = class.starts_with("NV");
        f.add(
            "acs.p2p_redirect",
            if nvlink {
                Severity::Info
            } else {
                Severity::Problem
            },
            &br,
            format!(
                "ACS on bridge {br} redirects peer traffic between {na} ({}) and {nb} ({}) up to \
                 the root complex{}",
                a.bdf,
                b.bdf,
                if nvlink {
                    " (these GPUs talk over NVLink; PCIe P2P is not their path)"
                } else {
                    ""
                }
            ),
            vec![format!(
                "{p} @0x{:x}: ACSCtl 0x{:04x}: {}",
                acs.offset + 6,
                acs.ctl,
                acs.describe_ctl()
            )],
            "P2P requests that should turn around in the switch go up to the root complex (and \
             through the IOMMU when one is on): the top cause of NCCL P2P hangs and slow P2P. \
             On bare metal without VFIO, disable ACS in the BIOS (or clear ReqRedir/CmpltRedir \
             with setpci on this bridge at boot); with an IOMMU, ACS is what isolates groups, \
             so use iommu=pt instead if isolation is not needed",
        );
    }
}
