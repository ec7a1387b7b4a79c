//! `gpudirect-trace serve`: the probes run continuously and `/metrics`
//! exposes the aggregate to Prometheus (docs/metrics.md).
//!
//! [`start`] serves an existing [`Session`] on a bound listener from its own
//! thread (the CLI and the host tests share it: the tests drive the session's
//! programs in-process). That thread drains the ring buffer when it signals,
//! every 100 ms regardless, and takes the in-kernel counters every second;
//! every scrape drains and takes the counters again and encodes what the
//! aggregator holds at that moment.

mod auth;
mod http;
mod http_message;
pub mod metrics;
#[cfg(test)]
mod test_certs;
mod tls;
pub mod web_config;
mod web_yaml;

use std::{
    net::SocketAddr,
    process::ExitCode,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use anyhow::{anyhow, Context as _};
use tokio::sync::{mpsc, watch};

pub use self::{http::wants_openmetrics, web_config::WebConfig};
use self::{
    http::{Request, Response},
    metrics::{DeviceLabels, FaultCount, Model},
};
use crate::{
    flight::{FlightOptions, Recorder},
    session::{Ending, Job, Observed, RunOptions, Session, Sink},
};

/// The model scrapes are answered from is rebuilt this often (and after
/// every job the driver runs, such as a test's injection).
const REFRESH_EVERY: Duration = Duration::from_secs(1);
/// `/healthz` fails when the model has not been refreshed for this long
/// (the driver is stuck or the ring buffer is no longer drained).
const STALE_AFTER: Duration = Duration::from_secs(5);

#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub max_devices: usize,
    /// TLS and basic auth (`--web.config.file`); plain HTTP by default.
    pub web: WebConfig,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            max_devices: metrics::DEFAULT_MAX_DEVICES,
            web: WebConfig::default(),
        }
    }
}

/// What scrapes read: the latest model, built by the driver's task (which
/// owns the session), so a scrape never waits for the session.
struct Shared {
    model: Model,
    refreshed: Instant,
    attached: usize,
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // A panic elsewhere cannot leave the model half-updated in a way that
    // matters more than losing the exporter: keep serving.
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// The metrics server as a sink of the session driver.
pub struct ServeSink {
    listener: Option<std::net::TcpListener>,
    web: WebConfig,
    labels: DeviceLabels,
    shared: Arc<Mutex<Shared>>,
    stop_http: watch::Sender<bool>,
    http: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    /// `--snapshot-dir`: the flight recorder, fed what the session observes.
    recorder: Option<Recorder>,
}

impl ServeSink {
    pub fn new(listener: std::net::TcpListener, opts: &ServeOptions) -> Self {
        Self {
            listener: Some(listener),
            web: opts.web.clone(),
            labels: DeviceLabels::new(opts.max_devices),
            shared: Arc::new(Mutex::new(Shared {
                model: Model::default(),
                refreshed: Instant::now(),
                attached: 0,
            })),
            stop_http: watch::channel(false).0,
            http: None,
            recorder: None,
        }
    }

    /// Also runs a flight recorder (`serve --snapshot-dir`).
    pub fn with_recorder(mut self, recorder: Recorder) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// Rebuilds the model from the session (the kernel's counters read now).
    pub fn refresh(&mut self, s: &mut Session) {
        let _ = s.resolve_names(&mut |_| Ok(()));
        let stats = s.refresh_counters();
        // Misuse findings: the recorder proves them at its checkpoints
        // (so its snapshots replay alike); without one, here.
        if self.recorder.is_none() {
            let _ = s.confirm_findings(stats.lost_events + stats.missed_events, &mut |_| Ok(()));
        }
        let faults: Vec<FaultCount> = s.analysis.ledger.fault_counts();
        let mut model = Model::build(
            &s.analysis.agg,
            &stats,
            &s.tracer.probes,
            &faults,
            &mut self.labels,
            s.stream,
        );
        if let Some(r) = &self.recorder {
            model.add_flight(&r.stats());
        }
        if let Some(c) = &s.analysis.checker {
            model.add_misuse(&c.stats, &mut self.labels);
        }
        if !s.gpus.identities.is_empty() || s.gpus.nvml_available() {
            let empty = crate::gpu::Sample::default();
            let sample = s.analysis.nvml_latest.as_ref().unwrap_or(&empty);
            model.add_gpus(&s.gpus.status, sample, &mut self.labels);
        }
        let mut sh = lock(&self.shared);
        sh.model = model;
        sh.refreshed = Instant::now();
        sh.attached = s.tracer.attached();
    }
}

impl Sink for ServeSink {
    fn start(
        &mut self,
        s: &mut Session,
        _jobs: &mpsc::UnboundedSender<Job<Self>>,
    ) -> anyhow::Result<()> {
        self.refresh(s);
        let listener = self
            .listener
            .take()
            .context("the metrics server was started twice")?;
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let shared = self.shared.clone();
        let handler = Arc::new(move |req: &Request| respond(&shared, req));
        self.http = Some(tokio::spawn(http::serve(
            listener,
            handler,
            self.web.clone(),
            self.stop_http.subscribe(),
        )));
        Ok(())
    }

    fn observe(&mut self, o: Observed<'_>) -> anyhow::Result<()> {
        match self.recorder.as_mut() {
            Some(r) => r.observe(&o),
            None => Ok(()),
        }
    }

    fn user_signal(&mut self, _s: &mut Session) -> anyhow::Result<()> {
        if let Some(r) = self.recorder.as_mut() {
            r.user_signal();
        }
        Ok(())
    }

    fn tick_every(&self) -> Option<Duration> {
        Some(REFRESH_EVERY)
    }

    fn tick(&mut self, s: &mut Session) -> anyhow::Result<bool> {
        if let Some(r) = self.recorder.as_mut() {
            r.tick(s)?;
        }
        self.refresh(s);
        if self.http.as_ref().is_some_and(|h| h.is_finished()) {
            anyhow::bail!("the metrics server stopped unexpectedly");
        }
        Ok(true)
    }

    fn finish(mut self, s: &mut Session, end: &Ending) -> anyhow::Result<ExitCode> {
        if let Some(r) = self.recorder.as_mut() {
            r.finish(s, end.command_status)?;
        }
        let _ = self.stop_http.send(true);
        if let Some(h) = self.http.take() {
            h.abort();
        }
        Ok(ExitCode::SUCCESS)
    }
}

fn respond(shared: &Mutex<Shared>, req: &Request) -> Response {
    match req.path.as_str() {
        "/metrics" => {
            let openmetrics = wants_openmetrics(&req.accept);
            let model = lock(shared).model.clone();
            match metrics::render(model, openmetrics) {
                Ok(body) => Response {
                    status: 200,
                    content_type: if openmetrics {
                        metrics::OPENMETRICS_CONTENT_TYPE
                    } else {
                        prometheus_client::encoding::prometheus_text::CONTENT_TYPE
                    },
                    body,
                },
                Err(_) => Response::text(500, "encoding the metrics failed\n"),
            }
        }
        "/healthz" => {
            let s = lock(shared);
            let age = s.refreshed.elapsed();
            if age > STALE_AFTER {
                Response::text(503, format!("metrics not refreshed for {age:.1?}\n"))
            } else {
                Response::text(200, format!("ok: {} probes attached\n", s.attached))
            }
        }
        "/" => Response::text(
            200,
            "gpudirect-trace: metrics at /metrics, health at /healthz\n",
        ),
        _ => Response::text(404, "not found: try /metrics or /healthz\n"),
    }
}

/// Binds the metrics listener, with one clear message when that fails.
pub fn bind(addr: SocketAddr) -> anyhow::Result<std::net::TcpListener> {
    std::net::TcpListener::bind(addr).map_err(|e| {
        use std::io::ErrorKind::*;
        let hint = match e.kind() {
            AddrInUse => format!(
                "; port {} is taken (another exporter or gpudirect-trace serve?): \
                 choose another with --listen",
                addr.port()
            ),
            AddrNotAvailable => {
                "; no interface of this host has that address: use 127.0.0.1 or one of its own"
                    .to_owned()
            }
            PermissionDenied => {
                "; ports below 1024 need CAP_NET_BIND_SERVICE: use a higher port".to_owned()
            }
            _ => String::new(),
        };
        anyhow!("cannot listen on {addr}: {e}{hint}")
    })
}

/// A metrics server on its own thread (the host tests drive its session's
/// programs from outside). Dropping it stops the server.
pub struct Server {
    addr: SocketAddr,
    jobs: mpsc::UnboundedSender<Job<ServeSink>>,
    stop: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<ExitCode>>>,
}

/// Serves `session` on `listener` from a thread of its own.
pub fn start(
    session: Session,
    listener: std::net::TcpListener,
    opts: &ServeOptions,
) -> anyhow::Result<Server> {
    let addr = listener.local_addr()?;
    let sink = ServeSink::new(listener, opts);
    let (stop, stop_rx) = watch::channel(false);
    let (jobs, jobs_rx) = mpsc::unbounded_channel();
    let driver_jobs = jobs.clone();
    let thread = std::thread::Builder::new()
        .name("gpudirect-serve".into())
        .spawn(move || {
            let opts = RunOptions {
                stop: Some(stop_rx),
                ..Default::default()
            };
            session.run_with_jobs(sink, opts, driver_jobs, jobs_rx)
        })
        .context("starting the metrics server thread")?;
    Ok(Server {
        addr,
        jobs,
        stop,
        thread: Some(thread),
    })
}

impl Server {
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Runs `f` on the served session in the driver's task, then refreshes
    /// the model scrapes see (the host tests inject events with it).
    pub fn with_session<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Session) -> R + Send + 'static,
    ) -> R {
        let (tx, rx) = std::sync::mpsc::channel();
        let job: Job<ServeSink> = Box::new(move |s, sink| {
            let r = f(s);
            crate::session::driver::drain_now(s, sink);
            sink.refresh(s);
            let _ = tx.send(r);
        });
        self.jobs
            .send(job)
            .unwrap_or_else(|_| panic!("the metrics server thread has ended"));
        rx.recv()
            .unwrap_or_else(|_| panic!("the metrics server thread has ended"))
    }

    /// Stops serving and returns the server's own error, if it had one.
    pub fn stop(mut self) -> anyhow::Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> anyhow::Result<()> {
        let _ = self.stop.send(true);
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| anyhow!("the metrics server thread panicked"))?
                .map(|_| ()),
            None => Ok(()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            log::warn!("metrics server: {e:#}");
        }
    }
}

/// `gpudirect-trace serve`: binds first (a taken port fails in
/// milliseconds), then loads the programs and serves until a signal.
pub fn run(
    listen: SocketAddr,
    start_session: impl FnOnce() -> anyhow::Result<Session>,
    opts: &ServeOptions,
    flight: Option<FlightOptions>,
) -> anyhow::Result<ExitCode> {
    let listener = bind(listen)?;
    let web = &opts.web;
    if !listen.ip().is_loopback() {
        crate::output::note(&format!(
            "note: serving on {listen} (not loopback): reachable from other hosts, {}",
            web.describe()
        ));
    }
    if web.auth.is_some() && web.tls.is_none() {
        crate::output::note(
            "note: basic auth without TLS: passwords cross the network in clear text \
             (add tls_server_config to the web config)",
        );
    }
    let session = start_session()?;
    let aggregate_only = !session.stream;
    crate::output::note(&format!(
        "serving {}://{}/metrics and /healthz ({}){}",
        web.scheme(),
        listener.local_addr()?,
        web.describe(),
        if aggregate_only {
            " (aggregate-only: no size histograms or outstanding mappings)"
        } else {
            ""
        }
    ));
    if let Some(f) = &flight {
        crate::flight::snapshot::prepare_dir(&f.dir)?;
    }
    let mut sink = ServeSink::new(listener, opts);
    if let Some(f) = flight {
        let dir = f.dir.display().to_string();
        sink = sink.with_recorder(Recorder::new(&session, f, &[])?);
        crate::output::note(&format!("flight recorder on: snapshots go to {dir}"));
    }
    session.run(sink, RunOptions::default())
}
