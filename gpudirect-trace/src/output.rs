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

/// `gpudirect-trace: warning: TEXT` on stderr, errors ignored.
pub fn warn(text: &str) {
    eprintln(&format!("gpudirect-trace: warning: {text}"));
}

/// `gpudirect-trace: TEXT` on stderr (progress, what was written), errors
/// ignored.
pub fn note(text: &str) {
    eprintln(&format!("gpudirect-trace: {text}"));
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

#[cfg(test)]
mod tests {
    #[test]
    fn human_bytes() {
        assert_eq!(super::bytes(0), "0B");
        assert_eq!(super::bytes(1536), "1.5KiB");
        assert_eq!(super::bytes(64 << 20), "64.0MiB");
    }
}
