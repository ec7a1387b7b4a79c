//! `gpudirect-trace record`: the live session written to a trace file
//! (docs/trace-format.md) until Ctrl-C/SIGTERM, `--duration`, or the exit of
//! the command given after `--`.

use std::{
    fs::File,
    io::{BufWriter, IsTerminal as _, Write},
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use anyhow::Context as _;

use crate::{
    ebpf::SelfStats,
    kernel, outfile, output,
    output::bytes,
    session::{Ending, Observed, Session, Sink, StacksToWrite},
    summary,
    tracefile::{self, Checkpoint, CounterRow, End, Loss, TraceWriter},
};

/// Blocks are written and flushed (no fsync) at least this often, each
/// with a checkpoint of the kernel's counters.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// Creates the output file (crate::outfile): a new 0600 file, or with
/// `--force` a temporary one that replaces the old file only when
/// [`outfile::Output::commit`] is called, once the recording has started.
pub fn create_output(path: &Path, opts: outfile::Options) -> anyhow::Result<outfile::Output> {
    outfile::create(path, opts)
}

/// What `record` writes and how it ends.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    pub output: PathBuf,
    /// Print the session's final summary as `live --json` would.
    pub json: bool,
    /// The command traced (for the header).
    pub command: Vec<String>,
}

/// The recorder: every observation into the trace file, in arrival order.
pub struct RecordSink {
    writer: TraceWriter<Counted<BufWriter<File>>>,
    path: String,
    opts: RecordOptions,
    lost_seen: u64,
    tty: bool,
    /// The output until the recording has begun: `--force`'s replacement
    /// takes the old file's name only then (a command that cannot start,
    /// or a disk too full for the header, leaves the old file as it was).
    pending: Option<crate::outfile::Output>,
    /// Each stack the records name, written once with its frames.
    stacks: StacksToWrite,
}

impl RecordSink {
    /// `create` on an output not yet committed: it is committed once the
    /// traced command has started and the header is on disk.
    pub fn create_pending(
        session: &Session,
        opts: RecordOptions,
        mut output: crate::outfile::Output,
    ) -> anyhow::Result<Self> {
        let file = output
            .file()
            .try_clone()
            .with_context(|| format!("opening {}", opts.output.display()))?;
        let mut sink = Self::create(session, opts, file)?;
        sink.pending = Some(output);
        Ok(sink)
    }

    /// Creates the file and writes its header; the recording's clock is the
    /// session's.
    pub fn create(session: &Session, opts: RecordOptions, file: File) -> anyhow::Result<Self> {
        let clock = session.clock();
        let mut header = tracefile::host_header(
            &session.tracer.kernel.release,
            &session.tracer.probes,
            !session.stream,
            &opts.command,
        );
        header.gpus = session.gpus.identities.clone();
        header.checks = session.check.clone();
        header.start_ts_ns = clock.start_mono_ns;
        header.start_unix_ns = clock.start_unix_ns;
        let path = outfile::display(&opts.output);
        let out = Counted {
            inner: BufWriter::with_capacity(1 << 20, file),
            bytes: 0,
        };
        let writer = TraceWriter::new(out, &header).with_context(|| format!("writing {path}"))?;
        Ok(Self {
            writer,
            path,
            opts,
            lost_seen: 0,
            tty: std::io::stderr().is_terminal(),
            pending: None,
            stacks: StacksToWrite::of(session),
        })
    }

    /// The stacks the records since the last call named, with their
    /// frames, unless the file has them.
    fn write_stacks(&mut self, s: &mut Session) -> anyhow::Result<()> {
        let list = self.stacks.take(s);
        if list.is_empty() {
            return Ok(());
        }
        self.observe(Observed::Stacks(&list))
    }
}

impl Sink for RecordSink {
    fn command_started(&mut self) -> anyhow::Result<()> {
        if let Some(output) = self.pending.take() {
            self.writer
                .flush()
                .with_context(|| format!("writing {}", self.path))?;
            output.commit()?;
        }
        Ok(())
    }

    fn observe(&mut self, o: Observed<'_>) -> anyhow::Result<()> {
        self.stacks.note(&o);
        let r = match o {
            Observed::Record { record, device } => self.writer.push_shared(record, device),
            Observed::LogFault(f) => self.writer.log_fault(f),
            Observed::Nvml(s) => self.writer.nvml(s),
            Observed::Names(n) => self.writer.names(n),
            Observed::Driver(c) => self.writer.driver(c),
            Observed::Stacks(l) => self.writer.stacks(l),
            Observed::Incident { .. } => Ok(()),
        };
        r.with_context(|| format!("writing {}", self.path))
    }

    fn tick_every(&self) -> Option<Duration> {
        Some(FLUSH_EVERY)
    }

    fn tick(&mut self, s: &mut Session) -> anyhow::Result<bool> {
        s.resolve_names(&mut |o| self.observe(o))?;
        checkpoint(s, &mut self.writer, &mut self.lost_seen)
            .with_context(|| format!("writing {}", self.path))?;
        // After the checkpoint, as a replay of the file does it.
        s.confirm_findings(self.lost_seen, &mut |o| self.observe(o))?;
        self.write_stacks(s)?;
        self.writer
            .flush()
            .with_context(|| format!("writing {}", self.path))?;
        if self.tty {
            let mut err = std::io::stderr().lock();
            let _ = write!(
                err,
                "\rgpudirect-trace: recording to {}: {} events, {} written, {} lost   ",
                self.path,
                self.writer.events_written(),
                bytes(self.writer.bytes_written()),
                self.lost_seen
            );
        }
        Ok(true)
    }

    fn finish(mut self, s: &mut Session, end: &Ending) -> anyhow::Result<ExitCode> {
        let stats = checkpoint(s, &mut self.writer, &mut self.lost_seen)
            .with_context(|| format!("writing {}", self.path))?;
        s.confirm_findings(self.lost_seen, &mut |o| self.observe(o))?;
        self.write_stacks(s)?;
        let events = self.writer.events_written();
        let block = End {
            ts_ns: kernel::monotonic_ns(),
            events_written: events,
            lost_total: self.lost_seen,
            exit_status: end.command_status,
        };
        // What went out, not the size of the path: a device, a FIFO or
        // standard output has none ("wrote 0 events (0B)" after 2.2 KiB).
        let size = self
            .writer
            .finish(&block)
            .with_context(|| format!("writing {}", self.path))?
            .bytes;
        if self.tty {
            output::note("");
        }
        output::note(&format!(
            "wrote {} ({}{}) to {}; {} lost",
            crate::output::counted(events, "event"),
            bytes(size),
            if events > 0 {
                format!(", {:.1} bytes/event", size as f64 / events as f64)
            } else {
                String::new()
            },
            self.path,
            self.lost_seen
        ));
        if self.opts.json {
            let elapsed = s.started.elapsed().as_secs_f64();
            let devices = s.analysis.agg.snapshot(elapsed, &[]);
            let long_lived = Vec::new();
            let doc = summary::session_json(
                s,
                &summary::View {
                    devices: &devices,
                    stats: &stats,
                    long_lived: &long_lived,
                    interval_s: elapsed,
                    last: true,
                },
            );
            match output::line(&summary::line(&doc)?) {
                Err(e) if e.is::<output::StdoutClosed>() => {}
                other => other?,
            }
        }
        Ok(match end.command_status {
            Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
            None => ExitCode::SUCCESS,
        })
    }
}

/// A writer that counts the bytes it passes on.
struct Counted<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Writes a loss record if the kernel dropped events since the last call,
/// then the kernel's per-device counters; returns the programs' counts.
pub fn checkpoint<W: tracefile::BlockOut>(
    session: &mut Session,
    writer: &mut TraceWriter<W>,
    lost_seen: &mut u64,
) -> std::io::Result<SelfStats> {
    let counters = session.tracer.kernel_counters();
    session.analysis.agg.apply_kernel_counters(&counters);
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
        hits: stats.hits.clone(),
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
    })?;
    Ok(stats)
}
