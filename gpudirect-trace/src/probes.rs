//! `gpudirect-trace probes`: the probe table on this kernel.

use std::process::ExitCode;

use serde_json::json;

use crate::{
    cli::ProbesArgs,
    ebpf::{DmaOpSource, ProbeStatus, Status, Tracer, TracerOptions},
    output,
};

pub fn run(args: &ProbesArgs) -> anyhow::Result<ExitCode> {
    let tracer = Tracer::load(&TracerOptions {
        // The smallest ring: this command only attaches and reports.
        ring_bytes: 4096,
        dma_source: args.dma_source,
        ..Default::default()
    })?;
    let k = &tracer.kernel;
    if args.json {
        let doc = json!({
            "kernel": k.release,
            "btf": k.btf.is_some(),
            "btf_error": k.btf_error,
            "tracefs": k.tracefs.as_ref().map(|p| p.display().to_string()),
            "tracefs_error": k.tracefs_error,
            "probes": tracer.probes,
            "dma_plan": tracer.dma_plan,
        });
        output::line(&serde_json::to_string_pretty(&doc)?)?;
    } else {
        output::line(&render(&tracer.probes, &k.release, k.btf.is_some()))?;
        output::line(&dma_plan_text(&tracer.dma_plan))?;
        if let Some(e) = &k.tracefs_error {
            output::line(&format!("note: {e}"))?;
        }
        if let Some(e) = &k.btf_error {
            output::line(&format!("note: {e}"))?;
        }
    }
    let failed = tracer.probes.iter().any(|p| p.status == Status::Failed);
    Ok(if args.strict && failed {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

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

pub fn render(probes: &[ProbeStatus], release: &str, btf: bool) -> String {
    let width = probes.iter().map(|p| p.name.len()).max().unwrap_or(10);
    let mut out = format!(
        "kernel {release}, BTF {}\n{:<width$}  {:<14}  {:<11}  REASON\n",
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
            p.reason
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
