//! `cargo xtask demo`: a VM with VT-d, NVMe and edu, the tracer's live view while
//! the disk is read and a faulting DMA is injected.

use std::{process::ExitCode, time::Duration};

use anyhow::Result;
use clap::Args;

use super::{boot, build_binaries, qemu::Device, BootOpts, RunSpec};

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Kernel series.
    #[arg(long, default_value = "6.12")]
    pub kernel: String,
    /// Seconds the live view runs.
    #[arg(long, default_value_t = 10)]
    pub seconds: u32,
    #[command(flatten)]
    pub boot: BootOpts,
}

/// Guest side of the demo. Falls back to the kernel's own tracepoints when the
/// tracer binary has no `live` subcommand yet.
const SCRIPT: &str = r#"
secs=$1
echo "=== gpudirect-trace demo: $(uname -r), IOMMU=$GDT_IOMMU, NVMe $GDT_NVME_BDF, edu $GDT_EDU_BDF"
gpudirect-trace live --duration "${secs}s" 2> /tmp/live.err &
tracer=$!
i=0
until grep -q 'probes attached' /tmp/live.err || [ $i -gt 120 ]; do
    if ! kill -0 "$tracer" 2>/dev/null; then
        cat /tmp/live.err
        echo "=== gpudirect-trace live did not start"
        exit 1
    fi
    sleep 0.5; i=$((i + 1))
done
cat /tmp/live.err
sleep 2
echo "=== reading 32 MiB from /dev/nvme0n1 (O_DIRECT)"
dd if=/dev/nvme0n1 of=/dev/null bs=1M count=32 iflag=direct
echo "=== edu DMA write to unmapped IOVA 0x123000 (expect a DMAR fault)"
gdt-dma-inject --device "$GDT_EDU_BDF" --iova 0x123000 --len 64 --dir write
wait "$tracer"
echo "=== kernel log:"
dmesg | grep -i -e DMAR -e fault | tail -n 5
"#;

pub fn main(args: DemoArgs) -> Result<ExitCode> {
    let binaries = build_binaries(&args.boot)?;
    let spec = RunSpec {
        kernel: args.kernel.clone(),
        devices: vec![Device::Nvme, Device::Edu],
        modules: Vec::new(),
        kmods: Vec::new(),
        timeout: Duration::from_secs(300 + u64::from(args.seconds)),
        command: vec![
            "sh".into(),
            "-c".into(),
            SCRIPT.into(),
            "demo".into(),
            args.seconds.to_string(),
        ],
        prefix: String::new(),
        label: "demo".into(),
    };
    let out = boot(&spec, &args.boot, &binaries)?;
    if let Some(p) = &out.problem {
        eprintln!("xtask: demo: {p}");
        return Ok(ExitCode::FAILURE);
    }
    Ok(if out.success {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
