//! The programs' debug messages: what they find odd (a scatterlist walk
//! cut short, a kretprobe whose entry kept no arguments, a full map),
//! written with aya-log (gpudirect-trace-ebpf/src/debug_log.rs) and read
//! here with aya-log's reader into the `log` crate's logger, under the
//! target `ebpf`: `-v` or `RUST_LOG=debug` shows them.
//!
//! Asked for only when they would be shown (`ProgramLog::wanted`): off,
//! the programs skip the calls (the verifier drops them, as it knows the
//! flag's read-only value), so they cost nothing measurable
//! (docs/benchmarks.md, "aya-log"). On, a program is larger; a kernel whose
//! verifier refuses a program with them gets the programs without them,
//! and the user is told.

use std::sync::Arc;

use aya::Ebpf;

use super::{Tracer, TracerOptions};

/// The log target of the programs' messages (the eBPF side's
/// `debug_log::TARGET`): `RUST_LOG=ebpf=debug` shows them alone.
pub const TARGET: &str = "ebpf";

/// Where the programs' debug messages go (`TracerOptions::program_log`).
#[derive(Clone, Default)]
pub enum ProgramLog {
    /// Not asked for: the programs skip their log calls.
    #[default]
    Off,
    /// To the `log` crate's logger.
    Logger,
    /// To this logger (tests: the same records, read by aya-log).
    To(Arc<dyn log::Log>),
}

impl ProgramLog {
    /// `Logger` where the logger would show the target at debug level.
    pub fn wanted() -> Self {
        if log::log_enabled!(target: TARGET, log::Level::Debug) {
            Self::Logger
        } else {
            Self::Off
        }
    }

    fn is_on(&self) -> bool {
        !matches!(self, Self::Off)
    }
}

impl std::fmt::Debug for ProgramLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Off => "Off",
            Self::Logger => "Logger",
            Self::To(_) => "To(..)",
        })
    }
}

/// aya-log's reader of the programs' perf buffers: one task per CPU, on a
/// runtime of its own (the tracer is loaded and dropped both inside and
/// outside the session's runtime).
pub struct Reader {
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Reader {
    fn drop(&mut self) {
        // Never blocks: dropping a runtime inside another one would panic.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Loads the programs with their debug messages where `opts` asks for them,
/// and starts reading them. A program that the verifier refuses with them
/// (an older kernel's verifier, a program grown past its limits) gets the
/// whole object loaded again without them, with a warning saying so.
pub(super) fn load(
    opts: &TracerOptions,
    load_with: impl Fn(&TracerOptions, bool) -> anyhow::Result<Tracer>,
) -> anyhow::Result<Tracer> {
    if !opts.program_log.is_on() {
        return load_with(opts, false);
    }
    let (mut tracer, with_messages) = super::feature_fallback::without_where_refused(
        load_with(opts, true)?,
        "the eBPF programs' debug messages are off",
        "them",
        |_| load_with(opts, false),
    )?;
    if !with_messages {
        return Ok(tracer);
    }
    match start(&mut tracer.ebpf, &opts.program_log) {
        Ok(reader) => tracer.program_log = Some(reader),
        Err(e) => log::warn!("the eBPF programs' debug messages cannot be read: {e}"),
    }
    Ok(tracer)
}

fn start(ebpf: &mut Ebpf, to: &ProgramLog) -> Result<Reader, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("gdt-ebpf-log")
        .enable_io()
        .build()
        .map_err(|e| format!("a thread to read them: {e}"))?;
    // Its Drop shuts the runtime down, on success or not.
    let reader = Reader {
        runtime: Some(runtime),
    };
    let _inside = reader.runtime.as_ref().map(tokio::runtime::Runtime::enter);
    let started = match to {
        ProgramLog::Off => return Err("not asked for".into()),
        ProgramLog::Logger => aya_log::EbpfLogger::init(ebpf),
        ProgramLog::To(logger) => {
            aya_log::EbpfLogger::init_with_logger(ebpf, Shared(logger.clone()))
        }
    };
    started.map_err(|e| e.to_string())?;
    drop(_inside);
    Ok(reader)
}

/// A shared logger as aya-log takes one (by value).
struct Shared(Arc<dyn log::Log>);

impl log::Log for Shared {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        self.0.enabled(m)
    }

    fn log(&self, r: &log::Record<'_>) {
        self.0.log(r);
    }

    fn flush(&self) {
        self.0.flush();
    }
}

#[cfg(test)]
mod tests {
    /// The version of `package` in a Cargo.lock.
    fn locked(lock: &str, package: &str) -> Option<String> {
        let mut lines = lock.lines();
        while let Some(l) = lines.next() {
            if l == format!("name = \"{package}\"") {
                let v = lines.next()?.strip_prefix("version = \"")?;
                return Some(v.trim_end_matches('"').to_owned());
            }
        }
        None
    }

    /// The programs write aya-log-common's records (aya-log-ebpf, in the
    /// eBPF crate's own lock file) and the loader reads them (aya-log): a
    /// version apart, the argument tags may differ (0.1.15 added some in
    /// the middle of the enum).
    #[test]
    fn writer_and_reader_of_the_log_records_are_one_aya_log_common() {
        let here = env!("CARGO_MANIFEST_DIR");
        let read = |p: &str| std::fs::read_to_string(format!("{here}/{p}")).expect(p);
        let host = locked(&read("../Cargo.lock"), "aya-log-common");
        let ebpf = locked(
            &read("../gpudirect-trace-ebpf/Cargo.lock"),
            "aya-log-common",
        );
        assert!(host.is_some(), "aya-log-common in Cargo.lock");
        assert_eq!(host, ebpf);
    }
}
