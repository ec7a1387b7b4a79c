//! `gpudirect-trace probes`.

use std::process::ExitCode;

use clap::Args;
use serde::Serialize;

use crate::{
    ebpf::{DmaOpSource, ProbeStatus, Status, Tracer, TracerOptions},
    output, probes,
    sanitize::text as clean,
    session::STRICT_EXIT,
};

#[derive(Args, Debug)]
pub struct ProbesArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Exit with status 3 if any probe failed (unavailable ones are fine:
    /// kernels differ).
    #[arg(long)]
    pub strict: bool,
    /// As for `live`: which programs would report the DMA-API operations.
    #[arg(long, value_enum, default_value_t = super::trace::DmaSourceArg::Auto, value_name = "SOURCE")]
    pub dma_source: super::trace::DmaSourceArg,
    /// Debug messages on stderr, among them what the eBPF programs find odd
    /// (a scatterlist walk cut short, a hook that lost its arguments, a
    /// full map). RUST_LOG=debug does the same; RUST_LOG=ebpf=debug shows
    /// the programs' alone.
    #[arg(short, long)]
    pub verbose: bool,
}

pub fn exec(args: &ProbesArgs) -> anyhow::Result<ExitCode> {
    match print(args) {
        Err(e) if e.is::<output::StdoutClosed>() => Ok(ExitCode::SUCCESS),
        other => other,
    }
}

/// `probes --json`: what the kernel offers and what each probe made of it.
/// Fields in the order of their keys, as the output has them.
#[derive(Serialize)]
struct ProbesJson<'a> {
    /// The form of aggregate-only mode's mapping table on this kernel.
    aggregate_only_lifetimes: &'a str,
    /// How many of those mappings have their lifetime timed, by default.
    aggregate_only_lifetime_sampling: &'a str,
    btf: bool,
    btf_error: Option<&'a str>,
    dma_plan: &'a [DmaOpSource],
    kernel: &'a str,
    not_used: &'a [probes::NotUsed],
    probes: &'a [ProbeStatus],
    tracefs: Option<String>,
    tracefs_error: Option<&'a str>,
}

fn print(args: &ProbesArgs) -> anyhow::Result<ExitCode> {
    let tracer = Tracer::load(&TracerOptions {
        // The smallest ring: this command only attaches and reports.
        ring_bytes: 4096,
        dma_source: args.dma_source.into(),
        ..Default::default()
    })?;
    let k = &tracer.kernel;
    let not_used = probes::not_used(k.tracefs.as_deref());
    if args.json {
        let doc = ProbesJson {
            aggregate_only_lifetimes: tracer.lifetime_table,
            aggregate_only_lifetime_sampling: &tracer.lifetime_sampling,
            btf: k.btf.is_some(),
            btf_error: k.btf_error.as_deref(),
            dma_plan: &tracer.dma_plan,
            kernel: &k.release,
            not_used: &not_used,
            probes: &tracer.probes,
            tracefs: k.tracefs.as_ref().map(|p| p.display().to_string()),
            tracefs_error: k.tracefs_error.as_deref(),
        };
        // Through a value tree: keys sorted at every level, as always.
        output::line(&serde_json::to_string_pretty(&serde_json::to_value(&doc)?)?)?;
    } else {
        output::line(&probes::render(
            &tracer.probes,
            &not_used,
            &k.release,
            k.btf.is_some(),
        ))?;
        output::line(&probes::dma_plan_text(&tracer.dma_plan))?;
        output::line(&format!(
            "aggregate-only lifetimes: {}; {}",
            tracer.lifetime_table, tracer.lifetime_sampling
        ))?;
        if let Some(e) = &k.tracefs_error {
            output::line(&format!("note: {}", clean(e)))?;
        }
        if let Some(e) = &k.btf_error {
            output::line(&format!("note: {}", clean(e)))?;
        }
    }
    let failed = tracer.probes.iter().any(|p| p.status == Status::Failed);
    Ok(if args.strict && failed {
        ExitCode::from(STRICT_EXIT)
    } else {
        ExitCode::SUCCESS
    })
}
