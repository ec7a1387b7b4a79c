//! `live`: the refreshing per-device view, a sink of the session driver.

use std::{process::ExitCode, time::Duration, time::Instant};

use crate::{
    output::{self, StdoutClosed},
    render,
    session::{Ending, Session, Sink},
    summary,
};

/// What the live view shows and how.
#[derive(Clone, Debug)]
pub struct LiveOptions {
    pub interval: Duration,
    /// Only these devices (empty: all).
    pub devices: Vec<String>,
    /// `devices` as the user typed them (`nvme0n1` for 0000:00:04.0), one
    /// each, for the end's note on those that matched nothing.
    pub typed_devices: Vec<String>,
    pub json: bool,
    /// Redraw in place (a terminal, not --json).
    pub tty: bool,
    /// Mappings outstanding longer than this are leak suspects.
    pub long_lived: Duration,
}

pub struct LiveSink {
    opts: LiveOptions,
    last: Instant,
}

impl LiveSink {
    pub fn new(opts: LiveOptions) -> Self {
        Self {
            opts,
            last: Instant::now(),
        }
    }

    fn emit(&mut self, s: &mut Session, last: bool) -> anyhow::Result<()> {
        let now = Instant::now();
        let interval = now.duration_since(self.last).as_secs_f64();
        self.last = now;
        emit(s, &self.opts, interval, last)
    }
}

impl Sink for LiveSink {
    fn tick_every(&self) -> Option<Duration> {
        Some(self.opts.interval)
    }

    fn tick(&mut self, s: &mut Session) -> anyhow::Result<bool> {
        match self.emit(s, false) {
            Err(e) if e.is::<StdoutClosed>() => Ok(false),
            other => other.map(|()| true),
        }
    }

    fn finish(mut self, s: &mut Session, end: &Ending) -> anyhow::Result<ExitCode> {
        output::warn_unmatched(
            &self.opts.devices,
            &self.opts.typed_devices,
            &s.analysis.agg.device_names(),
        );
        if end.reason != crate::session::StopReason::SinkDone {
            match self.emit(s, true) {
                Err(e) if e.is::<StdoutClosed>() => {}
                other => other?,
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// Prints one interval (or the final summary) of `s`.
pub fn emit(s: &mut Session, o: &LiveOptions, interval: f64, last: bool) -> anyhow::Result<()> {
    s.resolve_names(&mut |_| Ok(()))?;
    let stats = s.refresh_counters();
    s.confirm_findings(stats.lost_events + stats.missed_events, &mut |_| Ok(()))?;
    let devices = s.analysis.agg.snapshot(interval, &o.devices);
    let long_lived = s.analysis.agg.long_lived(
        crate::kernel::monotonic_ns(),
        o.long_lived.as_nanos() as u64,
        10,
    );
    if o.json {
        let doc = summary::session_json(
            s,
            &summary::View {
                devices: &devices,
                stats: &stats,
                long_lived: &long_lived,
                interval_s: interval,
                last,
            },
        );
        return output::line(&summary::line(&doc)?);
    }
    let mut text = render::live_text(
        &devices,
        &render::Totals {
            kernel: &s.tracer.kernel.release,
            attached: s.tracer.attached(),
            elapsed: s.started.elapsed().as_secs_f64(),
            events: s.analysis.agg.events,
            kernel_hits: Some(stats.total_hits()),
            lost: stats.lost_events,
            missed: stats.missed_events,
            decode_errors: s.analysis.agg.decode_errors,
            aggregate_only: !s.stream,
            final_summary: last,
        },
    );
    let a = &s.analysis;
    let gpus = render::gpus_text(&a.agg.gpus, a.nvml_first.as_ref(), a.nvml_latest.as_ref());
    text.push_str(&gpus);
    text.push_str(&render::processes_text(&devices));
    if a.agg.names_unknown > 0 {
        text.push_str(&format!(
            "({} processes shown as \"-\": gone from /proc with no exit record to name them)\n",
            a.agg.names_unknown
        ));
    }
    text.push_str(&render::latency_text(&devices));
    text.push_str(&render::invalidations_text(
        &s.analysis.agg.unit_rows(),
        &devices,
    ));
    text.push_str(&render::translation_text(&devices));
    text.push_str(&render::misuse_text(
        s.analysis.checker.as_ref().map(|c| &c.stats),
    ));
    text.push_str(&render::long_lived_text(&long_lived));
    let all = s.analysis.ledger.incidents();
    let shown = if last { 32 } else { 8 };
    let skip = all.len().saturating_sub(shown);
    text.push_str(&render::incidents_text(
        all.iter().skip(skip),
        skip as u64 + s.analysis.ledger.evicted(),
    ));
    text.push_str(&render::timelines_text(&s.analysis.timelines()));
    // Device names, Xid messages, process names and fault lines come from
    // the kernel and from whatever runs on the host: no control character
    // of theirs reaches the terminal (our own clear-screen is added after).
    let text = crate::sanitize::multiline(&text);
    if o.tty && !last {
        output::write(&format!("\x1b[H\x1b[2J{text}\n"))
    } else {
        output::line(&text)
    }
}
