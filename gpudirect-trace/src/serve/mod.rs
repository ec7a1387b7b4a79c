//! `gpudirect-trace serve`: the probes run continuously and `/metrics`
//! exposes the aggregate to Prometheus (docs/metrics.md).
//!
//! [`start`] serves an existing [`Session`] on a bound listener from its own
//! thread (the CLI and the host tests share it: the tests drive the session's
//! programs in-process). That thread drains the ring buffer when it signals,
//! every 100 ms regardless, and takes the in-kernel counters every second;
//! every scrape drains and takes the counters again and encodes what the
//! aggregator holds at that moment.

mod help;
mod http;
pub mod metrics;

use std::{
    net::SocketAddr,
    process::ExitCode,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use anyhow::{anyhow, Context as _};
use clap::Args;
use tokio::{
    signal::unix::SignalKind,
    sync::{oneshot, watch},
    time::MissedTickBehavior,
};

pub use self::http::wants_openmetrics;
use self::{
    http::{Request, Response},
    metrics::{DeviceLabels, FaultCount, Model},
};
use crate::{cli::TraceArgs, session::Session};

const DRAIN_EVERY: Duration = Duration::from_millis(100);
const COUNTERS_EVERY: Duration = Duration::from_secs(1);
/// `/healthz` fails when the ring buffer has not been drained for this long.
const STALE_AFTER: Duration = Duration::from_secs(5);

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to serve on, IP:PORT. Loopback by default; give a routable
    /// address (or 0.0.0.0) only where the network is trusted: there is no
    /// TLS or authentication.
    #[arg(long, default_value = "127.0.0.1:9435", value_name = "ADDR", value_parser = parse_listen)]
    pub listen: SocketAddr,
    /// Devices that get their own `device` label; later ones are reported
    /// as device="other" (counted in gpudirect_devices_folded_total).
    #[arg(long, default_value_t = metrics::DEFAULT_MAX_DEVICES,
          value_parser = parse_max_devices, value_name = "N")]
    pub max_devices: usize,
    #[command(flatten)]
    pub trace: TraceArgs,
}

fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    s.parse().map_err(|_| {
        format!("expected IP:PORT, such as 127.0.0.1:9435, 0.0.0.0:9435 or [::1]:9435 (got {s:?})")
    })
}

fn parse_max_devices(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=65536).contains(&n) => Ok(n),
        _ => Err("expected a number from 1 to 65536".to_owned()),
    }
}

#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub max_devices: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            max_devices: metrics::DEFAULT_MAX_DEVICES,
        }
    }
}

struct Shared {
    session: Session,
    labels: DeviceLabels,
    last_drain: Instant,
}

impl Shared {
    fn drain(&mut self) {
        self.session.pump(|_, _| {});
        self.session.poll_kmsg();
        self.last_drain = Instant::now();
    }

    fn model(&mut self) -> Model {
        self.drain();
        let stats = self.session.refresh_counters();
        let s = &self.session;
        let faults: Vec<FaultCount> = s
            .fault_counts
            .iter()
            .map(|((device, source, reason), &count)| FaultCount {
                device: device.clone(),
                source: (*source).to_owned(),
                reason: reason.clone(),
                count,
            })
            .collect();
        let (agg, probes) = (&s.agg, &s.tracer.probes);
        Model::build(agg, &stats, probes, &faults, &mut self.labels, s.stream)
    }
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // A panic elsewhere cannot leave the aggregate half-updated in a way
    // that matters more than losing the exporter: keep serving.
    shared.lock().unwrap_or_else(|e| e.into_inner())
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

/// A running metrics server. Dropping it stops the server.
pub struct Server {
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    stop: watch::Sender<bool>,
    done: Option<oneshot::Receiver<()>>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

/// Serves `session` on `listener` from a thread of its own.
pub fn start(
    session: Session,
    listener: std::net::TcpListener,
    opts: &ServeOptions,
) -> anyhow::Result<Server> {
    let addr = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    let shared = Arc::new(Mutex::new(Shared {
        session,
        labels: DeviceLabels::new(opts.max_devices),
        last_drain: Instant::now(),
    }));
    let (stop, stop_rx) = watch::channel(false);
    let (done_tx, done) = oneshot::channel();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let thread_shared = shared.clone();
    let thread = std::thread::Builder::new()
        .name("gpudirect-serve".into())
        .spawn(move || {
            let _done = done_tx;
            rt.block_on(run_server(thread_shared, listener, stop_rx))
        })
        .context("starting the metrics server thread")?;
    Ok(Server {
        addr,
        shared,
        stop,
        done: Some(done),
        thread: Some(thread),
    })
}

impl Server {
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Runs `f` on the served session (the host tests inject events with it).
    pub fn with_session<R>(&self, f: impl FnOnce(&mut Session) -> R) -> R {
        f(&mut lock(&self.shared).session)
    }

    /// Resolves when the server thread has ended on its own (an error).
    pub async fn ended(&mut self) {
        if let Some(done) = self.done.as_mut() {
            let _ = done.await;
        }
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
                .map_err(|_| anyhow!("the metrics server thread panicked"))?,
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

async fn run_server(
    shared: Arc<Mutex<Shared>>,
    listener: std::net::TcpListener,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let ready = lock(&shared).session.ring_ready()?;
    let handler_shared = shared.clone();
    let handler = Arc::new(move |req: &Request| respond(&handler_shared, req));
    let http = tokio::spawn(http::serve(listener, handler, stop.clone()));
    let mut drain = tokio::time::interval(DRAIN_EVERY);
    drain.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut counters = tokio::time::interval(COUNTERS_EVERY);
    counters.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            guard = ready.readable() => {
                let mut guard = guard?;
                lock(&shared).drain();
                guard.clear_ready();
            }
            _ = drain.tick() => lock(&shared).drain(),
            _ = counters.tick() => {
                let mut s = lock(&shared);
                s.drain();
                s.session.refresh_counters();
            }
            _ = stop.changed() => break,
        }
    }
    http.await
        .map_err(|e| anyhow!("metrics server task: {e}"))?
        .context("metrics server")
}

fn respond(shared: &Mutex<Shared>, req: &Request) -> Response {
    match req.path.as_str() {
        "/metrics" => {
            let openmetrics = wants_openmetrics(&req.accept);
            let model = lock(shared).model();
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
            let age = s.last_drain.elapsed();
            let attached = s.session.tracer.attached();
            if age > STALE_AFTER {
                Response::text(503, format!("ring buffer not drained for {age:.1?}\n"))
            } else {
                Response::text(200, format!("ok: {attached} probes attached\n"))
            }
        }
        "/" => Response::text(
            200,
            "gpudirect-trace: metrics at /metrics, health at /healthz\n",
        ),
        _ => Response::text(404, "not found: try /metrics or /healthz\n"),
    }
}

/// `gpudirect-trace serve`.
pub fn run(args: &ServeArgs) -> anyhow::Result<ExitCode> {
    // Bind before loading the programs: a taken port fails in milliseconds.
    let listener = bind(args.listen)?;
    if !args.listen.ip().is_loopback() {
        crate::output::note(&format!(
            "note: serving on {} (not loopback): reachable from other hosts, without TLS or \
             authentication",
            args.listen
        ));
    }
    let session = Session::start(&args.trace)?;
    let opts = ServeOptions {
        max_devices: args.max_devices,
    };
    let mut server = start(session, listener, &opts)?;
    crate::output::note(&format!(
        "serving http://{}/metrics and /healthz{}",
        server.local_addr(),
        if args.trace.aggregate_only {
            " (aggregate-only: no size histograms or outstanding mappings)"
        } else {
            ""
        }
    ));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let ended_early = rt.block_on(async {
        let mut term = tokio::signal::unix::signal(SignalKind::terminate())?;
        anyhow::Ok(tokio::select! {
            _ = tokio::signal::ctrl_c() => false,
            _ = term.recv() => false,
            _ = server.ended() => true,
        })
    })?;
    server.stop()?;
    if ended_early {
        anyhow::bail!("the metrics server stopped unexpectedly");
    }
    Ok(ExitCode::SUCCESS)
}
