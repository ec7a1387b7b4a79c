//! `gpudirect-trace explain`: decode kernel log text offline into faults with
//! explanations.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    io::{self, BufRead},
    path::PathBuf,
    process::ExitCode,
};

use anyhow::Context as _;
use serde::Serialize;

use super::{
    kmsg,
    lines::{BoundedLines, MAX_LINE},
    xid, Decoder, Fault, Source,
};
use crate::{output, sanitize};

/// What `explain` reads and how it answers.
#[derive(Clone, Debug, Default)]
pub struct ExplainOptions {
    /// A kernel log file, `-` for stdin, None for /dev/kmsg now.
    pub input: Option<PathBuf>,
    /// JSON `{"faults":[...],"summary":{...}}` instead of text.
    pub json: bool,
}

/// Fault records listed at most; later ones are counted in the summary only
/// (an endless or crafted log must not grow memory without bound).
pub const MAX_LISTED: usize = 10_000;
/// Bytes of listed fault records at most (their raw lines dominate).
pub const MAX_LISTED_BYTES: usize = 32 << 20;
/// Distinct devices and causes in the summary; more fold into one entry.
pub const MAX_SUMMARY_KEYS: usize = 1024;
const OTHER: &str = "(other)";

/// Counts per device and cause.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Summary {
    /// Faults represented, counting rate-limited ones ("callbacks suppressed").
    pub total: u64,
    /// Decoded fault objects.
    pub records: usize,
    pub partial: usize,
    /// Messages the kernel suppressed by rate limiting (details lost).
    pub suppressed: u64,
    pub lines_read: usize,
    /// Lines longer than the limit (`lines::MAX_LINE`); only their head was decoded.
    pub lines_truncated: u64,
    /// Decoded records beyond the listing limit: counted here, not listed.
    pub records_not_listed: usize,
    /// /dev/kmsg records overwritten while reading (input from /dev/kmsg only).
    pub kmsg_lost_records: u64,
    pub by_source: BTreeMap<String, u64>,
    pub by_device: BTreeMap<String, u64>,
    pub causes: Vec<CauseCount>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CauseCount {
    pub source: Source,
    pub device: Option<String>,
    pub reason_code: Option<u32>,
    pub cause: String,
    pub count: u64,
    pub first_ns: Option<u64>,
    pub last_ns: Option<u64>,
}

/// Decode a whole log text.
pub fn decode_text(text: &str) -> Vec<Fault> {
    Decoder::decode_all(text.lines())
}

/// The cause label faults are grouped by: Xid details (addresses, channels)
/// vary per line, so Xids group by number.
pub fn cause_label(f: &Fault) -> String {
    match (f.source, f.xid) {
        (Source::NvidiaXid, Some(x)) => match xid::lookup(x) {
            Some((meaning, _)) => format!("Xid {x}: {meaning}"),
            None => format!("Xid {x}"),
        },
        _ => f.reason.clone(),
    }
}

type CauseKey = (Source, Option<String>, Option<u32>, String);

/// Faults decoded line by line into a bounded listing and a summary.
#[derive(Default)]
pub struct Collector {
    decoder: Decoder,
    faults: Vec<Fault>,
    listed_bytes: usize,
    summary: Summary,
    causes: BTreeMap<CauseKey, CauseCount>,
}

fn weight(f: &Fault) -> usize {
    256 + f.raw.len()
        + f.explanation.len()
        + f.reason.len()
        + f.flags.iter().map(String::len).sum::<usize>()
}

impl Collector {
    pub fn feed_line(&mut self, line: &str) {
        self.summary.lines_read += 1;
        for f in self.decoder.feed(line) {
            self.add(f);
        }
    }

    pub fn add(&mut self, f: Fault) {
        let s = &mut self.summary;
        s.records += 1;
        s.total += f.count;
        s.partial += usize::from(f.partial);
        if f.flags.iter().any(|x| x == super::SUPPRESSED_FLAG) {
            s.suppressed += f.count;
        }
        *s.by_source
            .entry(f.source.as_str().to_string())
            .or_default() += f.count;
        let mut dev = f.device.clone().unwrap_or_else(|| "(unknown)".to_string());
        if s.by_device.len() >= MAX_SUMMARY_KEYS && !s.by_device.contains_key(&dev) {
            dev = OTHER.to_string();
        }
        *s.by_device.entry(dev).or_default() += f.count;
        let mut key = (f.source, f.device.clone(), f.reason_code, cause_label(&f));
        if self.causes.len() >= MAX_SUMMARY_KEYS && !self.causes.contains_key(&key) {
            key = (f.source, None, None, format!("{OTHER} causes"));
        }
        let c = self
            .causes
            .entry(key.clone())
            .or_insert_with(|| CauseCount {
                source: key.0,
                device: key.1,
                reason_code: key.2,
                cause: key.3,
                count: 0,
                first_ns: f.timestamp_ns,
                last_ns: f.timestamp_ns,
            });
        c.count += f.count;
        c.first_ns = min_opt(c.first_ns, f.timestamp_ns);
        c.last_ns = c.last_ns.max(f.timestamp_ns);
        let w = weight(&f);
        if self.faults.len() < MAX_LISTED && self.listed_bytes + w <= MAX_LISTED_BYTES {
            self.listed_bytes += w;
            self.faults.push(f);
        } else {
            s.records_not_listed += 1;
        }
    }

    /// The listed faults and the summary of all of them.
    pub fn finish(mut self) -> (Vec<Fault>, Summary) {
        for f in self.decoder.finish() {
            self.add(f);
        }
        let mut s = self.summary;
        s.causes = self.causes.into_values().collect();
        s.causes
            .sort_by(|a, b| b.count.cmp(&a.count).then(a.cause.cmp(&b.cause)));
        (self.faults, s)
    }
}

pub fn summarize(faults: &[Fault], lines_read: usize, kmsg_lost: u64) -> Summary {
    let mut c = Collector::default();
    for f in faults {
        c.add(f.clone());
    }
    let (_, mut s) = c.finish();
    s.lines_read = lines_read;
    s.kmsg_lost_records = kmsg_lost;
    s
}

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

#[derive(Serialize)]
struct Report<'a> {
    faults: &'a [Fault],
    summary: &'a Summary,
}

/// `src` as log text: a compressed log (logrotate's `kern.log.2.gz`, a
/// `.zst`) through its decompressor, a systemd journal file refused with
/// what to run instead; anything else as it is. Found by the first bytes,
/// whatever the name (stdin too).
pub(crate) fn log_text<'a>(mut src: impl BufRead + 'a) -> io::Result<Box<dyn BufRead + 'a>> {
    const BUF: usize = 1 << 16;
    let head = src.fill_buf()?;
    if head.starts_with(&[0x1f, 0x8b]) {
        let gz = flate2::bufread::MultiGzDecoder::new(src);
        return Ok(Box::new(io::BufReader::with_capacity(BUF, gz)));
    }
    if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        let zst = zstd::stream::read::Decoder::with_buffer(src)?;
        return Ok(Box::new(io::BufReader::with_capacity(BUF, zst)));
    }
    if head.starts_with(b"LPKSHHRH") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a systemd journal file, not log text: decode it with \
             `journalctl --file FILE -k -o short-monotonic | gpudirect-trace explain -`",
        ));
    }
    Ok(Box::new(src))
}

/// Decodes `src` line by line (bounded: `lines::MAX_LINE`, `MAX_LISTED`);
/// compressed input is decompressed first (`log_text`).
pub fn collect_from<R: BufRead>(src: R) -> io::Result<(Vec<Fault>, Summary)> {
    let mut lines = BoundedLines::text(log_text(src)?, MAX_LINE);
    let mut c = Collector::default();
    while let Some(line) = lines.next_line()? {
        c.feed_line(&line);
    }
    let (faults, mut s) = c.finish();
    s.lines_truncated = lines.truncated;
    Ok((faults, s))
}

pub fn run_explain(args: &ExplainOptions) -> anyhow::Result<ExitCode> {
    let (faults, summary) = match args.input.as_deref() {
        Some(p) if p.as_os_str() == "-" => {
            collect_from(io::stdin().lock()).context("cannot read standard input")?
        }
        Some(p) => {
            let f =
                std::fs::File::open(p).with_context(|| format!("cannot read {}", p.display()))?;
            collect_from(io::BufReader::with_capacity(1 << 16, f))
                .with_context(|| format!("cannot read {}", p.display()))?
        }
        None => {
            let (lines, lost) = kmsg::read_kmsg_snapshot().context(
                "cannot read /dev/kmsg (needs CAP_SYSLOG or kernel.dmesg_restrict=0); \
                 pass a file, e.g. `dmesg > log.txt; gpudirect-trace explain log.txt`",
            )?;
            let mut c = Collector::default();
            for l in &lines {
                c.feed_line(l);
            }
            let (faults, mut s) = c.finish();
            s.kmsg_lost_records = lost;
            (faults, s)
        }
    };
    let result = if args.json {
        serde_json::to_string_pretty(&Report {
            faults: &faults,
            summary: &summary,
        })
        .map_err(anyhow::Error::from)
        .and_then(|j| output::line(&j))
    } else {
        // Log text is untrusted: no control character reaches the terminal.
        output::write(&sanitize::multiline(&render_text(&faults, &summary)))
    };
    match result {
        Err(e) if e.is::<output::StdoutClosed>() => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e),
        Ok(()) => Ok(ExitCode::SUCCESS),
    }
}

fn fmt_ts(ns: Option<u64>) -> String {
    match ns {
        Some(ns) => format!("{}.{:06}s", ns / 1_000_000_000, (ns % 1_000_000_000) / 1000),
        None => "-".to_string(),
    }
}

fn wrap(out: &mut String, indent: &str, text: &str, width: usize) {
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent.len() + line.len() + 1 + word.len() > width {
            let _ = writeln!(out, "{indent}{line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        let _ = writeln!(out, "{indent}{line}");
    }
}

/// Human report: summary first, then one block per fault.
pub fn render_text(faults: &[Fault], s: &Summary) -> String {
    let mut out = String::new();
    if faults.is_empty() {
        let _ = writeln!(
            out,
            "No DMA/IOMMU/GPU/PCIe fault lines found in {} lines.",
            s.lines_read
        );
        if s.kmsg_lost_records > 0 {
            let _ = writeln!(
                out,
                "({} /dev/kmsg records were overwritten while reading.)",
                s.kmsg_lost_records
            );
        }
        return out;
    }
    let _ = writeln!(
        out,
        "{} fault(s) in {} record(s) from {} line(s); {} partially decoded; {} suppressed by rate limiting.",
        s.total, s.records, s.lines_read, s.partial, s.suppressed
    );
    if s.records_not_listed > 0 {
        let _ = writeln!(
            out,
            "Only the first {} records are listed below; {} more are counted in the summary.",
            faults.len(),
            s.records_not_listed
        );
    }
    if s.lines_truncated > 0 {
        let _ = writeln!(
            out,
            "{} line(s) over {} KiB: only their first {} KiB were decoded.",
            s.lines_truncated,
            MAX_LINE >> 10,
            MAX_LINE >> 10
        );
    }
    if s.kmsg_lost_records > 0 {
        let _ = writeln!(
            out,
            "{} /dev/kmsg records were overwritten while reading.",
            s.kmsg_lost_records
        );
    }
    let _ = writeln!(out, "\nBy device:");
    for (dev, n) in &s.by_device {
        let _ = writeln!(out, "  {dev:<14} {n}");
    }
    let _ = writeln!(out, "\nBy cause:");
    for c in &s.causes {
        let dev = c.device.as_deref().unwrap_or("(unknown)");
        let _ = writeln!(
            out,
            "  {:>5}  {:<10} {:<14} {}",
            c.count,
            c.source.as_str(),
            dev,
            c.cause
        );
    }
    for (i, f) in faults.iter().enumerate() {
        let _ = writeln!(out);
        let dev = f.device.as_deref().unwrap_or("(unknown device)");
        let partial = if f.partial { "  [partial]" } else { "" };
        let when = match (&f.timestamp_ns, &f.wall_time) {
            (Some(_), _) => fmt_ts(f.timestamp_ns),
            (None, Some(w)) => w.clone(),
            (None, None) => "-".to_string(),
        };
        let _ = writeln!(
            out,
            "[{}] {} {}  at {}{}",
            i + 1,
            f.source.as_str(),
            dev,
            when,
            partial
        );
        let code = f
            .reason_code
            .map(|c| format!(" (code {c:#x})"))
            .unwrap_or_default();
        let _ = writeln!(out, "    cause:    {}{}", f.reason, code);
        if f.count > 1 {
            let _ = writeln!(out, "    count:    {}", f.count);
        }
        if f.address.is_some() || f.access.is_some() || f.pasid.is_some() {
            let addr = f
                .address
                .map(|a| format!("{a:#x}"))
                .unwrap_or_else(|| "-".into());
            let acc = f
                .access
                .map(|a| format!("{a:?}").to_lowercase())
                .unwrap_or_else(|| "-".into());
            let pasid = f
                .pasid
                .map(|p| format!("{p:#x}"))
                .unwrap_or_else(|| "-".into());
            let _ = writeln!(out, "    address:  {addr}  access: {acc}  pasid: {pasid}");
            let mapping = f.mapping.as_ref().map_or_else(
                || "unknown (only a trace sees the map/unmap history)".to_string(),
                ToString::to_string,
            );
            let _ = writeln!(out, "    mapping:  {mapping}");
        }
        if let Some(p) = &f.process {
            let _ = writeln!(out, "    process:  {p}");
        }
        if !f.flags.is_empty() {
            let _ = writeln!(out, "    details:  {}", f.flags.join("; "));
        }
        if !f.explanation.is_empty() {
            let _ = writeln!(out, "    meaning:");
            wrap(&mut out, "      ", &f.explanation, 100);
        }
        for (n, l) in f.raw.lines().enumerate() {
            let tag = if n == 0 {
                "    log:      "
            } else {
                "              "
            };
            let _ = writeln!(out, "{tag}{}", l.trim());
        }
    }
    out
}

#[cfg(test)]
#[path = "explain_tests.rs"]
mod tests;
