//! The flight recorder: the last minutes of the trace in memory, saved as a
//! snapshot when a fault, Xid, AER error, mapping failure, SIGUSR1 or the
//! traced command's failure says something went wrong (`record --ring`,
//! `serve --snapshot-dir`).
//!
//! The recorder writes the session's observations with the trace file's own
//! writer into a ring of compressed blocks (`ring`): bounded by age and
//! bytes, costing what recording to a file costs minus the disk. A trigger
//! writes the ring behind a fresh header (why, what the ring held, what it
//! had already dropped) into a new file, keeps appending for `--after`,
//! ends it and gives it its final name. Triggers that come while a
//! snapshot is open extend it (up to `MAX_EXTENSION` times `--after`) and
//! are recorded in it; triggers within `--min-spacing` of the last snapshot,
//! or past `--max-snapshots`, are suppressed: counted, never silent.

#[cfg(test)]
mod bench;
mod json;
mod ring;
mod snapdir;
pub mod snapshot;
pub mod trigger;

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

pub use self::trigger::{Trigger, KNOWN as KNOWN_TRIGGERS};
use self::{ring::Ring, snapshot::SnapshotFile};
use crate::{
    ebpf::SelfStats,
    kernel, output,
    record::checkpoint,
    session::{Observed, Session, StacksToWrite},
    tracefile::{
        self,
        format::{self, block},
        writer::framed_block,
        End, Header, SnapshotInfo, TraceWriter,
    },
};

/// An open snapshot ends at most this many `--after`s after its trigger,
/// however many triggers extend it.
pub const MAX_EXTENSION: u32 = 10;

#[derive(Clone, Debug)]
pub struct FlightOptions {
    /// Where snapshots go (created 0700 if missing).
    pub dir: PathBuf,
    /// The ring's bounds: whichever is reached first.
    pub max_age: Option<Duration>,
    pub max_bytes: Option<u64>,
    pub triggers: Vec<Trigger>,
    /// Recording goes on this long after a trigger.
    pub after: Duration,
    /// At most this many snapshots in the session's life.
    pub max_snapshots: Option<u64>,
    /// No new snapshot within this long of the previous one's trigger.
    pub min_spacing: Duration,
    /// How much of this tool's snapshots `dir` keeps (size, count, age);
    /// the oldest are deleted first.
    pub retention: snapshot::Retention,
}

/// What the recorder did, for the metrics and the final summary.
#[derive(Clone, Debug, Default)]
pub struct FlightStats {
    /// Snapshots written, by trigger name.
    pub written: BTreeMap<String, u64>,
    /// Triggers that started no snapshot, by (trigger name, reason).
    pub suppressed: BTreeMap<(String, String), u64>,
    /// Snapshots that could not be written (disk full, ...).
    pub failures: u64,
    /// Old snapshots deleted to stay within the disk budget.
    pub deleted: u64,
    pub last_snapshot_unix_ns: Option<u64>,
    pub last_path: Option<PathBuf>,
    pub ring_bytes: u64,
    pub ring_seconds: f64,
    pub ring_dropped_events: u64,
    /// The last snapshot's fdatasync, seconds (the disk's share of it).
    pub last_sync_seconds: f64,
}

struct Open {
    file: SnapshotFile,
    name: String,
    fired_ns: u64,
    close_at_ns: u64,
    events: u64,
}

pub struct Recorder {
    writer: TraceWriter<Ring>,
    header: Header,
    opts: FlightOptions,
    open: Option<Open>,
    stats: FlightStats,
    lost_seen: u64,
    last_fired_ns: Option<u64>,
    snapshots: u64,
    /// When the retention bounds were last applied (monotonic ns).
    retention_checked_ns: u64,
    /// The stacks this flush's records name (`--check --stacks`).
    stacks: StacksToWrite,
}

impl Recorder {
    pub fn new(session: &Session, opts: FlightOptions, command: &[String]) -> anyhow::Result<Self> {
        let clock = session.clock();
        let mut header = tracefile::host_header(
            &session.tracer.kernel.release,
            &session.tracer.probes,
            !session.stream,
            command,
        );
        header.start_ts_ns = clock.start_mono_ns;
        header.start_unix_ns = clock.start_unix_ns;
        header.gpus = session.gpus.identities.clone();
        header.checks = session.check.clone();
        let mut recorder = Self::with_header(header, opts)?;
        recorder.stacks = StacksToWrite::every_flush(session);
        Ok(recorder)
    }

    /// A recorder whose snapshots carry `header` (the session's, or a
    /// synthetic one for the self-test that writes big snapshots).
    pub fn with_header(header: Header, opts: FlightOptions) -> anyhow::Result<Self> {
        Self::with_clock(header, opts, kernel::monotonic_ns)
    }

    /// `with_header` with the ring aging blocks on `now` (benchmarks that
    /// feed minutes of synthetic time in seconds).
    pub fn with_clock(
        header: Header,
        opts: FlightOptions,
        now: fn() -> u64,
    ) -> anyhow::Result<Self> {
        snapshot::prepare_dir(&opts.dir)?;
        let ring = Ring::with_clock(
            opts.max_bytes,
            opts.max_age.map(|d| d.as_nanos() as u64),
            now,
        );
        Ok(Self {
            writer: TraceWriter::new(ring, &header)?,
            header,
            opts,
            open: None,
            stats: FlightStats::default(),
            lost_seen: 0,
            last_fired_ns: None,
            snapshots: 0,
            retention_checked_ns: 0,
            stacks: StacksToWrite::default(),
        })
    }

    pub fn stats(&self) -> FlightStats {
        let mut s = self.stats.clone();
        let ring = self.writer.out();
        s.ring_bytes = ring.bytes();
        s.ring_seconds = ring.span_ns().map_or(0.0, |(from, newest)| {
            newest.saturating_sub(from.unwrap_or(self.header.start_ts_ns)) as f64 / 1e9
        });
        s.ring_dropped_events = ring.dropped_events;
        s
    }

    /// Takes an observation into the ring; an incident may fire a trigger.
    pub fn observe(&mut self, o: &Observed<'_>) -> anyhow::Result<()> {
        self.stacks.note(o);
        match o {
            Observed::Record { record, device } => self.writer.push_shared(record, device)?,
            Observed::LogFault(f) => self.writer.log_fault(f)?,
            Observed::Nvml(s) => self.writer.nvml(s)?,
            Observed::Names(n) => self.writer.names(n)?,
            Observed::Driver(c) => self.writer.driver(c)?,
            Observed::Stacks(l) => self.writer.stacks(l)?,
            Observed::Incident {
                incident,
                merged: false,
            } => {
                let fired = self
                    .opts
                    .triggers
                    .iter()
                    .find_map(|t| t.fires(incident).map(|label| (t.name(), label)));
                if let Some((name, label)) = fired {
                    self.fire(name, label, incident.at.mono_ns, Some((*incident).clone()));
                }
            }
            Observed::Incident { .. } => {}
        }
        self.tee();
        Ok(())
    }

    /// The frames of the stacks this flush's records name, into the ring
    /// after them: a snapshot holds them wherever the ring was cut.
    fn write_stacks(&mut self, s: &mut Session) -> anyhow::Result<()> {
        let list = self.stacks.take(s);
        if list.is_empty() {
            return Ok(());
        }
        self.observe(&Observed::Stacks(&list))
    }

    /// SIGUSR1, if `signal` is a trigger.
    pub fn user_signal(&mut self) {
        if self.opts.triggers.contains(&Trigger::Signal) {
            self.fire("signal", "signal".into(), kernel::monotonic_ns(), None);
        }
    }

    /// Finishes the open snapshot now, whatever `--after` says (self-test).
    pub fn close_now(&mut self) -> anyhow::Result<()> {
        self.writer.flush()?;
        self.tee();
        self.close(None);
        Ok(())
    }

    /// Deletes the snapshots over the directory's retention bounds (after
    /// each snapshot, and once a minute for the age bound: a quiet node's
    /// old snapshots age out without a new one).
    fn apply_retention(&mut self, keep: Option<&std::path::Path>) {
        if !self.opts.retention.is_set() {
            return;
        }
        self.retention_checked_ns = kernel::monotonic_ns();
        let now = std::time::SystemTime::now();
        match snapshot::enforce_retention(&self.opts.dir, &self.opts.retention, keep, now) {
            Ok(gone) => {
                for g in &gone {
                    output::note(&format!(
                        "flight recorder: deleted {} ({})",
                        g.path.display(),
                        g.why
                    ));
                }
                self.stats.deleted += gone.len() as u64;
            }
            Err(e) => output::warn(&format!(
                "flight recorder: the snapshots' retention was not applied (nothing deleted): {e}"
            )),
        }
    }

    /// Checkpoint, flush into the ring, feed the open snapshot, close it
    /// when its time is up.
    pub fn tick(&mut self, s: &mut Session) -> anyhow::Result<SelfStats> {
        if self.opts.retention.max_age.is_some()
            && kernel::monotonic_ns().saturating_sub(self.retention_checked_ns) >= 60_000_000_000
        {
            self.apply_retention(None);
        }
        s.resolve_names(&mut |o| self.observe(&o))?;
        let stats = checkpoint(s, &mut self.writer, &mut self.lost_seen)?;
        s.confirm_findings(self.lost_seen, &mut |o| self.observe(&o))?;
        self.write_stacks(s)?;
        self.writer.flush()?;
        self.tee();
        if self
            .open
            .as_ref()
            .is_some_and(|o| kernel::monotonic_ns() >= o.close_at_ns)
        {
            self.close(None);
        }
        Ok(stats)
    }

    /// The end of the session: the `exit` trigger, then any open snapshot is
    /// finished (early, if `--after` has not passed).
    pub fn finish(
        &mut self,
        s: &mut Session,
        command_status: Option<i32>,
    ) -> anyhow::Result<SelfStats> {
        if let Some(code) = command_status.filter(|&c| c != 0) {
            if self.opts.triggers.contains(&Trigger::Exit) {
                self.fire("exit", format!("exit{code}"), kernel::monotonic_ns(), None);
            }
        }
        let stats = checkpoint(s, &mut self.writer, &mut self.lost_seen)?;
        s.confirm_findings(self.lost_seen, &mut |o| self.observe(&o))?;
        self.write_stacks(s)?;
        self.writer.flush()?;
        self.tee();
        if self.open.is_some() {
            self.close(command_status);
        }
        Ok(stats)
    }

    fn suppress(&mut self, name: &str, reason: &str) {
        *self
            .stats
            .suppressed
            .entry((name.to_owned(), reason.to_owned()))
            .or_default() += 1;
    }

    fn fire(
        &mut self,
        name: &str,
        label: String,
        at_ns: u64,
        incident: Option<crate::model::Incident>,
    ) {
        let mut t = format::Trigger {
            name: name.to_owned(),
            label,
            at_ns,
            incident,
            suppressed: None,
        };
        if let Some(o) = self.open.as_mut() {
            let cap = o.fired_ns + self.opts.after.as_nanos() as u64 * u64::from(MAX_EXTENSION);
            o.close_at_ns = o
                .close_at_ns
                .max(at_ns + self.opts.after.as_nanos() as u64)
                .min(cap);
            t.suppressed = Some("open".into());
            if let Err(e) = self.writer.trigger(&t) {
                output::warn(&format!("flight recorder: {e}"));
            }
            self.suppress(name, "open");
            self.tee();
            return;
        }
        if self.opts.max_snapshots.is_some_and(|m| self.snapshots >= m) {
            return self.suppress(name, "max-snapshots");
        }
        let spacing = self.opts.min_spacing.as_nanos() as u64;
        if self
            .last_fired_ns
            .is_some_and(|l| at_ns < l.saturating_add(spacing))
        {
            return self.suppress(name, "spacing");
        }
        self.last_fired_ns = Some(at_ns);
        self.snapshots += 1;
        if let Err(e) = self.start(t) {
            self.stats.failures += 1;
            output::warn(&format!("flight recorder: cannot write a snapshot: {e:#}"));
            self.writer.out_mut().set_tee(false);
            self.open = None;
        }
    }

    /// Opens a snapshot: a fresh header saying why, the device tables, the
    /// ring; from now on new blocks go to it too.
    fn start(&mut self, t: format::Trigger) -> anyhow::Result<()> {
        // The trigger's own event is still in the writer's batch; its block
        // must not push out what the ring held before the trigger.
        self.writer.out_mut().set_trimming(false);
        let flushed = self.writer.flush();
        self.writer.out_mut().set_trimming(true);
        flushed?;
        let ring = self.writer.out();
        let from = ring
            .span_ns()
            .and_then(|(from, _)| from)
            .unwrap_or(self.header.start_ts_ns)
            .min(t.at_ns);
        let mut header = self.header.clone();
        // The snapshot's clock starts at its oldest data.
        header.start_unix_ns = (header.start_unix_ns as i128 + from as i128
            - header.start_ts_ns as i128)
            .max(0) as u64;
        header.start_ts_ns = from;
        let unix_now = header.start_unix_ns + t.at_ns.saturating_sub(from);
        let name = snapshot::file_name(unix_now, &header.hostname, &t.label);
        header.snapshot = Some(SnapshotInfo {
            trigger: t.clone(),
            ring_from_ns: from,
            ring_max_ns: self.opts.max_age.map(|d| d.as_nanos() as u64),
            ring_max_bytes: self.opts.max_bytes,
            discarded_events: ring.dropped_events,
            discarded_blocks: ring.dropped_blocks,
            after_ns: self.opts.after.as_nanos() as u64,
        });
        let mut file = SnapshotFile::create(&self.opts.dir, name.clone())?;
        file.write(&format::preamble())?;
        file.write(&framed_block(block::HEADER, &serde_json::to_vec(&header)?)?)?;
        let names = self.writer.device_names();
        file.write(&framed_block(
            block::DEVICES,
            &format::encode_devices(0, &names),
        )?)?;
        let mut events = 0;
        for b in ring.blocks() {
            file.write(&b.bytes)?;
            events += b.events;
        }
        self.writer.out_mut().set_tee(true);
        let after = self.opts.after.as_nanos() as u64;
        output::note(&format!(
            "flight recorder: {} fired: writing a snapshot of the last {:.1}s and {}s after it",
            t.label,
            t.at_ns.saturating_sub(from) as f64 / 1e9,
            self.opts.after.as_secs_f64()
        ));
        self.open = Some(Open {
            file,
            name: t.name,
            fired_ns: t.at_ns,
            close_at_ns: t.at_ns + after,
            events,
        });
        Ok(())
    }

    /// New blocks into the open snapshot.
    fn tee(&mut self) {
        let blocks = self.writer.out_mut().take_tee();
        let Some(o) = self.open.as_mut() else { return };
        for (_typ, bytes, events) in blocks {
            o.events += events;
            if let Err(e) = o.file.write(&bytes) {
                self.stats.failures += 1;
                output::warn(&format!(
                    "flight recorder: writing the snapshot failed ({e}); it is dropped, the ring goes on"
                ));
                self.open = None;
                self.writer.out_mut().set_tee(false);
                return;
            }
        }
    }

    fn close(&mut self, exit_status: Option<i32>) {
        let Some(mut o) = self.open.take() else {
            return;
        };
        self.writer.out_mut().set_tee(false);
        let end = End {
            ts_ns: kernel::monotonic_ns(),
            events_written: o.events,
            lost_total: self.lost_seen,
            exit_status,
        };
        let result = (|| -> anyhow::Result<PathBuf> {
            let mut framed = Vec::new();
            format::frame(&mut framed, block::END, 0, &format::encode_end(&end));
            o.file.write(&framed)?;
            let bytes = o.file.bytes;
            let (path, sync) = o.file.commit()?;
            self.stats.last_sync_seconds = sync;
            output::note(&format!(
                "flight recorder: wrote {} ({})",
                path.display(),
                output::bytes(bytes)
            ));
            Ok(path)
        })();
        match result {
            Ok(path) => {
                *self.stats.written.entry(o.name).or_default() += 1;
                self.stats.last_snapshot_unix_ns = Some(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos() as u64),
                );
                self.apply_retention(Some(&path));
                self.stats.last_path = Some(path);
            }
            Err(e) => {
                self.stats.failures += 1;
                output::warn(&format!("flight recorder: the snapshot is dropped: {e:#}"));
            }
        }
    }
}

/// `record --ring`: the flight recorder as the session's sink.
pub struct FlightSink {
    recorder: Recorder,
    /// Print the session's final summary as `live --json` would.
    json: bool,
}

impl FlightSink {
    pub fn new(recorder: Recorder, json: bool) -> Self {
        Self { recorder, json }
    }
}

impl crate::session::Sink for FlightSink {
    fn observe(&mut self, o: Observed<'_>) -> anyhow::Result<()> {
        self.recorder.observe(&o)
    }

    fn tick_every(&self) -> Option<Duration> {
        Some(Duration::from_secs(1))
    }

    fn tick(&mut self, s: &mut Session) -> anyhow::Result<bool> {
        self.recorder.tick(s)?;
        Ok(true)
    }

    fn user_signal(&mut self, _s: &mut Session) -> anyhow::Result<()> {
        self.recorder.user_signal();
        Ok(())
    }

    fn finish(
        mut self,
        s: &mut Session,
        end: &crate::session::Ending,
    ) -> anyhow::Result<std::process::ExitCode> {
        let stats = self.recorder.finish(s, end.command_status)?;
        let f = self.recorder.stats();
        let written: u64 = f.written.values().sum();
        let suppressed: u64 = f.suppressed.values().sum();
        output::note(&format!(
            "flight recorder: {written} snapshot(s) written, {suppressed} trigger(s) suppressed, \
             {} failed; the ring held {:.1}s ({}) and had dropped {} older events",
            f.failures,
            f.ring_seconds,
            output::bytes(f.ring_bytes),
            f.ring_dropped_events
        ));
        if self.json {
            let elapsed = s.started.elapsed().as_secs_f64();
            let devices = s.analysis.agg.snapshot(elapsed, &[]);
            let session = crate::summary::session_json(
                s,
                &crate::summary::View {
                    devices: &devices,
                    stats: &stats,
                    long_lived: &[],
                    interval_s: elapsed,
                    last: true,
                },
            );
            let doc = json::WithFlight::new(session, &f);
            match output::line(&crate::summary::line(&doc)?) {
                Err(e) if e.is::<output::StdoutClosed>() => {}
                other => other?,
            }
        }
        Ok(match end.command_status {
            Some(code) => std::process::ExitCode::from(u8::try_from(code).unwrap_or(1)),
            None => std::process::ExitCode::SUCCESS,
        })
    }
}
