//! `gpudirect-trace explain`.

use std::{path::PathBuf, process::ExitCode};

use clap::Args;

use crate::faults::{run_explain, ExplainOptions};

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// Kernel log to decode: output of `dmesg` (plain, `-T`, `-r`, `-x` or
    /// `--time-format iso`), `journalctl -k` (text, or `-o json`), syslog
    /// files, or raw /dev/kmsg records;
    /// gzip- or zstd-compressed (a rotated `kern.log.2.gz`) or not; `-`
    /// reads stdin. Without it, the records currently in /dev/kmsg are read
    /// (needs CAP_SYSLOG or kernel.dmesg_restrict=0) and the command returns
    /// at once.
    pub input: Option<PathBuf>,
    /// Print JSON `{"faults":[...],"summary":{...}}` instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn exec(args: &ExplainArgs) -> anyhow::Result<ExitCode> {
    if let Some(p) = args.input.as_deref().filter(|p| p.as_os_str() != "-") {
        let mut head = [0u8; 8];
        let is_trace = std::fs::File::open(p)
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
            .is_ok_and(|()| head == crate::tracefile::format::MAGIC);
        if is_trace {
            anyhow::bail!(
                "{} is a gpudirect-trace recording, not a kernel log: read it with \
                 `gpudirect-trace report {}`",
                crate::sanitize::text(&p.display().to_string()),
                crate::sanitize::text(&p.display().to_string())
            );
        }
    }
    run_explain(&ExplainOptions {
        input: args.input.clone(),
        json: args.json,
    })
}
