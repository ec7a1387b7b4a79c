//! `gpudirect-trace record`.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::Args;

use super::{
    flight::FlightArgs,
    trace::{parse_duration, OutputFlags, TraceArgs},
    usage,
};
use crate::{
    flight::{FlightSink, Recorder},
    record::{create_output, RecordOptions, RecordSink},
    session::{RunOptions, Session},
};

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Trace file to write (created with mode 0600; `-`: standard output,
    /// never a terminal); with --ring, the directory snapshots go to
    /// (created 0700 if missing; it must be this user's and writable by no
    /// one else).
    #[arg(short = 'o', long = "output", value_name = "FILE|DIR")]
    pub output: PathBuf,
    /// Stop after this long (default: until Ctrl-C, SIGTERM, SIGHUP or
    /// CMD's exit).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    #[command(flatten)]
    pub out: OutputFlags,
    /// At the end, print the session's summary on stdout as `live --json`'s
    /// final object (the same devices, incidents and faults `report --json`
    /// of the file gives).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub trace: TraceArgs,
    #[command(flatten)]
    pub flight: FlightArgs,
    /// Command to run while recording; recording ends when it exits and
    /// gpudirect-trace exits with its status. If the recording ends first,
    /// the command gets SIGTERM, then SIGKILL.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub fn exec(args: &RecordArgs) -> anyhow::Result<ExitCode> {
    // Before anything is created: a SIGTERM in the first second left a
    // 0-byte trace or a temporary file behind (issue 30).
    crate::session::stop_signals::install()?;
    let run = RunOptions {
        deadline: args.duration,
        command: args.command.clone(),
        ..Default::default()
    };
    let flight = args.flight.options(
        args.output.clone(),
        !args.command.is_empty(),
        Default::default(),
    );
    let to_stdout = crate::outfile::is_stdout(&args.output);
    if to_stdout && flight.is_some() {
        return Err(usage(
            "record",
            "with --ring, -o names the directory snapshots go to: - cannot hold them",
        ));
    }
    if to_stdout && args.json {
        return Err(usage(
            "record",
            "-o - and --json both want standard output: give -o a file name",
        ));
    }
    if let Some(cmd) = args.command.first() {
        runnable(cmd)?;
    }
    if let Some(opts) = flight {
        crate::flight::snapshot::prepare_dir(&opts.dir)?;
        let session = Session::start(&args.trace.session_options())?;
        if let Some(code) = stopped_before_start(None) {
            return Ok(code);
        }
        let recorder = Recorder::new(&session, opts, &args.command)?;
        return session.run(FlightSink::new(recorder, args.json), run);
    }
    // The generic "give the path of a file" would leave the user wondering
    // why -o says FILE|DIR.
    anyhow::ensure!(
        !args.output.is_dir(),
        "{} is a directory: record writes one trace file (-o FILE); a directory takes the \
         flight recorder's snapshots (--ring)",
        crate::outfile::display(&args.output)
    );
    let output = create_output(
        &args.output,
        crate::outfile::Options::from(args.out).binary(),
    )?;
    // A failed start drops `output`: the old file (with --force), a device
    // node or a link's target stay untouched; only our new file goes. The
    // output is committed once the traced command has started and the
    // header is on disk (`record --force -o old.gdt -- /nonexistent`
    // replaced old.gdt with a header-only trace before).
    let session = Session::start(&args.trace.session_options())?;
    let output = match crate::session::stop_signals::pending() {
        Some(_) => return Ok(stopped_before_start(Some(output)).unwrap_or(ExitCode::FAILURE)),
        None => output,
    };
    let opts = RecordOptions {
        output: args.output.clone(),
        json: args.json,
        command: args.command.clone(),
    };
    let sink = RecordSink::create_pending(&session, opts, output)?;
    session.run(sink, run)
}

/// A mistyped CMD is said before the probes load (seconds on a large
/// kernel), not after. As execvp(3) looks: a name with a `/` is a path,
/// another is looked for in PATH. Only a sure failure is refused here (no
/// such file, a directory, no execute bit anywhere); anything else is left
/// to the spawn, which says why it failed.
fn runnable(cmd: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let runs = |m: &std::fs::Metadata| m.is_file() && m.permissions().mode() & 0o111 != 0;
    let executable = |p: &std::path::Path| std::fs::metadata(p).is_ok_and(|m| runs(&m));
    if cmd.contains('/') {
        let why = match std::fs::metadata(cmd) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => e.to_string(),
            Ok(m) if m.is_dir() => "is a directory".to_string(),
            Ok(m) if m.is_file() && !runs(&m) => {
                format!(
                    "not executable (mode {:o})",
                    m.permissions().mode() & 0o7777
                )
            }
            _ => return Ok(()),
        };
        anyhow::bail!("cannot run {cmd}: {why}");
    }
    let Some(search) = std::env::var_os("PATH") else {
        return Ok(());
    };
    // An empty PATH entry is the current directory, as execvp takes it.
    let found = std::env::split_paths(&search).any(|dir| {
        let dir = if dir.as_os_str().is_empty() {
            std::path::PathBuf::from(".")
        } else {
            dir
        };
        executable(&dir.join(cmd))
    });
    anyhow::ensure!(
        found,
        "cannot run {cmd}: no executable of that name in PATH"
    );
    Ok(())
}

/// A stop signal that came while the session was starting: nothing was
/// recorded and nothing is left; the exit status says which signal.
fn stopped_before_start(output: Option<crate::outfile::Output>) -> Option<ExitCode> {
    let (name, sig) = crate::session::stop_signals::pending()?;
    let kept = match &output {
        Some(o) if o.replaces_existing() => "; the old file is as it was",
        _ => "",
    };
    // Dropped uncommitted: our new file (or --force's temporary) goes.
    drop(output);
    crate::output::note(&format!(
        "{name} before the recording started: nothing recorded{kept}"
    ));
    Some(ExitCode::from(u8::try_from(128 + sig).unwrap_or(1)))
}
