//! Writing to stdout and stderr without panicking when the reader goes away
//! (`gpudirect-trace live | head`, `record ... 2>&1 | head -1`): a closed
//! stdout ends the command cleanly; a closed stderr loses the message but
//! never the command (`eprintln!` panics with exit 101 there, which hid the
//! exit status of `record -- CMD`).

use std::io::{self, Write as _};

/// Marker error: stdout was closed by the reader.
#[derive(Debug)]
pub struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stdout closed")
    }
}

impl std::error::Error for StdoutClosed {}

pub fn write(text: &str) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(e) => Err(e.into()),
    }
}

/// `value` as one line of JSON, serialized straight to stdout (a large
/// document is never held as a string).
pub fn json_line(value: &impl serde::Serialize) -> anyhow::Result<()> {
    let mut out = io::BufWriter::with_capacity(1 << 16, io::stdout().lock());
    let result = serde_json::to_writer(&mut out, value)
        .map_err(io::Error::from)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    match result {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(e) => Err(e.into()),
    }
}

pub fn line(text: &str) -> anyhow::Result<()> {
    write(&format!("{text}\n"))
}

/// Writes `text` to stderr as it is; any error (EPIPE: nobody reads stderr
/// any more) is ignored.
pub fn eprint(text: &str) {
    let mut err = io::stderr().lock();
    let _ = err.write_all(text.as_bytes()).and_then(|()| err.flush());
}

/// `text` and a newline to stderr, errors ignored.
pub fn eprintln(text: &str) {
    eprint(&format!("{text}\n"));
}

/// One line on stderr, prefixed `gpudirect-trace: `. Never panics: a closed
/// or full stderr (`... 2>&1 | head -1`) loses the line, not the recording.
pub fn note(msg: &str) {
    // Notes carry file names, device names and kernel strings: no control
    // character of theirs reaches the terminal (a file name with ESC[2J
    // cleared it in "wrote ... to NAME" before; issue 30). Our own line
    // breaks stay.
    let msg = crate::sanitize::multiline(msg);
    let mut err = io::stderr().lock();
    let _ = writeln!(err, "gpudirect-trace: {msg}");
}

/// `note` with `warning: `.
pub fn warn(msg: &str) {
    note(&format!("warning: {msg}"));
}

/// One note per `--device` value that matched no device of the trace:
/// `filters` as resolved (bus ids), `typed` as the user gave them, one for
/// one (`--device nvme0n1 (0000:00:04.0) matched no device`).
pub fn warn_unmatched(filters: &[String], typed: &[String], seen: &[String]) {
    for (i, f) in filters.iter().enumerate() {
        if !seen.iter().any(|d| d == f) {
            let f = match typed.get(i).map(|t| t.trim()) {
                Some(t) if t != f => format!("{t} ({f})"),
                _ => f.clone(),
            };
            // A value as typed (a script may pass on what it was given): its
            // line feeds must not start lines of their own.
            let f = crate::sanitize::text(&f);
            let list = if seen.is_empty() {
                "none".to_owned()
            } else {
                seen.join(", ")
            };
            warn(&format!(
                "--device {f} matched no device of this trace (devices seen: {list})"
            ));
        }
    }
}

/// `note(n)` when `n` is not 0, else nothing: the optional tail of a
/// summary line (`, 3 undecodable`), left out when there is nothing to say.
pub fn tail_if_any(n: u64, note: impl FnOnce(u64) -> String) -> String {
    if n > 0 {
        note(n)
    } else {
        String::new()
    }
}

/// 1234 -> "1.2us".
pub fn ns(v: u64) -> String {
    match v {
        0..=999 => format!("{v}ns"),
        1_000..=999_999 => format!("{:.1}us", v as f64 / 1e3),
        1_000_000..=999_999_999 => format!("{:.1}ms", v as f64 / 1e6),
        _ => format!("{:.2}s", v as f64 / 1e9),
    }
}

/// 1536 -> "1.5KiB".
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n}B")
    } else {
        format!("{v:.1}{}", UNITS[u])
    }
}

/// A saturating sum: totals of values read from trace files, which may be
/// crafted to overflow any plain `sum()`.
pub fn sum(values: impl IntoIterator<Item = u64>) -> u64 {
    values.into_iter().fold(0u64, u64::saturating_add)
}

/// `n` and the noun, plural but for one ("1 host", "2 hosts").
pub fn counted(count: u64, noun: &str) -> String {
    match count {
        1 => format!("1 {noun}"),
        _ => format!("{count} {noun}s"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn human_bytes() {
        assert_eq!(super::bytes(0), "0B");
        assert_eq!(super::bytes(1536), "1.5KiB");
        assert_eq!(super::bytes(64 << 20), "64.0MiB");
    }
}
