//! The probe table on this kernel, as text.

use crate::{
    ebpf::{DmaOpSource, ProbeStatus, Status},
    sanitize::text as clean,
};

/// One line: which programs report each DMA-API operation.
pub fn dma_plan_text(plan: &[DmaOpSource]) -> String {
    let ops: Vec<String> = plan
        .iter()
        .map(|o| format!("{} {}", o.op, o.source))
        .collect();
    format!(
        "DMA-API records (per-device level \"dma\"): {} (tracepoint: dma:*; hook: the time:dma_* \
         hooks on the DMA-API functions; none: not reported on this kernel)",
        ops.join(", ")
    )
}

/// The probe table as `probes` prints it.
pub fn render(probes: &[ProbeStatus], release: &str, btf: bool) -> String {
    let width = probes.iter().map(|p| p.name.len()).max().unwrap_or(10);
    let mut out = format!(
        "kernel {}, BTF {}\n{:<width$}  {:<14}  {:<11}  REASON\n",
        clean(release),
        if btf { "yes" } else { "no" },
        "PROBE",
        "KIND",
        "STATUS",
    );
    for p in probes {
        out.push_str(&format!(
            "{:<width$}  {:<14}  {:<11}  {}\n",
            p.name,
            p.kind,
            p.status.as_str(),
            // Kernel and loader messages: one line, no control characters.
            clean(&p.reason)
        ));
    }
    let attached = probes
        .iter()
        .filter(|p| p.status == Status::Attached)
        .count();
    let failed = probes.iter().filter(|p| p.status == Status::Failed).count();
    out.push_str(&format!(
        "{attached} attached, {} unavailable, {failed} failed",
        probes
            .iter()
            .filter(|p| p.status == Status::Unavailable)
            .count()
    ));
    out
}
