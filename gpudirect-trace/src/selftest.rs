//! `gpudirect-trace selftest` (hidden): checks of the tool's own machinery
//! on the running kernel, for the VM scenarios and for support cases.
//!
//! `module-hook` proves the module-BTF fentry loader (`ebpf::module_fentry`)
//! where the NVIDIA driver cannot exist (the CI VMs): the timing programs
//! of the nv_dma_map_sgt slot are attached to a function of another module
//! (e.g. nvme's nvme_setup_cmd) through that module's BTF, exactly as they
//! are attached to the NVIDIA driver, and must count calls.

use std::{process::ExitCode, time::Duration};

use clap::{Args, Subcommand};
use gpudirect_trace_common::op;
use serde_json::json;

use crate::ebpf::{Status, Tracer, TracerOptions};

#[derive(Args, Debug)]
pub struct SelftestArgs {
    #[command(subcommand)]
    pub check: SelftestCheck,
}

#[derive(Subcommand, Debug)]
pub enum SelftestCheck {
    /// Time a module function with the NVIDIA hooks' programs and loader
    ModuleHook {
        /// Module whose BTF holds the function (/sys/kernel/btf/MODULE).
        #[arg(long)]
        module: String,
        /// The module function to hook.
        #[arg(long)]
        function: String,
        /// How long to count calls.
        #[arg(long, default_value = "5s", value_parser = crate::cli::parse_duration)]
        duration: Duration,
    },
}

pub fn run(args: &SelftestArgs) -> anyhow::Result<ExitCode> {
    let SelftestCheck::ModuleHook {
        module,
        function,
        duration,
    } = &args.check;
    let mut tracer = Tracer::load(&TracerOptions {
        stream: false,
        lifetimes: false,
        module_standin: Some((module.clone(), function.clone())),
        ..Default::default()
    })?;
    let probe = tracer
        .probes
        .iter()
        .find(|p| p.name == crate::catalog::STANDIN_NAME)
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("the stand-in hook was not tried"))?;
    eprintln!(
        "gpudirect-trace: selftest: {} {}: {}",
        probe.name,
        probe.status.as_str(),
        probe.reason
    );
    if probe.status == Status::Attached {
        std::thread::sleep(*duration);
    }
    let hists = tracer.kernel_latency();
    let mut calls = 0;
    let mut max_ns = 0;
    for (_, o, h) in &hists {
        if *o == op::NV_DMA_MAP_SGT {
            calls += h.count;
            max_ns = max_ns.max(h.max_ns);
        }
    }
    println!(
        "{}",
        json!({
            "check": "module-hook",
            "module": module,
            "function": function,
            "status": probe.status.as_str(),
            "kind": probe.kind,
            "reason": probe.reason,
            "calls": calls,
            "max_ns": max_ns,
        })
    );
    Ok(if probe.status == Status::Attached && calls > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
