//! `gpudirect-trace probes`: the probe table on this kernel.

use std::process::ExitCode;

use serde_json::json;

use crate::{
    cli::ProbesArgs,
    ebpf::{ProbeStatus, Status, Tracer, TracerOptions},
    output,
    sanitize::text as clean,
};

pub fn run(args: &ProbesArgs) -> anyhow::Result<ExitCode> {
    match print(args) {
        Err(e) if e.is::<output::StdoutClosed>() => Ok(ExitCode::SUCCESS),
        other => other,
    }
}

fn print(args: &ProbesArgs) -> anyhow::Result<ExitCode> {
    let tracer = Tracer::load(&TracerOptions {
        // The smallest ring: this command only attaches and reports.
        ring_bytes: 4096,
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
        });
        output::line(&serde_json::to_string_pretty(&doc)?)?;
    } else {
        output::line(&render(&tracer.probes, &k.release, k.btf.is_some()))?;
        if let Some(e) = &k.tracefs_error {
            output::line(&format!("note: {}", clean(e)))?;
        }
        if let Some(e) = &k.btf_error {
            output::line(&format!("note: {}", clean(e)))?;
        }
    }
    let failed = tracer.probes.iter().any(|p| p.status == Status::Failed);
    Ok(if args.strict && failed {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

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
