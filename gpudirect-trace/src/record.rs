//! `gpudirect-trace record`: the live session written to a trace file
//! (docs/trace-format.md) until Ctrl-C/SIGTERM, `--duration`, or the exit of
//! the command given after `--`.

use std::{
    fs,
    io::{BufWriter, IsTerminal as _, Write},
    os::unix::process::ExitStatusExt as _,
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use anyhow::{bail, Context as _};
use clap::Args;
use tokio::{signal::unix::SignalKind, time::MissedTickBehavior};

use crate::{
    cli::{parse_duration, TraceArgs},
    kernel,
    outfile::{self, OutputFlags},
    output::bytes,
    session::Session,
    tracefile::{self, Checkpoint, CounterRow, End, Loss, TraceWriter},
};

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Trace file to write (created with mode 0600).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Stop after this long (default: until Ctrl-C, SIGTERM or CMD's exit).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    #[command(flatten)]
    pub out: OutputFlags,
    #[command(flatten)]
    pub trace: TraceArgs,
    /// Command to run while recording; recording ends when it exits and
    /// gpudirect-trace exits with its status.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Blocks are written and flushed (no fsync) at least this often.
const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// The ring buffer is drained at least this often (wake-ups are batched).
const DRAIN_EVERY: Duration = Duration::from_millis(100);

pub fn run(args: &RecordArgs) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(run_async(args))
}

/// Creates the output file (crate::outfile): a new 0600 file, or with
/// `--force` a temporary one that replaces the old file only when
/// [`outfile::Output::commit`] is called, once the recording has started.
pub fn create_output(path: &Path, flags: OutputFlags) -> anyhow::Result<outfile::Output> {
    outfile::create(path, flags.into())
}

async fn run_async(args: &RecordArgs) -> anyhow::Result<ExitCode> {
    let output = create_output(&args.output, args.out)?;
    // The recording starts before the first probe attaches.
    let start_ts_ns = kernel::monotonic_ns();
    // A failed start drops `output`: the old file (with --force), a device
    // node or a link's target stay untouched; only our new file goes.
    let mut session = Session::start(&args.trace)?;
    let file = output.commit()?;
    let mut header = tracefile::host_header(
        &session.tracer.kernel.release,
        &session.tracer.probes,
        args.trace.aggregate_only,
        &args.command,
    );
    header.start_ts_ns = start_ts_ns;
    let path = args.output.display().to_string();
    let mut writer = TraceWriter::new(BufWriter::with_capacity(1 << 20, file), &header)
        .with_context(|| format!("writing {path}"))?;
    let mut child = match args.command.split_first() {
        Some((cmd, rest)) => Some(
            tokio::process::Command::new(cmd)
                .args(rest)
                .spawn()
                .with_context(|| format!("cannot run {cmd}"))?,
        ),
        None => None,
    };
    let ready = session.ring_ready()?;
    let tty = std::io::stderr().is_terminal();
    let mut flush = tokio::time::interval(FLUSH_EVERY);
    flush.set_missed_tick_behavior(MissedTickBehavior::Delay);
    flush.tick().await;
    let mut drain = tokio::time::interval(DRAIN_EVERY);
    drain.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut sigterm = tokio::signal::unix::signal(SignalKind::terminate())?;
    let mut sigint = tokio::signal::unix::signal(SignalKind::interrupt())?;
    let deadline = args.duration.map(|d| tokio::time::Instant::now() + d);
    let mut lost_seen = 0u64;
    let mut exit_status = None;

    loop {
        let until_deadline = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let child_exit = async {
            match child.as_mut() {
                Some(c) => c.wait().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            guard = ready.readable() => {
                let mut guard = guard?;
                pump(&mut session, &mut writer, &path)?;
                guard.clear_ready();
            }
            _ = drain.tick() => pump(&mut session, &mut writer, &path)?,
            _ = flush.tick() => {
                pump(&mut session, &mut writer, &path)?;
                checkpoint(&mut session, &mut writer, &mut lost_seen)
                    .and_then(|()| writer.flush())
                    .with_context(|| format!("writing {path}"))?;
                if tty {
                    eprint!(
                        "\rgpudirect-trace: recording to {path}: {} events, {} written, {} lost   ",
                        writer.events_written(),
                        bytes(writer.bytes_written()),
                        lost_seen
                    );
                }
            }
            status = child_exit => {
                let status = status.context("waiting for the command")?;
                exit_status = Some(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)));
                break;
            }
            _ = sigint.recv() => break,
            _ = sigterm.recv() => break,
            _ = until_deadline => break,
        }
    }
    drop(ready);
    pump(&mut session, &mut writer, &path)?;
    checkpoint(&mut session, &mut writer, &mut lost_seen)
        .with_context(|| format!("writing {path}"))?;
    let events = writer.events_written();
    let end = End {
        ts_ns: kernel::monotonic_ns(),
        events_written: events,
        lost_total: lost_seen,
        exit_status,
    };
    writer
        .finish(&end)
        .with_context(|| format!("writing {path}"))?;
    let size = fs::metadata(&args.output).map(|m| m.len()).unwrap_or(0);
    if tty {
        eprintln!();
    }
    eprintln!(
        "gpudirect-trace: wrote {events} events ({}{}) to {path}; {lost_seen} lost",
        bytes(size),
        if events > 0 {
            format!(", {:.1} bytes/event", size as f64 / events as f64)
        } else {
            String::new()
        }
    );
    if child.is_some() && exit_status.is_none() {
        eprintln!("gpudirect-trace: recording ended before the command; it keeps running");
    }
    Ok(match exit_status {
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        None => ExitCode::SUCCESS,
    })
}

/// Drains the ring buffer into the aggregator and the file.
pub fn pump<W: Write>(
    session: &mut Session,
    writer: &mut TraceWriter<W>,
    path: &str,
) -> anyhow::Result<()> {
    let mut err = None;
    session.pump(|record, device| {
        if err.is_none() {
            if let Err(e) = writer.push(record, device) {
                err = Some(e);
            }
        }
    });
    if let Some(e) = err {
        bail!("writing {path}: {e}");
    }
    // Decoded faults (kernel log, and the tracepoint's with their mapping
    // state): the recorder is their only consumer, so it takes them all.
    session.poll_kmsg();
    let faults: Vec<_> = session.faults.drain(..).collect();
    writer
        .faults(&faults)
        .with_context(|| format!("writing {path}"))
}

/// Writes a loss record if the kernel dropped events since the last call,
/// then the kernel's per-device counters.
pub fn checkpoint<W: Write>(
    session: &mut Session,
    writer: &mut TraceWriter<W>,
    lost_seen: &mut u64,
) -> std::io::Result<()> {
    let counters = session.tracer.kernel_counters();
    session.agg.apply_kernel_counters(&counters);
    let stats = session
        .tracer
        .self_stats_with(counters.iter().map(|(_, k, c)| (k, c)));
    let now = kernel::monotonic_ns();
    // Events that never reached the file: ring buffer overflow, and program
    // runs the kernel skipped (recursion protection).
    let gone = stats.lost_events + stats.missed_events;
    if gone > *lost_seen {
        writer.loss(&Loss {
            ts_ns: now,
            lost: gone - *lost_seen,
            total: gone,
        })?;
        *lost_seen = gone;
    }
    writer.checkpoint(&Checkpoint {
        ts_ns: now,
        events_written: writer.events_written(),
        lost_total: gone,
        hits: stats.hits,
        counters: counters
            .into_iter()
            .map(|(device, k, c)| CounterRow {
                device,
                kind: k.kind,
                dir: k.dir,
                count: c.count,
                bytes: c.bytes,
            })
            .collect(),
    })
}
