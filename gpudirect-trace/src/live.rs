//! `gpudirect-trace live`: the refreshing per-device view.

use std::{
    io::IsTerminal as _,
    process::ExitCode,
    time::{Duration, Instant},
};

use serde_json::json;
use tokio::{signal::unix::SignalKind, time::MissedTickBehavior};

use crate::{
    aggregate::DeviceSnapshot,
    cli::LiveArgs,
    ebpf::SelfStats,
    output::{self, StdoutClosed},
    render,
    session::Session,
};

/// Records waiting in the ring buffer are drained at least this often even
/// when the kernel side did not wake us (wake-ups are batched).
const DRAIN_EVERY: Duration = Duration::from_millis(100);

pub fn run(args: &LiveArgs) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(run_async(args))
}

async fn run_async(args: &LiveArgs) -> anyhow::Result<ExitCode> {
    let mut session = Session::start(&args.trace)?;
    let ready = session.ring_ready()?;
    let tty = !args.json && std::io::stdout().is_terminal();
    let mut tick = tokio::time::interval(args.interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tick.tick().await;
    let mut drain = tokio::time::interval(DRAIN_EVERY);
    drain.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut sigterm = tokio::signal::unix::signal(SignalKind::terminate())?;
    let deadline = args.duration.map(|d| tokio::time::Instant::now() + d);
    let mut last = Instant::now();

    let result: anyhow::Result<()> = async {
        loop {
            let until_deadline = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                guard = ready.readable() => {
                    let mut guard = guard?;
                    session.pump(|_, _| {});
                    guard.clear_ready();
                }
                _ = drain.tick() => {
                    session.pump(|_, _| {});
                    session.poll_kmsg();
                }
                _ = tick.tick() => {
                    session.pump(|_, _| {});
                    let now = Instant::now();
                    let interval = now.duration_since(last).as_secs_f64();
                    last = now;
                    emit(&mut session, args, tty, interval, false)?;
                }
                _ = tokio::signal::ctrl_c() => break,
                _ = sigterm.recv() => break,
                _ = until_deadline => break,
            }
        }
        Ok(())
    }
    .await;
    match result {
        Err(e) if e.is::<StdoutClosed>() => return Ok(ExitCode::SUCCESS),
        Err(e) => return Err(e),
        Ok(()) => {}
    }
    session.pump(|_, _| {});
    session.poll_kmsg();
    let interval = last.elapsed().as_secs_f64();
    match emit(&mut session, args, tty, interval, true) {
        Err(e) if e.is::<StdoutClosed>() => {}
        other => other?,
    }
    Ok(ExitCode::SUCCESS)
}

fn emit(
    session: &mut Session,
    args: &LiveArgs,
    tty: bool,
    interval: f64,
    last: bool,
) -> anyhow::Result<()> {
    let stats = session.refresh_counters();
    let devices = session.agg.snapshot(interval, &args.devices);
    let elapsed = session.started.elapsed().as_secs_f64();
    let long_lived = session.agg.long_lived(
        crate::kernel::monotonic_ns(),
        args.long_lived.as_nanos() as u64,
        10,
    );
    if args.json {
        let mut doc = json_snapshot(session, &devices, &stats, elapsed, interval, last);
        doc["long_lived"] = json!(long_lived
            .iter()
            .map(
                |(dev, lvl, m)| json!({"device": dev, "level": lvl, "address": m.address,
                "size": m.size, "age_s": m.age_s, "pid": m.pid})
            )
            .collect::<Vec<_>>());
        doc["faults"] = json!(session.faults.iter().rev().take(32).collect::<Vec<_>>());
        doc["fault_counts"] = json!(session
            .fault_counts
            .iter()
            .map(|((dev, src, reason), n)| json!({"device": dev, "source": src, "reason": reason, "count": n}))
            .collect::<Vec<_>>());
        doc["kmsg_lost_records"] = json!(session.kmsg_lost());
        doc["program_stats"] = json!(session.tracer.program_stats());
        doc["kmsg_error"] = json!(session.kmsg_error);
        output::line(&serde_json::to_string(&doc)?)
    } else {
        let mut text = render::live_text(
            &devices,
            session.agg.recent.iter().rev().take(8),
            &render::Totals {
                kernel: &session.tracer.kernel.release,
                attached: session.tracer.attached(),
                elapsed,
                events: session.agg.events,
                kernel_hits: stats.total_hits(),
                lost: stats.lost_events,
                missed: stats.missed_events,
                decode_errors: session.agg.decode_errors,
                aggregate_only: !session.stream,
                final_summary: last,
            },
        );
        text.push_str(&render::latency_text(&devices));
        text.push_str(&render::long_lived_text(&long_lived));
        text.push_str(&render::faults_text(session.faults.iter().rev().take(8)));
        if tty && !last {
            output::write(&format!("\x1b[H\x1b[2J{text}\n"))
        } else {
            output::line(&text)
        }
    }
}

fn json_snapshot(
    session: &Session,
    devices: &[DeviceSnapshot],
    stats: &SelfStats,
    elapsed: f64,
    interval: f64,
    last: bool,
) -> serde_json::Value {
    json!({
        "elapsed_s": elapsed,
        "interval_s": interval,
        "final": last,
        "kernel": session.tracer.kernel.release,
        "mode": if session.stream { "streaming" } else { "aggregate-only" },
        "probes_attached": session.tracer.attached(),
        "devices": devices,
        "events": session.agg.events,
        "kernel_events": stats.total_hits(),
        "lost_events": stats.lost_events,
        "missed_events": stats.missed_events,
        "decode_errors": session.agg.decode_errors,
        "device_name_failures": stats.device_name_failures,
        "timing_nest_full": stats.timing_nest_full,
        "lifetime_unmatched": stats.lifetime_unmatched,
        "mappings_untracked": stats.mappings_untracked,
        // DMA-API maps a kretprobe could not report (docs/probes.md).
        "hook_args_missing": stats.hook_args_missing,
        "dma_plan": session.tracer.dma_plan,
        "recent": session.agg.recent.iter().rev().take(16).collect::<Vec<_>>(),
    })
}
