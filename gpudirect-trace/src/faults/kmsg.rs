//! Kernel log input shapes and the /dev/kmsg readers.
//!
//! Accepted line shapes (all reduce to a message body plus optional time):
//! - `dmesg`:            `[  123.456789] DMAR: ...`
//! - `dmesg -r`, /proc/kmsg: the same after a syslog priority `<4>`
//! - `dmesg -T`:         `[Fri Aug 29 20:09:52 2025] pcieport ...`
//! - `dmesg --time-format iso`: `2025-08-29T20:09:52,123456+00:00 DMAR: ...`
//! - `journalctl -k`:    `Nov 30 02:44:52 host kernel: DMAR: ...`
//!   (also syslog files, with or without a printk timestamp after `kernel:`)
//! - /dev/kmsg records:  `6,1234,5678901,-;DMAR: ...` (third field is the
//!   monotonic time in microseconds; Documentation/ABI/testing/dev-kmsg)
//! - `CONFIG_PRINTK_CALLER` (`[    T123]`) and vendor `[pid:...,cpu0,...]`
//!   tags after the timestamp are skipped.
//! - `journalctl -o json` objects are made `dmesg` lines before they reach
//!   here (`journal_json`).

use std::{
    fs::{File, OpenOptions},
    io::{self, Read, Seek, SeekFrom},
    os::unix::fs::OpenOptionsExt,
    path::Path,
};

use super::{Decoder, Fault};

/// A line split into its time prefix and message body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineMeta<'a> {
    pub timestamp_ns: Option<u64>,
    pub wall_time: Option<String>,
    pub body: &'a str,
}

/// Split the known prefixes off one log line.
pub fn split_prefix(line: &str) -> LineMeta<'_> {
    let mut s = strip_priority(line.trim_end_matches(['\n', '\r']));
    let mut meta = LineMeta {
        timestamp_ns: None,
        wall_time: None,
        body: s,
    };
    if let Some((ts_us, rest)) = kmsg_record_prefix(s) {
        meta.timestamp_ns = Some(ts_us.saturating_mul(1000));
        meta.body = rest;
        return meta;
    }
    // journalctl / syslog: "<date> <host> kernel: ..." (the "kernel:" tag
    // sits within the first columns; a message body never starts that way).
    if !s.starts_with('[') {
        if let Some(idx) = s.find("kernel: ") {
            if idx < 96 {
                let head = s[..idx].trim();
                if let Some((date, _host)) = head.rsplit_once(' ') {
                    meta.wall_time = Some(date.trim().to_string());
                }
                s = &s[idx + "kernel: ".len()..];
            }
        } else if let Some((iso, rest)) = iso_time_prefix(s) {
            meta.wall_time = Some(iso.to_string());
            s = rest;
        }
    }
    loop {
        let t = s.trim_start();
        if let Some(rest) = t.strip_prefix("kernel: ") {
            s = rest;
            continue;
        }
        // `journalctl -o short-monotonic`: "[  1.000000] host kernel: ..."
        if let Some(idx) = t.find(" kernel: ") {
            if idx < 64 && !t[..idx].contains(' ') && !t.starts_with('[') {
                s = &t[idx + " kernel: ".len()..];
                continue;
            }
        }
        if let Some(rest) = strip_dmesg_x(t) {
            s = rest;
            continue;
        }
        if !t.starts_with('[') {
            s = t;
            break;
        }
        let Some(close) = t.find(']') else {
            s = t;
            break;
        };
        let inner = t[1..close].trim();
        if let Some(ns) = printk_seconds(inner) {
            meta.timestamp_ns = Some(ns);
        } else if is_wall_clock(inner) {
            meta.wall_time = Some(inner.to_string());
        } else if !(is_caller_id(inner) || inner.starts_with("pid:")) {
            // A bracket that is part of the message (e.g. "[fault reason").
            s = t;
            break;
        }
        s = &t[close + 1..];
    }
    meta.body = s.trim_start();
    meta
}

/// `dmesg -r`, /proc/kmsg and serial console captures: the syslog
/// priority `<N>` (facility * 8 + level, at most 3 digits) before the rest
/// ("<4>[ 3.1] msg" -> "[ 3.1] msg"). Left there, it hid the printk time.
fn strip_priority(s: &str) -> &str {
    let Some(rest) = s.strip_prefix('<') else {
        return s;
    };
    match rest.split_once('>') {
        Some((n, body)) if (1..=3).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_digit()) => {
            body
        }
        _ => s,
    }
}

/// `dmesg --time-format iso`: "2025-08-29T20:09:52,123456+00:00 msg" ->
/// ("2025-08-29T20:09:52,123456+00:00", "msg"): a first word shaped as an
/// ISO 8601 date and time (no host or "kernel:" tag follows it).
fn iso_time_prefix(s: &str) -> Option<(&str, &str)> {
    let (word, rest) = s.split_once(' ')?;
    let b = word.as_bytes();
    let shape = b"dddd-dd-ddTdd:dd:dd";
    let fits = b.len() >= shape.len()
        && shape.iter().zip(b).all(|(&want, &got)| match want {
            b'd' => got.is_ascii_digit(),
            c => got == c,
        });
    fits.then_some((word, rest))
}

/// `dmesg -x`: "kern  :err   : [  1.0] msg" -> "[  1.0] msg".
fn strip_dmesg_x(t: &str) -> Option<&str> {
    const FACILITIES: [&str; 12] = [
        "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron",
        "authpriv", "ftp",
    ];
    const LEVELS: [&str; 8] = [
        "emerg", "alert", "crit", "err", "warn", "notice", "info", "debug",
    ];
    let (fac, rest) = t.split_once(':')?;
    let (lvl, rest) = rest.split_once(':')?;
    (FACILITIES.contains(&fac.trim()) && LEVELS.contains(&lvl.trim())).then_some(rest)
}

/// `6,1234,5678901,-;msg` -> (5678901, "msg").
fn kmsg_record_prefix(s: &str) -> Option<(u64, &str)> {
    let (head, rest) = s.split_once(';')?;
    let mut it = head.split(',');
    let prio = it.next()?;
    let seq = it.next()?;
    let ts = it.next()?;
    let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
    if !(digits(prio) && digits(seq) && digits(ts)) {
        return None;
    }
    Some((ts.parse().ok()?, rest))
}

/// `  123.456789` -> nanoseconds.
fn printk_seconds(inner: &str) -> Option<u64> {
    let (secs, frac) = inner.split_once('.')?;
    if secs.is_empty()
        || frac.is_empty()
        || frac.len() > 9
        || !secs.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let secs: u64 = secs.parse().ok()?;
    let frac_ns: u64 = frac.parse::<u64>().ok()? * 10u64.pow(9 - frac.len() as u32);
    Some(secs * 1_000_000_000 + frac_ns)
}

fn is_wall_clock(inner: &str) -> bool {
    // "Fri Aug 29 20:09:52 2025" or an ISO time "2025-08-29T20:09:52,123+0000".
    inner.contains(':')
        && inner.bytes().any(|b| b.is_ascii_digit())
        && (inner.contains(' ') || inner.contains('T'))
        && inner.len() <= 40
}

fn is_caller_id(inner: &str) -> bool {
    // CONFIG_PRINTK_CALLER: "T123" (task) or "C3" (CPU).
    let mut b = inner.bytes();
    matches!(b.next(), Some(b'T') | Some(b'C')) && inner.len() > 1 && b.all(|c| c.is_ascii_digit())
}

/// Turn one /dev/kmsg record into text lines for the decoder: the header is
/// kept (so the timestamp survives), `\xNN` escapes are undone, an embedded
/// newline becomes a second line with the same header, and the dictionary
/// continuation lines (` KEY=value`) are dropped.
pub fn record_to_lines(record: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(record);
    let mut lines = text.split('\n');
    let Some(first) = lines.next() else {
        return Vec::new();
    };
    let Some((header, msg)) = first.split_once(';') else {
        return Vec::new();
    };
    unescape_kmsg(msg)
        .split('\n')
        .filter(|m| !m.is_empty())
        .map(|m| format!("{header};{m}"))
        .collect()
}

/// Undoes the kernel's `\xNN` escaping of /dev/kmsg text (it escapes bytes
/// below 0x20, from 0x7f, and the backslash) so UTF-8 names and embedded
/// newlines come back, but never re-creates a control character: `\x1b`
/// stays the four characters `\x1b` (the kernel escaped an ESC so that no
/// reader writes it raw to a terminal; an Xid's process name is chosen by
/// any user). Only the newline is decoded among the controls (it splits a
/// record into lines); C1 characters that a decoded UTF-8 sequence forms
/// are escaped again by `sanitize::text`.
fn unescape_kmsg(msg: &str) -> String {
    let b = msg.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && b.get(i + 1) == Some(&b'x') {
            let hex = msg.get(i + 2..i + 4);
            if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                let control = v < 0x20 && v != b'\n' || v == 0x7f;
                if !control {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    let text = String::from_utf8_lossy(&out);
    text.split('\n')
        .map(|l| crate::sanitize::text(l).into_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

const KMSG_PATH: &str = "/dev/kmsg";
/// Larger than any printk record (the kernel answers EINVAL to a read into a
/// buffer smaller than the next record).
const RECORD_BUF: usize = 64 * 1024;

fn open_nonblocking(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

/// Read the records currently in the kernel buffer (non-blocking: EAGAIN ends
/// it) as text lines. Returns the lines and the number of records that were
/// overwritten while reading (EPIPE).
pub fn read_kmsg_snapshot() -> io::Result<(Vec<String>, u64)> {
    let mut file = open_nonblocking(Path::new(KMSG_PATH))?;
    let mut lines = Vec::new();
    let mut lost = 0;
    let mut buf = vec![0u8; RECORD_BUF];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => lines.extend(record_to_lines(&buf[..n])),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => lost += 1,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok((lines, lost))
}

/// Follows /dev/kmsg from "now" (SEEK_END at open) and yields new fault
/// records each time [`KmsgFollower::poll`] is called (the live view calls it
/// on a timer). Never blocks.
pub struct KmsgFollower {
    file: File,
    decoder: Decoder,
    buf: Vec<u8>,
    /// Records overwritten in the ring buffer before we could read them
    /// (each EPIPE from read(2) counts one gap).
    pub lost_records: u64,
}

impl KmsgFollower {
    pub fn open() -> io::Result<Self> {
        Self::open_path(Path::new(KMSG_PATH))
    }

    pub fn open_path(path: &Path) -> io::Result<Self> {
        let mut file = open_nonblocking(path)?;
        file.seek(SeekFrom::End(0))?;
        Ok(KmsgFollower {
            file,
            decoder: Decoder::new(),
            buf: vec![0u8; RECORD_BUF],
            lost_records: 0,
        })
    }

    /// Read every record available now and return the faults completed.
    /// A multi-line report whose last line was the newest record stays in the
    /// decoder until the next call; if a call finds no new record at all, the
    /// pending report is closed and returned (the kernel writes one report's
    /// lines together, so one idle tick means it is complete).
    pub fn poll(&mut self) -> io::Result<Vec<Fault>> {
        let mut out = Vec::new();
        let mut read_any = false;
        loop {
            match self.file.read(&mut self.buf) {
                Ok(0) => break,
                Ok(n) => {
                    read_any = true;
                    for line in record_to_lines(&self.buf[..n]) {
                        out.extend(self.decoder.feed(&line));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => self.lost_records += 1,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        if !read_any {
            out.extend(self.decoder.finish());
        }
        Ok(out)
    }

    /// Emit whatever multi-line report is still pending.
    pub fn flush(&mut self) -> Vec<Fault> {
        self.decoder.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (shape, line, monotonic ns, wall time, body).
    type Shape = (
        &'static str,
        &'static str,
        Option<u64>,
        Option<&'static str>,
        &'static str,
    );

    /// Every accepted line shape of the module comment, split. Mismatches
    /// are gathered so a failure names each shape that broke.
    #[test]
    fn every_prefix_shape_splits_into_its_time_and_body() {
        #[rustfmt::skip]
        let cases: &[Shape] = &[
            ("dmesg", "[  144.480641] DMAR: [DMA Read] x", Some(144_480_641_000), None, "DMAR: [DMA Read] x"),
            ("/dev/kmsg record, time in microseconds", "3,1234,5678901,-;DMAR: x", Some(5_678_901_000), None, "DMAR: x"),
            ("journalctl -k", "Nov 29 11:28:11 zeus kernel: NVRM: Xid (PCI:0000:c1:00): 31", None, Some("Nov 29 11:28:11"), "NVRM: Xid (PCI:0000:c1:00): 31"),
            ("syslog with a printk time", "Sep 23 18:37:03 xxx kernel: [   34.193759] NVRM: Xid (PCI:0000:01:00): 79", Some(34_193_759_000), Some("Sep 23 18:37:03"), "NVRM: Xid (PCI:0000:01:00): 79"),
            ("kernel: tag, no date", "kernel: [   13.134460] AMD-Vi: Event logged [", Some(13_134_460_000), None, "AMD-Vi: Event logged ["),
            ("dmesg -T", "[Fri Aug 29 20:09:52 2025] pcieport 0000:00:1d.3: AER: x", None, Some("Fri Aug 29 20:09:52 2025"), "pcieport 0000:00:1d.3: AER: x"),
            ("vendor tag", "[    7.471032] [pid:134,cpu0,irq/13-arm-smmu]arm-smmu-v3 x: y", Some(7_471_032_000), None, "arm-smmu-v3 x: y"),
            ("CONFIG_PRINTK_CALLER", "[    1.000000][    T1] DMAR: x", Some(1_000_000_000), None, "DMAR: x"),
            ("kernel: after the time", "[    0.938401] kernel: DMAR: [DMA Read NO_PASID] x", Some(938_401_000), None, "DMAR: [DMA Read NO_PASID] x"),
            ("short monotonic with a host", "[   34.193759] myhost kernel: NVRM: Xid (PCI:0000:01:00): 79", Some(34_193_759_000), None, "NVRM: Xid (PCI:0000:01:00): 79"),
            ("dmesg -x", "kern  :err   : [  144.480641] DMAR: x", Some(144_480_641_000), None, "DMAR: x"),
            ("dmesg -r", "<4>[  144.480641] DMAR: x", Some(144_480_641_000), None, "DMAR: x"),
            ("dmesg --time-format iso", "2025-08-29T20:09:52,123456+00:00 DMAR: x", None, Some("2025-08-29T20:09:52,123456+00:00"), "DMAR: x"),
            ("journalctl -o short-iso", "2025-08-29T20:09:52+0000 zeus kernel: DMAR: x", None, Some("2025-08-29T20:09:52+0000"), "DMAR: x"),
            ("/proc/kmsg, no time", "<3>NVRM: Xid (PCI:0000:01:00): 79", None, None, "NVRM: Xid (PCI:0000:01:00): 79"),
            ("a body's own angle brackets are kept", "<unknown> DMAR: x", None, None, "<unknown> DMAR: x"),
            ("a message's own brackets are kept", "[fault reason 06] PTE Read access is not set", None, None, "[fault reason 06] PTE Read access is not set"),
        ];
        let wrong: Vec<String> = cases
            .iter()
            .filter_map(|&(shape, line, ts, wall, body)| {
                let want = LineMeta {
                    timestamp_ns: ts,
                    wall_time: wall.map(str::to_owned),
                    body,
                };
                let got = split_prefix(line);
                (got != want).then(|| format!("{shape}: {got:?}, want {want:?}"))
            })
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn kmsg_escapes_never_become_raw_control_characters() {
        // What the kernel writes for `printk("NVRM: Xid ... name=\e]0;x\a\xc2\x9b")`
        // with a UTF-8 name: controls stay escaped, UTF-8 comes back, the
        // C1 CSI it encodes is escaped again.
        let rec = b"3,9,100,-;NVRM: Xid (PCI:0000:01:00): 31, pid=7, name=\\x1b]0;x\\x07caf\\xc3\\xa9\\xc2\\x9b\\x5c\\x7f";
        let lines = record_to_lines(rec);
        assert_eq!(lines.len(), 1);
        let l = &lines[0];
        assert!(!l.chars().any(crate::sanitize::is_control), "{l:?}");
        assert!(l.ends_with("name=\\x1b]0;x\\x07café\\x9b\\\\x7f"), "{l:?}");
    }

    #[test]
    fn records_unescape_and_drop_dictionary() {
        let rec = b"3,7,100,-;DMAR:[DMA Read] a \\x0aDMAR:[fault reason 06] b\n SUBSYSTEM=pci\n";
        let lines = record_to_lines(rec);
        assert_eq!(
            lines,
            vec![
                "3,7,100,-;DMAR:[DMA Read] a ".to_string(),
                "3,7,100,-;DMAR:[fault reason 06] b".to_string()
            ]
        );
    }

    /// Writes one marker fault line into the kernel log and expects the
    /// follower to return it. Opt-in (`GPUDIRECT_TRACE_KMSG_SELFTEST=1`,
    /// `--ignored`): only on a disposable machine, never on a shared host.
    #[test]
    #[ignore = "writes to /dev/kmsg; run on a disposable machine"]
    fn follower_sees_new_record() {
        // Asked for by name (--ignored) but not confirmed: fail, not pass.
        assert!(
            std::env::var_os("GPUDIRECT_TRACE_KMSG_SELFTEST").is_some(),
            "writes to the kernel log: set GPUDIRECT_TRACE_KMSG_SELFTEST=1 to confirm this \
             machine is disposable"
        );
        let mut f = KmsgFollower::open().expect("open /dev/kmsg");
        assert!(
            f.poll().expect("poll").is_empty(),
            "SEEK_END: old records skipped"
        );
        let marker = "<3>NVRM: Xid (PCI:0000:ff:1f): 999, gpudirect-trace kmsg selftest\n";
        std::fs::OpenOptions::new()
            .write(true)
            .open(KMSG_PATH)
            .and_then(|mut w| std::io::Write::write_all(&mut w, marker.as_bytes()))
            .expect("write /dev/kmsg");
        let got = f.poll().expect("poll");
        assert_eq!(got.len(), 1, "{got:#?}");
        assert_eq!(got[0].xid, Some(999));
        assert_eq!(got[0].device.as_deref(), Some("0000:ff:1f.0"));
        assert!(got[0].timestamp_ns.is_some());
        let (lines, _) = read_kmsg_snapshot().expect("snapshot");
        assert!(lines
            .iter()
            .any(|l| l.contains("gpudirect-trace kmsg selftest")));
    }
}
