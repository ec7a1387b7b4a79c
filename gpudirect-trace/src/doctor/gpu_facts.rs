//! NVML facts as doctor findings: BAR1 nearly full or small, PCIe link below
//! its maximum, replays rising, remapped rows pending or failed, retired pages,
//! uncorrectable ECC errors, persistence mode off; and the GPUs' identities.
//!
//! A live host is read twice, [`SAMPLE_GAP`] apart, so a replay counter that
//! moves while the doctor runs is seen; a capture replays the two readings it
//! recorded (`nvml.json`), so `--root` gives the same findings as the live run
//! did. `--baseline` compares the counters against an earlier capture.

use std::time::Duration;

use super::{
    findings::{Findings, Severity},
    tree::Tree,
};
use crate::gpu::{
    facts::{self, NVML_FILE},
    identity, Fact, GpuFacts, GpuIdentity, NvmlRecord, NvmlSource, NvmlStatus, Sample,
};

/// Time between the two live readings. Long enough for a failing link's replay
/// counter to move (DCGM warns above 8 replays a minute; a link that replays
/// within one second is well past that), short enough not to slow the doctor.
pub const SAMPLE_GAP: Duration = Duration::from_secs(1);
/// DCGM's PCIe health watch threshold (dcgm_errors.h DCGM_FR_PCI_REPLAY_RATE:
/// "Detected more than %u PCIe replays per minute", default 8).
pub const REPLAYS_PER_MIN_WARN: f64 = 8.0;
/// BAR1 use that is a warning and a problem. Every GPUDirect RDMA registration
/// (nvidia_p2p_get_pages, dma-buf export) maps the registered GPU memory into
/// BAR1; when it is full, registrations fail (ibv_reg_mr returns an error).
pub const BAR1_WARN_PCT: u64 = 75;
pub const BAR1_PROBLEM_PCT: u64 = 90;
/// A BAR1 this small (the 256 MiB of a GPU without a large BAR) limits
/// GPUDirect RDMA to a few hundred MB registered at once, minus what the
/// driver itself keeps mapped.
pub const BAR1_SMALL: u64 = 1 << 30;
/// P-states at or above this are idle states, in which GPUs lower their PCIe
/// link speed to save power.
const IDLE_PSTATE: u32 = 2;

/// The NVML answers for `tree`: read now from the real NVML (live host), or
/// the capture's `nvml.json`. Never fails: whatever is missing becomes the
/// reason NVML is unavailable.
pub fn gather(tree: &Tree) -> NvmlRecord {
    if tree.is_live() {
        return facts::record(&mut NvmlSource::open(), 2, SAMPLE_GAP);
    }
    let why = match tree.read_capture_file(NVML_FILE) {
        Ok(text) => match NvmlRecord::from_json(&text) {
            Ok(r) => return r,
            Err(e) => format!("{}: {e:#}", tree.host(NVML_FILE).display()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => format!(
            "this capture has no {NVML_FILE} (taken where NVML was missing, or by an older \
             gpudirect-trace)"
        ),
        Err(e) => format!("{}: {e}", tree.host(NVML_FILE).display()),
    };
    NvmlRecord {
        format: facts::FORMAT,
        status: NvmlStatus::Unavailable { why },
        samples: Vec::new(),
    }
}

fn mib(b: u64) -> String {
    format!("{} MiB", b >> 20)
}

fn nvml_ev(call: &str, g: &GpuIdentity, value: impl std::fmt::Display) -> String {
    format!("NVML {call}({}) = {value}", g.short())
}

/// Add the NVML findings and return every GPU's identity (NVML's where it
/// answered, else the driver's /proc files).
pub fn check(
    tree: &Tree,
    rec: &NvmlRecord,
    baseline: Option<&NvmlRecord>,
    f: &mut Findings,
) -> Vec<GpuIdentity> {
    let from_proc = identity::from_tree(tree);
    let last = rec.last();
    let nvml_ids: Vec<GpuIdentity> = last
        .map(|s| s.gpus.iter().map(|g| g.identity.clone()).collect())
        .unwrap_or_default();
    let gpus = identity::merge(from_proc, &nvml_ids);
    match &rec.status {
        NvmlStatus::Unavailable { why } => {
            let tail = if gpus.is_empty() {
                "; this host shows no NVIDIA GPU, so nothing is missed"
            } else {
                ": BAR1, PCIe replay, ECC and row-remapping checks skipped; the rest is read from \
                 /sys and /proc"
            };
            f.add(
                "nvml.unavailable",
                Severity::Info,
                "host",
                format!("NVML not available ({why}){tail}"),
                vec![format!("NVML: {why}")],
                if gpus.is_empty() {
                    ""
                } else {
                    "libnvidia-ml.so.1 ships with the NVIDIA driver's user-space part; run the \
                     doctor on the host itself (or in a container with the driver's libraries \
                     mounted, as the NVIDIA container toolkit does)"
                },
            );
            return gpus;
        }
        NvmlStatus::Available {
            driver_version,
            nvml_version,
        } => {
            let show = |v: &Fact<String>| {
                v.ok()
                    .cloned()
                    .unwrap_or_else(|| format!("version unknown ({})", v.why().unwrap_or("")))
            };
            let n = last.map_or(0, |s| s.gpus.len());
            f.add(
                "nvml.status",
                Severity::Ok,
                "host",
                format!(
                    "NVML {} (driver {}): {n} GPU(s) read",
                    show(nvml_version),
                    show(driver_version)
                ),
                vec![format!("{} reading(s) taken", rec.samples.len())],
                "",
            );
        }
    }
    if let Some(s) = last {
        for e in &s.errors {
            let lost = e.contains("lost");
            f.add(
                "nvml.device_error",
                if lost {
                    Severity::Problem
                } else {
                    Severity::Unknown
                },
                "host",
                format!("NVML could not open a GPU: {e}"),
                vec![e.clone()],
                if lost {
                    "a lost GPU has fallen off the bus (Xid 79): check the kernel log for AER \
                     errors around it; it needs a reset or a reboot"
                } else {
                    ""
                },
            );
        }
        for g in &s.gpus {
            check_gpu(g, rec, baseline, f);
        }
    }
    gpus
}

fn check_gpu(g: &GpuFacts, rec: &NvmlRecord, baseline: Option<&NvmlRecord>, f: &mut Findings) {
    let id = &g.identity;
    check_bar1(g, f);
    check_link(g, f);
    check_replays(g, rec, baseline, f);
    check_memory_errors(g, f);
    if let Fact::Ok(false) = g.persistence_mode {
        f.add(
            "gpu.persistence_off",
            Severity::Warn,
            &id.bus_id,
            format!("{id}: persistence mode off"),
            vec![nvml_ev("nvmlDeviceGetPersistenceMode", id, "disabled")],
            "without persistence the driver tears the GPU's state down when the last client \
             exits: every new CUDA process pays the initialisation again (hundreds of DMA \
             mappings per context start), and the volatile ECC and replay counters restart. \
             Run nvidia-persistenced (or nvidia-smi -pm 1)",
        );
    }
    let missing = g.unavailable();
    if !missing.is_empty() {
        let ev = missing.iter().map(|(n, w)| format!("{n}: {w}")).collect();
        f.add(
            "nvml.facts_unavailable",
            Severity::Info,
            &id.bus_id,
            format!("{id}: {} NVML facts unavailable", missing.len()),
            ev,
            "\"not supported\" is normal where a GPU lacks the feature (Ampere and later remap \
             rows instead of retiring pages); \"no permission\" needs root",
        );
    }
}

fn check_bar1(g: &GpuFacts, f: &mut Findings) {
    let id = &g.identity;
    let Fact::Ok(b) = g.bar1 else {
        return;
    };
    let ev = vec![nvml_ev(
        "nvmlDeviceGetBAR1MemoryInfo",
        id,
        format!(
            "total {}, used {} (nvidia-smi -q -d MEMORY: BAR1 Memory Usage)",
            mib(b.total),
            mib(b.used)
        ),
    )];
    if b.total < BAR1_SMALL {
        f.add(
            "gpu.bar1.small",
            Severity::Warn,
            &id.bus_id,
            format!("{id}: BAR1 is only {}", mib(b.total)),
            ev.clone(),
            "GPUDirect RDMA maps every registered GPU buffer into BAR1, so registrations fail \
             beyond a few hundred MB at once. Enable Above 4G Decoding and Resizable BAR in \
             the firmware (for a VM: a large 64-bit MMIO window for the passed-through GPU)",
        );
    }
    // A zero total (never seen) counts as full.
    let pct = b
        .used
        .saturating_mul(100)
        .checked_div(b.total)
        .unwrap_or(100);
    let (sev, what) = if pct >= BAR1_PROBLEM_PCT {
        (Severity::Problem, "nearly full")
    } else if pct >= BAR1_WARN_PCT {
        (Severity::Warn, "filling up")
    } else {
        (Severity::Ok, "room to spare")
    };
    f.add(
        "gpu.bar1",
        sev,
        &id.bus_id,
        format!(
            "{id}: BAR1 {pct}% used ({} of {}): {what} (warn at {BAR1_WARN_PCT}%, problem at \
             {BAR1_PROBLEM_PCT}%)",
            mib(b.used),
            mib(b.total)
        ),
        ev,
        if sev == Severity::Ok {
            ""
        } else {
            "GPUDirect RDMA registrations (ibv_reg_mr on GPU memory, nvidia_p2p_get_pages, \
             dma-buf export) need free BAR1 for every registered byte and fail once it is \
             full: deregister buffers no longer used, register fewer/larger regions, or get a \
             larger BAR1 (Resizable BAR)"
        },
    );
}

fn check_link(g: &GpuFacts, f: &mut Findings) {
    let id = &g.identity;
    let p = &g.pcie;
    let (Fact::Ok(gc), Fact::Ok(gm), Fact::Ok(wc), Fact::Ok(wm)) =
        (&p.gen_current, &p.gen_max, &p.width_current, &p.width_max)
    else {
        return;
    };
    let pstate = g.performance_state.ok().copied();
    let ps = pstate.map_or("P-state unknown".to_owned(), |s| format!("P{s}"));
    let ev = vec![nvml_ev(
        "nvmlDeviceGetCurrPcieLinkGeneration/Width, GetMaxPcieLinkGeneration/Width",
        id,
        format!("Gen{gc} x{wc} now, Gen{gm} x{wm} max; {ps}"),
    )];
    if gc >= gm && wc >= wm {
        f.add(
            "gpu.link",
            Severity::Ok,
            &id.bus_id,
            format!("{id}: PCIe Gen{gc} x{wc}, its maximum"),
            ev,
            "",
        );
        return;
    }
    let idle = pstate.is_some_and(|s| s >= IDLE_PSTATE);
    let (sev, why) = match (idle, wc < wm) {
        (true, _) => (
            Severity::Info,
            format!(
                " while the GPU idles in {ps}: GPUs lower the link speed to save power, so \
                     this may be power saving"
            ),
        ),
        (false, false) => (Severity::Warn, format!(" in {ps} (not idle)")),
        (false, true) => (Severity::Problem, format!(" in {ps} (not idle)")),
    };
    f.add(
        "gpu.link.below_max",
        sev,
        &id.bus_id,
        format!("{id}: PCIe link at Gen{gc} x{wc}, below its maximum Gen{gm} x{wm}{why}"),
        ev,
        "re-check while the GPU is busy (nvidia-smi -q -d PCIE under load); a link that stays \
         narrow or slow under load caps every DMA (half width = half bandwidth): reseat the \
         card or riser, check the slot's firmware speed/bifurcation settings and AER errors",
    );
}

/// Replay counter of `bus_id` in `s`, with its time.
fn replays_at(s: &Sample, bus_id: &str) -> Option<(u64, u64)> {
    let g = s.gpu(bus_id)?;
    g.pcie.replays.ok().map(|&r| (r, s.taken_unix_ms))
}

/// `g`'s PCIe replays against the baseline's last reading, else against this
/// run's first reading of the same GPU.
fn check_replays(g: &GpuFacts, rec: &NvmlRecord, baseline: Option<&NvmlRecord>, f: &mut Findings) {
    let id = &g.identity;
    let Fact::Ok(now) = g.pcie.replays else {
        return;
    };
    let t_now = rec.last().map_or(0, |s| s.taken_unix_ms);
    let mut ev = Vec::new();
    // Against an earlier capture first (longer window), else across the two
    // readings of this run.
    let before = baseline
        .and_then(|b| b.last())
        .and_then(|s| replays_at(s, &id.bus_id).map(|r| (r, "baseline")))
        .or_else(|| {
            rec.first()
                .filter(|_| rec.samples.len() > 1)
                .and_then(|s0| replays_at(s0, &id.bus_id))
                .map(|r| (r, "first reading"))
        });
    let Some(((then, t_then), what)) = before else {
        ev.push(nvml_ev("nvmlDeviceGetPcieReplayCounter", id, now));
        let sev = if now == 0 {
            Severity::Ok
        } else {
            Severity::Info
        };
        f.add(
            "gpu.pcie_replays",
            sev,
            &id.bus_id,
            format!("{id}: {now} PCIe replays since the driver loaded (one reading: not known whether rising)"),
            ev,
            "compare against an earlier capture (doctor --baseline CAPTURE) or watch \
             gpudirect_gpu_pcie_replays_total",
        );
        return;
    };
    ev.push(nvml_ev(
        "nvmlDeviceGetPcieReplayCounter",
        id,
        format!("{then} at {what} (unix ms {t_then})"),
    ));
    ev.push(nvml_ev(
        "nvmlDeviceGetPcieReplayCounter",
        id,
        format!("{now} now (unix ms {t_now})"),
    ));
    if now < then {
        f.add(
            "gpu.pcie_replays",
            Severity::Info,
            &id.bus_id,
            format!("{id}: replay counter went from {then} to {now}: the driver was reloaded or the GPU reset since the {what}"),
            ev,
            "",
        );
        return;
    }
    let secs = (t_now.saturating_sub(t_then) as f64 / 1000.0).max(0.001);
    let delta = now - then;
    let per_min = delta as f64 * 60.0 / secs;
    let (sev, summary) = if delta == 0 {
        (
            Severity::Ok,
            format!("{id}: PCIe replay counter steady at {now} over {secs:.0} s"),
        )
    } else if per_min > REPLAYS_PER_MIN_WARN {
        (
            Severity::Warn,
            format!(
                "{id}: PCIe replays rising: +{delta} in {secs:.0} s ({per_min:.1}/min, above \
                 DCGM's {REPLAYS_PER_MIN_WARN}/min)"
            ),
        )
    } else {
        (
            Severity::Info,
            format!("{id}: PCIe replays rising slowly: +{delta} in {secs:.0} s ({per_min:.2}/min)"),
        )
    };
    f.add(
        "gpu.pcie_replays",
        sev,
        &id.bus_id,
        summary,
        ev,
        if sev == Severity::Warn {
            "replays are link-level retransmissions of corrupted packets; a rising count \
             often precedes Xid 79 (fallen off the bus). Check AER errors in the kernel log, \
             reseat the GPU/riser, and check the slot's signal integrity settings"
        } else {
            ""
        },
    );
}

fn check_memory_errors(g: &GpuFacts, f: &mut Findings) {
    let id = &g.identity;
    if let Fact::Ok(r) = g.remapped_rows {
        let ev = vec![nvml_ev(
            "nvmlDeviceGetRemappedRows",
            id,
            format!(
                "correctable {}, uncorrectable {}, pending {}, failure {}",
                r.correctable, r.uncorrectable, r.pending, r.failure
            ),
        )];
        let (sev, summary, advice) = if r.failure {
            (
                Severity::Problem,
                "row remapping failed: no spare row was left",
                "the GPU cannot retire more bad HBM rows; NVIDIA treats this as a reason to \
                 replace the GPU (RMA)",
            )
        } else if r.pending {
            (
                Severity::Warn,
                "a row remapping is pending",
                "the bad row stays in use until the GPU is reset (nvidia-smi -r with no \
                 processes on it, or a reboot); until then it can raise Xid 63/64/48 again",
            )
        } else if r.uncorrectable > 0 {
            (
                Severity::Info,
                "rows were remapped after uncorrectable errors (the Xid 63/64 history)",
                "",
            )
        } else {
            (Severity::Ok, "no row remapping pending or failed", "")
        };
        f.add(
            "gpu.remapped_rows",
            sev,
            &id.bus_id,
            format!(
                "{id}: {summary} ({} correctable, {} uncorrectable)",
                r.correctable, r.uncorrectable
            ),
            ev,
            advice,
        );
    }
    let rp = &g.retired_pages;
    if let (Fact::Ok(sb), Fact::Ok(db)) = (&rp.single_bit, &rp.double_bit) {
        let pending = rp.pending.ok().copied().unwrap_or(false);
        let sev = if *db > 0 || pending {
            Severity::Warn
        } else if *sb > 0 {
            Severity::Info
        } else {
            Severity::Ok
        };
        f.add(
            "gpu.retired_pages",
            sev,
            &id.bus_id,
            format!(
                "{id}: {sb} page(s) retired for single-bit, {db} for double-bit ECC errors{}",
                if pending { "; retirement pending" } else { "" }
            ),
            vec![nvml_ev(
                "nvmlDeviceGetRetiredPages(_v2)/GetRetiredPagesPendingStatus",
                id,
                format!("single-bit {sb}, double-bit {db}, pending {pending}"),
            )],
            if pending {
                "pending pages are retired at the next driver reload or reboot"
            } else {
                ""
            },
        );
    }
    let e = &g.ecc;
    if let Fact::Ok(false) = e.enabled {
        f.add(
            "gpu.ecc",
            Severity::Info,
            &id.bus_id,
            format!("{id}: ECC off: memory errors are neither corrected nor counted"),
            vec![nvml_ev("nvmlDeviceGetEccMode", id, "disabled")],
            "",
        );
        return;
    }
    let (Fact::Ok(vu), Fact::Ok(au)) = (&e.volatile_uncorrected, &e.aggregate_uncorrected) else {
        return;
    };
    let vc = e.volatile_corrected.ok().copied().unwrap_or(0);
    let ac = e.aggregate_corrected.ok().copied().unwrap_or(0);
    let ev = vec![nvml_ev(
        "nvmlDeviceGetTotalEccErrors",
        id,
        format!(
            "volatile corrected {vc}, uncorrected {vu}; aggregate corrected {ac}, uncorrected {au}"
        ),
    )];
    let (sev, summary, advice) = if *vu > 0 {
        (
            Severity::Problem,
            format!("{id}: {vu} uncorrectable ECC error(s) since the driver loaded"),
            "uncorrectable errors (Xid 48) corrupt the data of the process that met them: \
             restart it, and check remapped rows / retired pages for a pending repair",
        )
    } else if *au > 0 {
        (
            Severity::Warn,
            format!("{id}: {au} uncorrectable ECC error(s) in the GPU's lifetime, none since the driver loaded"),
            "check remapped rows / retired pages; repeated errors after repairs mean the GPU \
             should be replaced",
        )
    } else {
        (
            Severity::Ok,
            format!("{id}: no uncorrectable ECC errors ({vc} corrected since the driver loaded)"),
            "",
        )
    };
    f.add("gpu.ecc", sev, &id.bus_id, summary, ev, advice);
}
