//! qemu's human monitor (HMP), driven by the guest: a scenario prints
//!
//! - `gdt-monitor: CMD` to have CMD run once (`pcie_aer_inject_error -c
//!   nic1 0x1`, `device_del nic1`),
//! - `gdt-monitor-repeat: N GAP_US CMD` to have it run N times, GAP_US
//!   microseconds apart (an AER storm),
//!
//! then reads a line from its console: the harness answers
//! `gdt-monitor-done N ok|error: ...` once the commands returned. This is
//! how a guest reaches what only the host can do: inject a PCIe error the
//! emulated hardware reports, pull a device out of its slot.

use std::{
    io::{BufReader, Read as _, Write as _},
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{bail, Context as _, Result};

/// The longest storm a scenario may ask for.
pub const MAX_REPEAT: u64 = 100_000;

pub struct Monitor {
    path: PathBuf,
    conn: Option<BufReader<UnixStream>>,
}

/// What the guest asked for.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    pub command: String,
    pub times: u64,
    pub gap: Duration,
}

/// The request a console line carries, if any.
pub fn request(line: &str) -> Option<Result<Request>> {
    let line = line.trim();
    if let Some(cmd) = line.strip_prefix("gdt-monitor: ") {
        return Some(Ok(Request {
            command: cmd.trim().to_owned(),
            times: 1,
            gap: Duration::ZERO,
        }));
    }
    let rest = line.strip_prefix("gdt-monitor-repeat: ")?;
    let parse = || -> Result<Request> {
        let mut it = rest.splitn(3, ' ');
        let times: u64 = it.next().unwrap_or("").parse().context("repeat count")?;
        let gap: u64 = it.next().unwrap_or("").parse().context("gap in us")?;
        let command = it.next().unwrap_or("").trim().to_owned();
        if command.is_empty() || times == 0 || times > MAX_REPEAT {
            bail!("bad repeat request {rest:?} (1..={MAX_REPEAT} times, a command)");
        }
        Ok(Request {
            command,
            times,
            gap: Duration::from_micros(gap),
        })
    };
    Some(parse())
}

impl Monitor {
    /// The monitor qemu will listen on at `path` (`-monitor
    /// unix:PATH,server=on,wait=off`).
    pub fn at(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            conn: None,
        }
    }

    pub fn qemu_arg(&self) -> String {
        format!("unix:{},server=on,wait=off", self.path.display())
    }

    fn conn(&mut self) -> Result<&mut BufReader<UnixStream>> {
        if self.conn.is_none() {
            let s = UnixStream::connect(&self.path)
                .with_context(|| format!("connecting to qemu's monitor {}", self.path.display()))?;
            s.set_read_timeout(Some(Duration::from_secs(30)))?;
            let mut r = BufReader::new(s);
            read_prompt(&mut r)?;
            self.conn = Some(r);
        }
        Ok(self.conn.as_mut().expect("connected above"))
    }

    /// Runs the request; what the monitor printed that is not its echo or
    /// prompt (an error message), if anything.
    pub fn run(&mut self, req: &Request) -> Result<String> {
        let mut said = String::new();
        for i in 0..req.times {
            let c = self.conn()?;
            c.get_mut()
                .write_all(format!("{}\n", req.command).as_bytes())?;
            let out = read_prompt(c)?;
            let out = out
                .lines()
                .filter(|l| !l.contains(req.command.as_str()) && !l.trim().is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            if !out.is_empty() && said.len() < 4096 {
                said = format!("{said}[{i}] {out} ");
            }
            if !req.gap.is_zero() {
                std::thread::sleep(req.gap);
            }
        }
        Ok(said.trim().to_owned())
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Reads until the monitor's `(qemu) ` prompt; what came before it.
fn read_prompt(r: &mut BufReader<UnixStream>) -> Result<String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"(qemu) ") {
        if r.read(&mut byte).context("reading qemu's monitor")? == 0 {
            bail!("qemu's monitor closed");
        }
        buf.push(byte[0]);
        if buf.len() > 1 << 20 {
            bail!("qemu's monitor said more than 1 MiB without a prompt");
        }
    }
    let text = String::from_utf8_lossy(&buf[..buf.len() - 7]).into_owned();
    // The monitor's line editing writes escape sequences around the echo.
    Ok(text
        .chars()
        .filter(|c| !c.is_control() || *c == '\n')
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_from_console_lines() {
        assert_eq!(
            request("gdt-monitor: device_del nic1").map(|r| r.ok()),
            Some(Some(Request {
                command: "device_del nic1".into(),
                times: 1,
                gap: Duration::ZERO
            }))
        );
        let r = request("gdt-monitor-repeat: 10000 500 pcie_aer_inject_error -c nic1 0x1")
            .expect("a request")
            .expect("well formed");
        assert_eq!((r.times, r.gap), (10000, Duration::from_micros(500)));
        assert_eq!(r.command, "pcie_aer_inject_error -c nic1 0x1");
        assert!(request("gdt-monitor-repeat: 0 5 x").is_some_and(|r| r.is_err()));
        assert!(request("gdt-monitor-repeat: 5 5").is_some_and(|r| r.is_err()));
        assert!(request("gdt-vm: booted").is_none());
    }
}
