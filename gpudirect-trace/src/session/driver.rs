//! The one session driver: owns the runtime, the signals, the deadline, the
//! command being traced and the drain/refresh timers; live, record and
//! serve are sinks it feeds.

use std::{process::ExitCode, time::Duration};

use anyhow::Context as _;
use tokio::{
    signal::unix::{signal, SignalKind},
    sync::{mpsc, watch},
    time::MissedTickBehavior,
};

use super::{Observed, Session};
use crate::output;

/// Records waiting in the ring buffer are drained at least this often even
/// when the kernel side did not wake us (wake-ups are batched), and the
/// kernel log is polled as often.
pub const DRAIN_EVERY: Duration = Duration::from_millis(100);
/// A traced command that outlives the session gets SIGTERM, then SIGKILL
/// after this long.
pub const KILL_GRACE: Duration = Duration::from_secs(5);

/// Work run on the session and the sink by the driver's own task (the
/// metrics server's scrapes, tests injecting events): no locks, one owner.
pub type Job<S> = Box<dyn FnOnce(&mut Session, &mut S) + Send>;

/// Why the session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    Signal(&'static str),
    Deadline,
    /// The traced command exited.
    CommandExited,
    /// Asked to stop by its owner (`RunOptions::stop`).
    Stopped,
    /// The sink is done (e.g. stdout closed).
    SinkDone,
}

/// How a session ended, for the sink's final word.
#[derive(Clone, Debug)]
pub struct Ending {
    pub reason: StopReason,
    /// The traced command's exit status (signals as 128 + n), if it exited.
    pub command_status: Option<i32>,
}

/// A sink: what a subcommand does with a running session.
pub trait Sink: Sized {
    /// Called once inside the runtime, after the session is ready and
    /// before the traced command starts (spawn tasks, commit outputs here).
    fn start(
        &mut self,
        _s: &mut Session,
        _jobs: &mpsc::UnboundedSender<Job<Self>>,
    ) -> anyhow::Result<()> {
        Ok(())
    }
    /// The traced command was started (or there is none): the recording
    /// has begun, and an output replacing an old file may take its name.
    fn command_started(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
    /// Everything the session observed, in order.
    fn observe(&mut self, _o: Observed<'_>) -> anyhow::Result<()> {
        Ok(())
    }
    /// How often `tick` runs (None: never).
    fn tick_every(&self) -> Option<Duration> {
        None
    }
    /// SIGUSR1 (the flight recorder's `signal` trigger); ignored otherwise.
    fn user_signal(&mut self, _s: &mut Session) -> anyhow::Result<()> {
        Ok(())
    }
    /// Periodic work (redraw, checkpoint). `Ok(false)` ends the session.
    fn tick(&mut self, _s: &mut Session) -> anyhow::Result<bool> {
        Ok(true)
    }
    /// The final word, after the last drain; returns the exit status.
    fn finish(self, s: &mut Session, end: &Ending) -> anyhow::Result<ExitCode>;
}

/// When the session ends on its own and what it runs.
#[derive(Default)]
pub struct RunOptions {
    /// Stop after this long.
    pub deadline: Option<Duration>,
    /// A command to run while tracing (ends the session when it exits).
    pub command: Vec<String>,
    /// Stop when this becomes true (owners that are not signals: tests, the
    /// metrics server's handle).
    pub stop: Option<watch::Receiver<bool>>,
}

/// What one turn of the driver's loop does, decided while the loop's
/// futures borrow the session and done once they are gone.
enum Action<S> {
    Drain { kmsg: bool },
    Uevents(Vec<crate::model::pci::PciUevent>),
    Poll,
    Nvml,
    UserSignal,
    Tick,
    Job(Job<S>),
    JobsClosed,
    Stop(StopReason),
}

impl Session {
    /// Runs the session until a signal (SIGINT, SIGTERM, SIGHUP; SIGUSR1
    /// goes to the sink), the deadline, the traced command's exit or the
    /// owner's stop, feeding `sink`; returns its exit status. With a command, a session that ends
    /// first sends it SIGTERM, then SIGKILL.
    pub fn run<S: Sink>(self, sink: S, opts: RunOptions) -> anyhow::Result<ExitCode> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.run_with_jobs(sink, opts, tx, rx)
    }

    /// `run`, with a job queue the caller keeps a sender of.
    pub fn run_with_jobs<S: Sink>(
        mut self,
        mut sink: S,
        opts: RunOptions,
        jobs_tx: mpsc::UnboundedSender<Job<S>>,
        mut jobs: mpsc::UnboundedReceiver<Job<S>>,
    ) -> anyhow::Result<ExitCode> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            // Listening before anything starts; a stop signal that came
            // before (record catches them from its first moment) ends the
            // session at once, the command never started.
            let mut sigint = signal(SignalKind::interrupt())?;
            let mut sigterm = signal(SignalKind::terminate())?;
            let mut sighup = signal(SignalKind::hangup())?;
            let mut sigusr1 = signal(SignalKind::user_defined1())?;
            let mut early = super::stop_signals::pending().map(|(name, _)| name);
            // Taken now: a SIGUSR1 from here on reaches the stream above.
            let early_user_signal = super::stop_signals::take_user_signal();
            self.ring_to_async()?;
            sink.start(&mut self, &jobs_tx)?;
            drop(jobs_tx);
            let mut child = match opts.command.split_first().filter(|_| early.is_none()) {
                Some((cmd, rest)) => Some(
                    tokio::process::Command::new(cmd)
                        .args(rest)
                        .spawn()
                        .with_context(|| format!("cannot run {cmd}"))?,
                ),
                None => None,
            };
            sink.command_started()?;
            let mut nvml = tokio::time::interval(super::NVML_EVERY);
            nvml.set_missed_tick_behavior(MissedTickBehavior::Delay);
            let nvml_on = self.gpus.nvml_available();
            // The first reading (taken at start) goes to the sink first.
            self.sample_nvml(&mut |o| sink.observe(o))?;
            if early_user_signal {
                sink.user_signal(&mut self)?;
            }
            // The families' states as the session starts (each link's).
            self.poll_sources(true, &mut |o| sink.observe(o))?;
            let mut poll = tokio::time::interval(crate::families::POLL_EVERY);
            poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
            poll.tick().await;
            let mut drain = tokio::time::interval(DRAIN_EVERY);
            drain.set_missed_tick_behavior(MissedTickBehavior::Delay);
            let tick_every = sink.tick_every();
            let mut tick = tokio::time::interval(tick_every.unwrap_or(Duration::from_secs(3600)));
            tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
            tick.tick().await;
            let deadline = opts.deadline.map(|d| tokio::time::Instant::now() + d);
            let mut stop = opts.stop;
            let mut jobs_open = true;
            let mut command_status = None;
            let reason = loop {
                if let Some(name) = early.take() {
                    break StopReason::Signal(name);
                }
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
                let stopped = async {
                    match stop.as_mut() {
                        Some(rx) => {
                            while !*rx.borrow_and_update() {
                                if rx.changed().await.is_err() {
                                    return;
                                }
                            }
                        }
                        None => std::future::pending().await,
                    }
                };
                let uevents_on = self.follows_uevents();
                let Ring::Async(ring) = &self.ring else {
                    anyhow::bail!("the ring buffer is not in the driver's hands");
                };
                let action: Action<S> = tokio::select! {
                    changes = super::checks::pci_uevents(&mut self.uevents), if uevents_on => {
                        Action::Uevents(changes)
                    }
                    _ = poll.tick() => Action::Poll,
                    guard = ring.readable() => {
                        // Cleared before draining: what arrives after the
                        // drain signals readiness again.
                        guard?.clear_ready();
                        Action::Drain { kmsg: false }
                    }
                    _ = drain.tick() => Action::Drain { kmsg: true },
                    _ = nvml.tick(), if nvml_on => Action::Nvml,
                    _ = tick.tick(), if tick_every.is_some() => Action::Tick,
                    job = jobs.recv(), if jobs_open => match job {
                        Some(job) => Action::Job(job),
                        None => Action::JobsClosed,
                    },
                    status = child_exit => {
                        let status = status.context("waiting for the command")?;
                        command_status = Some(exit_code(status));
                        Action::Stop(StopReason::CommandExited)
                    }
                    _ = sigint.recv() => Action::Stop(StopReason::Signal("SIGINT")),
                    _ = sigterm.recv() => Action::Stop(StopReason::Signal("SIGTERM")),
                    _ = sighup.recv() => Action::Stop(StopReason::Signal("SIGHUP")),
                    _ = sigusr1.recv() => Action::UserSignal,
                    _ = until_deadline => Action::Stop(StopReason::Deadline),
                    _ = stopped => Action::Stop(StopReason::Stopped),
                };
                match action {
                    Action::Drain { kmsg } => feed(&mut self, &mut sink, kmsg)?,
                    Action::Uevents(changes) => {
                        // What the driver's remove() unmapped is in the
                        // ring already: take it first.
                        feed(&mut self, &mut sink, false)?;
                        self.uevents_seen(&changes, &mut |o| sink.observe(o))?;
                    }
                    Action::Poll => {
                        feed(&mut self, &mut sink, false)?;
                        self.poll_sources(false, &mut |o| sink.observe(o))?;
                    }
                    Action::Nvml => {
                        feed(&mut self, &mut sink, true)?;
                        self.sample_nvml(&mut |o| sink.observe(o))?;
                    }
                    Action::Tick => {
                        feed(&mut self, &mut sink, true)?;
                        if !sink.tick(&mut self)? {
                            break StopReason::SinkDone;
                        }
                    }
                    Action::Job(job) => {
                        feed(&mut self, &mut sink, true)?;
                        job(&mut self, &mut sink);
                    }
                    Action::UserSignal => {
                        feed(&mut self, &mut sink, true)?;
                        sink.user_signal(&mut self)?;
                    }
                    Action::JobsClosed => jobs_open = false,
                    Action::Stop(reason) => break reason,
                }
            };
            if let (Some(c), None) = (child.as_mut(), command_status) {
                command_status = end_command(c).await;
            }
            feed(&mut self, &mut sink, true)?;
            self.last_uevents(&mut |o| sink.observe(o))?;
            self.flush_kmsg(&mut |o| sink.observe(o))?;
            self.resolve_names(&mut |o| sink.observe(o))?;
            let end = Ending {
                reason,
                command_status,
            };
            sink.finish(&mut self, &end)
        })
    }
}

use super::Ring;

/// Drains what is waiting now into the session and `sink` (jobs that must
/// see the effects of what they just did); errors are the sink's and are
/// logged, the next regular drain reports them.
pub fn drain_now<S: Sink>(s: &mut Session, sink: &mut S) {
    if let Err(e) = feed(s, sink, true) {
        log::warn!("drain: {e:#}");
    }
}

/// Drains the ring buffer (and the kernel log) into the session and the sink.
fn feed<S: Sink>(s: &mut Session, sink: &mut S, kmsg: bool) -> anyhow::Result<()> {
    s.pump(&mut |o| sink.observe(o))?;
    if kmsg {
        s.poll_kmsg(&mut |o| sink.observe(o))?;
    }
    Ok(())
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// SIGTERM to a command the session outlived, SIGKILL if it does not exit
/// within `KILL_GRACE`; returns its exit status.
async fn end_command(child: &mut tokio::process::Child) -> Option<i32> {
    if let Ok(Some(status)) = child.try_wait() {
        return Some(exit_code(status));
    }
    let pid = child.id()?;
    output::note(&format!(
        "the recording ended before the command: sending it SIGTERM (pid {pid})"
    ));
    // SAFETY: kill(2) on our own child's pid, which `child` keeps from reuse
    // until it is reaped.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    match tokio::time::timeout(KILL_GRACE, child.wait()).await {
        Ok(Ok(status)) => Some(exit_code(status)),
        _ => {
            output::warn(&format!(
                "the command (pid {pid}) did not exit within {}s of SIGTERM: killing it",
                KILL_GRACE.as_secs()
            ));
            let _ = child.start_kill();
            child.wait().await.ok().map(exit_code)
        }
    }
}
