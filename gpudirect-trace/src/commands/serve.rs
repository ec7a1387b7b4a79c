//! `gpudirect-trace serve`.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode};

use clap::Args;

use super::{
    flight::{parse_size, FlightArgs},
    trace::TraceArgs,
};
use crate::{
    serve::{self, metrics, ServeOptions, WebConfig},
    session::Session,
};

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to serve on, IP:PORT. Loopback by default; give a routable
    /// address (or 0.0.0.0) only where the network is trusted, or with
    /// --web.config.file (TLS, client certificates, basic auth).
    #[arg(long, default_value = "127.0.0.1:9435", value_name = "ADDR", value_parser = parse_listen)]
    pub listen: SocketAddr,
    /// TLS, client certificates and basic auth, in the web configuration
    /// file Prometheus' exporters take (tls_server_config,
    /// basic_auth_users with bcrypt hashes; docs/metrics.md).
    #[arg(
        long = "web.config.file",
        alias = "web-config-file",
        value_name = "FILE"
    )]
    pub web_config_file: Option<PathBuf>,
    /// Devices that get their own `device` label; later ones are reported
    /// as device="other" (counted in gpudirect_devices_folded_total).
    #[arg(long, default_value_t = metrics::DEFAULT_MAX_DEVICES,
          value_parser = parse_max_devices, value_name = "N")]
    pub max_devices: usize,
    #[command(flatten)]
    pub trace: TraceArgs,
    /// Run the flight recorder too: keep the last minutes in memory (--ring)
    /// and write a snapshot into DIR (created 0700; it must be this user's,
    /// writable by no one else, not a symlink) when a trigger fires.
    #[arg(long, value_name = "DIR", requires = "ring")]
    pub snapshot_dir: Option<PathBuf>,
    /// The snapshots in --snapshot-dir may take this much disk (e.g. 10GiB,
    /// blocks used); the oldest are deleted first. Only snapshots this tool
    /// wrote there (DIR/.gdt-snapshots) are counted or deleted.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "snapshot_dir")]
    pub snapshot_max_bytes: Option<u64>,
    /// Keep at most this many snapshots in --snapshot-dir; the oldest are
    /// deleted first (only this tool's, as for --snapshot-max-bytes).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..),
          requires = "snapshot_dir")]
    pub snapshot_max_count: Option<u64>,
    /// Delete this tool's snapshots in --snapshot-dir once they are older
    /// than this (7d, 12h; checked at each snapshot and once a minute).
    #[arg(long, value_name = "AGE", value_parser = parse_age, requires = "snapshot_dir")]
    pub snapshot_max_age: Option<std::time::Duration>,
    #[command(flatten)]
    pub flight: FlightArgs,
}

fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    s.parse().map_err(|_| {
        format!("expected IP:PORT, such as 127.0.0.1:9435, 0.0.0.0:9435 or [::1]:9435 (got {s:?})")
    })
}

fn parse_age(s: &str) -> Result<std::time::Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if d >= std::time::Duration::from_secs(1) => Ok(d),
        Ok(_) => Err("expected at least 1s".to_owned()),
        Err(e) => Err(format!("{e} (examples: 12h, 7d, 30min)")),
    }
}

fn parse_max_devices(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=65536).contains(&n) => Ok(n),
        _ => Err("expected a number from 1 to 65536".to_owned()),
    }
}

pub fn exec(args: &ServeArgs) -> anyhow::Result<ExitCode> {
    // Read and checked before anything else: a mistake in it is one message
    // and a non-zero exit, before a port is taken or a program loaded.
    let web = match &args.web_config_file {
        Some(path) => WebConfig::load(path)?,
        None => WebConfig::default(),
    };
    let opts = ServeOptions {
        max_devices: args.max_devices,
        web,
    };
    if args.flight.ring.is_some() && args.snapshot_dir.is_none() {
        anyhow::bail!("serve --ring needs --snapshot-dir DIR: where snapshots go");
    }
    let flight = args.snapshot_dir.as_ref().and_then(|dir| {
        args.flight.options(
            dir.clone(),
            false,
            crate::flight::snapshot::Retention {
                max_bytes: args.snapshot_max_bytes,
                max_count: args.snapshot_max_count,
                max_age: args.snapshot_max_age,
            },
        )
    });
    // A directory that cannot be used (another user's, writable by
    // others, a link) is said before the programs are loaded.
    if let Some(f) = &flight {
        crate::flight::snapshot::prepare_dir(&f.dir)?;
    }
    let session_opts = args.trace.session_options();
    serve::run(args.listen, || Session::start(&session_opts), &opts, flight)
}
