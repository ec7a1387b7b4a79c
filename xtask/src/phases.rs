//! Wall-clock stamps for the phases of a long run (`cargo xtask test`).
//!
//! CI gives a stop 90 minutes and the full run took 49 to 69 minutes on the
//! same 2-core host from one lease to the next. Without stamps the only way
//! to say which phase grew was to subtract figures scattered through the
//! log; with them each phase prints when it starts and how long it took, and
//! a table at the end (printed on failure too) says where the time went.
//! Each stamp also says how much disk is left: a CI machine once ran out in
//! the VM phase, and the log then showed only tar's "No space left".

use std::{
    ffi::CString,
    os::unix::ffi::OsStrExt as _,
    path::Path,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

pub struct Phases {
    started: Instant,
    done: Vec<(&'static str, Duration, bool, Option<u64>)>,
}

impl Phases {
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            done: Vec::new(),
        }
    }

    /// Runs one phase, stamping its start and end on stderr.
    pub fn run<T>(
        &mut self,
        name: &'static str,
        phase: impl FnOnce() -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        eprintln!(
            "xtask: phase {name}: started {} UTC (+{}), {}",
            utc_clock(SystemTime::now()),
            minutes(self.started.elapsed()),
            free_here(free_bytes(Path::new(".")))
        );
        let began = Instant::now();
        let result = phase();
        let took = began.elapsed();
        let free = free_bytes(Path::new("."));
        let outcome = if result.is_ok() { "done" } else { "FAILED" };
        eprintln!(
            "xtask: phase {name}: {outcome} in {}, {}",
            minutes(took),
            free_here(free)
        );
        self.done.push((name, took, result.is_ok(), free));
        result
    }

    /// The table of phases so far, one line each, and the total.
    pub fn summary(&self) -> String {
        let mut out = String::from("xtask: phases\n");
        for (name, took, ok, free) in &self.done {
            let mark = if *ok { "" } else { "  FAILED" };
            let line = format!(
                "  {name:<10} {:>9}  {:<24}{mark}",
                minutes(*took),
                free_here(*free)
            );
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out.push_str(&format!(
            "  {:<10} {:>9}\n",
            "total",
            minutes(self.started.elapsed())
        ));
        out
    }
}

/// Bytes an unprivileged writer may still use on the filesystem holding
/// `path` (statvfs's f_bavail: root's reserve is not counted on, so the
/// figure errs low); None where statvfs fails.
pub fn free_bytes(path: &Path) -> Option<u64> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes only into `st`, which is plain old data, and
    // reads the NUL-terminated path `c` keeps alive for the call.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    // The fields are u64 on 64-bit Linux and narrower on some 32-bit targets.
    #[allow(clippy::useless_conversion)]
    let (avail, frsize) = (u64::from(st.f_bavail), u64::from(st.f_frsize));
    Some(avail.saturating_mul(frsize))
}

/// `7.1 GiB free on disk`, or that it could not be read.
pub fn free_here(free: Option<u64>) -> String {
    match free {
        Some(b) => format!("{} free on disk", gib(b)),
        None => "free disk unknown".into(),
    }
}

/// `7.1 GiB`: a tenth of a GiB is the grain that matters for a build.
pub fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// `12m05s`: whole seconds are precise enough for phases of minutes.
fn minutes(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}m{:02}s", s / 60, s % 60)
}

/// `HH:MM:SS` of the day in UTC, without a date crate: the log's other
/// lines (cargo, the VM pool) carry no date either, and CI runs within a day.
fn utc_clock(t: SystemTime) -> String {
    let s = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_and_durations_read_as_people_write_them() {
        let t = UNIX_EPOCH + Duration::from_secs(86_400 * 3 + 13 * 3600 + 5 * 60 + 9);
        assert_eq!(utc_clock(t), "13:05:09");
        assert_eq!(minutes(Duration::from_secs(4031)), "67m11s");
        assert_eq!(minutes(Duration::from_millis(999)), "0m00s");
        assert_eq!(gib(7_623_000_000), "7.1 GiB");
        assert_eq!(free_here(None), "free disk unknown");
    }

    #[test]
    fn free_disk_is_read_for_a_real_directory_and_not_for_a_missing_one() {
        assert!(free_bytes(Path::new("/")).is_some());
        assert!(free_bytes(Path::new("/no/such/dir/gdt")).is_none());
    }

    #[test]
    fn a_failed_phase_is_marked_and_its_error_returned() {
        let mut p = Phases::new();
        assert_eq!(p.run("fmt", || Ok(7)).expect("an Ok phase"), 7);
        let err = p.run("clippy", || -> anyhow::Result<()> { anyhow::bail!("boom") });
        assert!(err.is_err());
        let table = p.summary();
        assert!(table.contains("fmt"), "{table}");
        assert!(table.lines().all(|l| l == l.trim_end()), "{table:?}");
        assert!(
            table
                .lines()
                .any(|l| l.contains("clippy") && l.ends_with("FAILED")),
            "{table}"
        );
        assert!(
            table.lines().last().is_some_and(|l| l.contains("total")),
            "{table}"
        );
    }
}
