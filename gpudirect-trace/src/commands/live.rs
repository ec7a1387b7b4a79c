//! `gpudirect-trace live`.

use std::{io::IsTerminal as _, process::ExitCode, time::Duration};

use clap::Args;

use super::trace::{parse_duration, parse_interval, TraceArgs};
use crate::{
    live::{LiveOptions, LiveSink},
    session::{RunOptions, Session},
};

#[derive(Args, Debug)]
pub struct LiveArgs {
    /// Refresh interval (e.g. 500ms, 1s, 2m, or plain seconds; at least 100ms).
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,
    /// Stop after this long (default: until Ctrl-C, SIGTERM or SIGHUP).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Show only this device: a PCI bus id (0000:00:06.0), a GPU index (0,
    /// GPU0) or UUID (GPU-4f39..., a unique prefix), or a name this host
    /// gives it (nvme0, nvme0n1, eth0, mlx5_0: the PCI function it sits
    /// on); repeat for several.
    #[arg(long = "device", value_name = "BDF")]
    pub devices: Vec<String>,
    /// One JSON object per interval on stdout (the last one, with
    /// "final": true, lists every incident).
    #[arg(long)]
    pub json: bool,
    /// Mappings still outstanding after this long are listed as leak
    /// suspects (with --aggregate-only: DMA-API mappings, from the kernel's
    /// table).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub long_lived: Duration,
    #[command(flatten)]
    pub trace: TraceArgs,
}

pub fn exec(args: &LiveArgs) -> anyhow::Result<ExitCode> {
    let host = crate::hosttree::Tree::live();
    let gpus = crate::gpu::identity::from_tree(&host);
    let devices = super::trace::resolve_devices(
        &args.devices,
        &gpus,
        super::trace::DeviceNames::Host(&host),
    )?;
    let session = Session::start(&args.trace.session_options())?;
    let sink = LiveSink::new(LiveOptions {
        interval: args.interval,
        devices,
        typed_devices: args.devices.clone(),
        json: args.json,
        tty: !args.json && std::io::stdout().is_terminal(),
        long_lived: args.long_lived,
    });
    session.run(
        sink,
        RunOptions {
            deadline: args.duration,
            ..Default::default()
        },
    )
}
