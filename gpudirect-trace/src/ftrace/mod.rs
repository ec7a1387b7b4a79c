//! `gpudirect-trace import`: ftrace text (the tracefs `trace` file,
//! `trace-cmd report`, `perf script`) of the dma:*, iommu:* and swiotlb:*
//! tracepoints into a trace file, which `report`, `export` and the HTML
//! page then read as they read a recording. For hosts where nothing may be
//! loaded into the kernel (lockdown, no BPF) but tracefs is there: the
//! same tables, lifetimes and outstanding mappings from what the kernel's
//! own tracepoints printed.
//!
//! The file has no wall clock, host name or kernel release: ftrace's clock
//! (`local`, the default, counts from boot like CLOCK_MONOTONIC) is kept as
//! it is, so times line up with the same boot's kernel log.

mod body;
mod events;
mod line;

use std::{
    borrow::Cow,
    collections::{BTreeMap, HashMap},
    io::{self, BufRead, Write},
};

use anyhow::{bail, Context as _};
use gpudirect_trace_common::{flags, kind, Event, SgEvent};
use serde::Serialize;

use self::{
    events::Parsed,
    line::{EventLine, Line},
};
use crate::{
    aggregate::{ProcName, UNATTRIBUTED},
    decode::Record,
    faults::lines::BoundedLines,
    memory_budget::{self, Keeper},
    output::counted,
    tracefile::{format::MAX_DEVICE_NAME, writer::FOLDED_DEVICES, End, Header, Loss, TraceWriter},
};

/// A scatterlist of 4096 entries prints three lists of ~12-byte numbers;
/// the kernel's print buffer cuts it long before this.
const MAX_LINE: usize = 1 << 20;
/// Event names listed apart in the summary; the rest are one count.
const MAX_NAMES: usize = 64;
/// What a remembered dma_map_sg costs the budget (key, value, table).
const SG_BYTES: usize = 96;
/// What a device's name and id cost the budget.
const DEVICE_BYTES: usize = MAX_DEVICE_NAME + 64;
/// The longest process or event name kept (comm is 16 bytes, 64 for
/// some kernels' threads; event names are shorter).
const MAX_NAME: usize = 64;
/// What a remembered process name costs the budget.
const NAME_BYTES: usize = MAX_NAME + 64;

/// What an import read and wrote.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ImportStats {
    pub lines: u64,
    /// Events written to the trace file.
    pub events: u64,
    pub devices: usize,
    /// Events of tracepoints this importer does not read, by name.
    pub other_events: BTreeMap<String, u64>,
    /// Lines that are not ftrace text (neither event, comment nor loss).
    pub not_ftrace: u64,
    /// Events of a known tracepoint whose body could not be read.
    pub unreadable: u64,
    /// The first of them, `name: body` cut to 160 bytes and escaped: what
    /// the user needs to see why (a trace option that prints another form).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_unreadable: Option<String>,
    /// The text's header says the `latency-format` trace option printed it:
    /// its lines have no CPU column and times in microseconds since the
    /// trace began, which this importer does not read.
    pub latency_format: bool,
    /// Lines longer than 1 MiB (their tail was not read).
    pub long_lines: u64,
    /// Events the kernel said it dropped (`[LOST N EVENTS]`) or overwrote
    /// before the file was read (`entries-in-buffer/entries-written`).
    pub lost: u64,
    /// dma_unmap_sg events whose map was not in the file (or not kept):
    /// their DMA address is taken to be the first physical address (true
    /// without an IOMMU) and their size is not known.
    pub unmap_sg_unpaired: u64,
    /// Process names not kept for the reader's memory budget.
    pub names_dropped: u64,
    pub first_ns: u64,
    pub last_ns: u64,
}

impl ImportStats {
    fn other(&mut self, name: &str) {
        let key = clipped(name, MAX_NAME);
        if let Some(n) = self.other_events.get_mut(key.as_ref()) {
            *n += 1;
            return;
        }
        let key = if self.other_events.len() >= MAX_NAMES {
            "(other names)".to_owned()
        } else {
            key.into_owned()
        };
        *self.other_events.entry(key).or_default() += 1;
    }
}

/// A name from the text as the file and the terminal get it: at most
/// `max` bytes (ftrace's are short; a crafted line's may be 1 MiB), control
/// bytes escaped.
fn clipped(s: &str, max: usize) -> Cow<'_, str> {
    crate::sanitize::text(crate::sanitize::cut(s, max))
}

/// At most `max` bytes of `s`, cut at a character's boundary, borrowed
/// where it was.
fn prefix(s: Cow<'_, str>, max: usize) -> Cow<'_, str> {
    match s {
        Cow::Borrowed(b) => Cow::Borrowed(crate::sanitize::cut(b, max)),
        Cow::Owned(mut o) => {
            o.truncate(crate::sanitize::cut(&o, max).len());
            Cow::Owned(o)
        }
    }
}

/// The importer's state between lines.
struct Importer<W: Write> {
    writer: Option<TraceWriter<W>>,
    out: Option<W>,
    source: String,
    stats: ImportStats,
    /// Devices by name: the `dev` of their records (0 is no device).
    devices: HashMap<String, u64>,
    /// dma_map_sg by device and first physical address: what its unmap,
    /// which prints only physical addresses, unmaps.
    sg_maps: HashMap<(u64, u64), (u64, u64)>,
    names: HashMap<u32, String>,
    /// Losses seen before the first event (the header's clock is the first
    /// event's).
    early_losses: u64,
}

/// Reads ftrace text from `src` (gzip or zstd too) and writes the trace
/// file to `out`. `source` names the input in the file's header.
pub fn import<R: BufRead, W: Write>(
    src: R,
    out: W,
    source: &str,
) -> anyhow::Result<(W, ImportStats)> {
    memory_budget::limit_reader();
    let mut lines = BoundedLines::text(crate::faults::explain::log_text(src)?, MAX_LINE);
    let mut im = Importer {
        writer: None,
        out: Some(out),
        source: source.to_owned(),
        stats: ImportStats::default(),
        devices: HashMap::new(),
        sg_maps: HashMap::new(),
        names: HashMap::new(),
        early_losses: 0,
    };
    while let Some(text) = lines.next_line()? {
        im.stats.lines += 1;
        im.line(&text)?;
    }
    im.stats.long_lines = lines.truncated;
    let Some(mut writer) = im.writer.take() else {
        bail!("{}", nothing_read(&im.source, &im.stats));
    };
    let s = &mut im.stats;
    s.devices = im.devices.len();
    writer.flush()?;
    let out = writer.finish(&End {
        ts_ns: s.last_ns,
        events_written: s.events,
        lost_total: s.lost,
        exit_status: None,
    })?;
    Ok((out, im.stats))
}

impl<W: Write> Importer<W> {
    fn line(&mut self, text: &str) -> anyhow::Result<()> {
        match line::parse(text) {
            None => self.stats.not_ftrace += 1,
            Some(Line::Comment) => {
                // print_trace_header()'s first line and the latency help
                // header's column line, in the kernel's latency-format.
                if text.contains("latency trace v") || text.contains("|||||| time") {
                    self.stats.latency_format = true;
                }
            }
            Some(Line::Entries { in_buffer, written }) => {
                self.lose(written.saturating_sub(in_buffer))?;
            }
            Some(Line::Lost { events }) => self.lose(events.unwrap_or(1))?,
            Some(Line::Event(e)) => self.event(&e)?,
        }
        Ok(())
    }

    fn lose(&mut self, n: u64) -> anyhow::Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.stats.lost = self.stats.lost.saturating_add(n);
        match self.writer.as_mut() {
            Some(w) => w.loss(&Loss {
                ts_ns: self.stats.last_ns,
                lost: n,
                total: self.stats.lost,
            })?,
            None => self.early_losses = self.early_losses.saturating_add(n),
        }
        Ok(())
    }

    fn event(&mut self, e: &EventLine<'_>) -> anyhow::Result<()> {
        let base = Event {
            ts_ns: e.ts_ns,
            pid: e.tgid.unwrap_or(e.tid),
            tid: e.tid,
            flags: if e.in_interrupt {
                flags::IN_INTERRUPT
            } else {
                0
            },
            ..Default::default()
        };
        let (mut record, device, unmap_sg) = match events::parse(e.name, e.body, base) {
            Err(()) => {
                let s = &mut self.stats;
                s.unreadable += 1;
                if s.first_unreadable.is_none() {
                    // The body cut before it is joined: the line may be 1 MiB.
                    let body = crate::sanitize::cut(e.body, 160);
                    s.first_unreadable =
                        Some(clipped(&format!("{}: {body}", e.name), 160).into_owned());
                }
                return Ok(());
            }
            Ok(None) => {
                self.stats.other(e.name);
                return Ok(());
            }
            Ok(Some(Parsed::Record { record, device })) => (record, device, None),
            Ok(Some(Parsed::UnmapSg {
                event,
                device,
                first_phys,
                phys_whole,
            })) => (Record::Sg(event), device, Some((first_phys, phys_whole))),
        };
        let (dev, device) = self.place(device);
        match &mut record {
            Record::Event(ev) => ev.dev = dev,
            Record::Sg(sg) => {
                sg.event.dev = dev;
                if let Some((first_phys, phys_whole)) = unmap_sg {
                    self.unmap_sg(sg, first_phys, phys_whole);
                } else if sg.event.kind == kind::DMA_MAP_SG
                    && sg.event.phys != 0
                    && memory_budget::take_or_drop(Keeper::Mappings, SG_BYTES)
                {
                    let key = (dev, sg.event.phys);
                    let value = (sg.event.addr, sg.event.size);
                    if self.sg_maps.insert(key, value).is_some() {
                        memory_budget::give(Keeper::Mappings, SG_BYTES);
                    }
                }
            }
            Record::Xid(x) => x.event.dev = dev,
        }
        self.name(e)?;
        let w = self.writer(e.ts_ns)?;
        w.push(&record, &device)?;
        let s = &mut self.stats;
        s.events += 1;
        s.last_ns = s.last_ns.max(e.ts_ns);
        Ok(())
    }

    /// A dma_unmap_sg's DMA address and size: its map's, found by the
    /// device and the list's first physical address.
    fn unmap_sg(&mut self, sg: &mut SgEvent, first_phys: u64, phys_whole: bool) {
        match self.sg_maps.remove(&(sg.event.dev, first_phys)) {
            Some((dma, size)) => {
                memory_budget::give(Keeper::Mappings, SG_BYTES);
                sg.event.addr = dma;
                sg.event.size = size;
            }
            None => {
                self.stats.unmap_sg_unpaired += 1;
                sg.event.addr = first_phys;
            }
        }
        if !phys_whole {
            sg.event.flags |= flags::SG_TRUNCATED;
        }
    }

    /// The device's `dev` (1, 2, ... by first appearance; 0 for none) and
    /// the name the file gives it: as the recorder would (control bytes
    /// escaped, at most the format's name length), and past the reader's
    /// memory budget the file's folded row, as the writer folds past its
    /// table.
    ///
    /// Allocates only for a new device or a name with control bytes: this
    /// runs once per event.
    fn place<'a>(&mut self, raw: &'a str) -> (u64, Cow<'a, str>) {
        let escaped = crate::sanitize::text(raw);
        if escaped == UNATTRIBUTED {
            return (0, escaped);
        }
        let name = prefix(escaped, MAX_DEVICE_NAME);
        if let Some(&dev) = self.devices.get(name.as_ref()) {
            return (dev, name);
        }
        if !memory_budget::take_or_drop(Keeper::Devices, DEVICE_BYTES) {
            return (u64::MAX, Cow::Borrowed(FOLDED_DEVICES));
        }
        let dev = self.devices.len() as u64 + 1;
        self.devices.insert(name.clone().into_owned(), dev);
        (dev, name)
    }

    /// The process's name into the file when it is new or has changed
    /// (exec), as `record` writes the names it learns.
    fn name(&mut self, e: &EventLine<'_>) -> anyhow::Result<()> {
        let pid = e.tgid.unwrap_or(e.tid);
        let comm = clipped(e.comm, MAX_NAME);
        if self.names.get(&pid).is_some_and(|n| *n == comm) {
            return Ok(());
        }
        let comm = comm.into_owned();
        if !self.names.contains_key(&pid) && !memory_budget::take_or_drop(Keeper::Rows, NAME_BYTES)
        {
            self.stats.names_dropped += 1;
            return Ok(());
        }
        self.names.insert(pid, comm.clone());
        let w = self.writer(e.ts_ns)?;
        w.names(&[ProcName {
            pid,
            comm: Some(comm),
            container: None,
        }])?;
        Ok(())
    }

    /// The writer, created at the first event: its time is the file's start.
    fn writer(&mut self, first_ns: u64) -> anyhow::Result<&mut TraceWriter<W>> {
        if self.writer.is_none() {
            let header = Header {
                hostname: format!("(ftrace text: {})", self.source),
                clock: "CLOCK_MONOTONIC".to_owned(),
                tool_version: env!("CARGO_PKG_VERSION").to_owned(),
                start_ts_ns: first_ns,
                ..Default::default()
            };
            let out = self.out.take().expect("the output is taken once");
            let mut w = TraceWriter::new(out, &header).context("writing the trace file")?;
            self.stats.first_ns = first_ns;
            self.stats.last_ns = first_ns;
            if self.early_losses > 0 {
                w.loss(&Loss {
                    ts_ns: first_ns,
                    lost: self.early_losses,
                    total: self.early_losses,
                })?;
            }
            self.writer = Some(w);
        }
        Ok(self.writer.as_mut().expect("created above"))
    }
}

/// `err`, from opening `path` as a trace file, with what to run when the
/// file is ftrace text (`report trace.txt` would say only "not a
/// recording").
pub fn with_import_hint(path: &std::path::Path, err: anyhow::Error) -> anyhow::Error {
    // A FIFO's bytes are the reader's: only a regular file is read again.
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return err;
    }
    let mut head = vec![0u8; 8192];
    let n = std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
        .unwrap_or(0);
    head.truncate(n);
    let text = String::from_utf8_lossy(&head);
    let ftrace = text.starts_with("# tracer:")
        || text
            .lines()
            .take(32)
            .any(|l| matches!(line::parse(l), Some(Line::Event(_))));
    if !ftrace {
        return err;
    }
    let p = crate::outfile::display(path);
    anyhow::anyhow!(
        "{p} is ftrace text, not a recording: convert it with `gpudirect-trace import {p} -o \
         trace.gdt`, then read trace.gdt"
    )
}

/// Why a text gave no event, and what to do: the trace option that printed
/// another form where the text shows one, else how to capture the events.
fn nothing_read(source: &str, s: &ImportStats) -> String {
    let head = format!(
        "no events of the dma, iommu or swiotlb tracepoints could be read from {source} ({}, {} \
         not ftrace text",
        counted(s.lines, "line"),
        s.not_ftrace
    );
    const OPTIONS: &str = "/sys/kernel/tracing/trace_options";
    if s.latency_format {
        return format!(
            "{head}): it was printed with the `latency-format` trace option (no CPU column, \
             microseconds since the trace began), which import does not read: `echo \
             nolatency-format > {OPTIONS}`, then read the trace file again (reading `trace` \
             leaves the events in the ring)"
        );
    }
    if let Some(first) = &s.first_unreadable {
        return format!(
            "{head}, {} with a body that could not be read, the first `{first}`): import reads \
             the bodies as the events' print formats or the `fields` option write them; the \
             `raw`, `hex` and `bin` trace options print other forms (`echo noraw > {OPTIONS}`, \
             and so on), \
             and a body cut by an editor or a pager cannot be read either",
            counted(s.unreadable, "event")
        );
    }
    format!(
        "{head}): enable them with `echo 1 > /sys/kernel/tracing/events/dma/enable` (and \
         events/iommu, events/swiotlb), run the workload, then read /sys/kernel/tracing/trace"
    )
}

/// The summary `import` prints on standard error.
pub fn summary(stats: &ImportStats, output: &str) -> String {
    let mut s = format!(
        "imported {} of {} ({}) into {output}",
        counted(stats.events, "event"),
        counted(stats.devices as u64, "device"),
        counted(stats.lines, "line")
    );
    let span = stats.last_ns.saturating_sub(stats.first_ns) as f64 / 1e9;
    s.push_str(&format!(", {span:.3} s of trace\n"));
    if stats.lost > 0 {
        s.push_str(&format!(
            "  {} lost by the kernel's ring before the text was read (shown as losses)\n",
            counted(stats.lost, "event")
        ));
    }
    if !stats.other_events.is_empty() {
        let list: Vec<String> = stats
            .other_events
            .iter()
            .map(|(n, c)| format!("{n} {c}"))
            .collect();
        s.push_str(&format!(
            "  not read (other tracepoints): {}\n",
            list.join(", ")
        ));
    }
    for (n, noun, what) in [
        (
            stats.unreadable,
            "event",
            "of a known tracepoint with a body that could not be read",
        ),
        (stats.not_ftrace, "line", "that is not ftrace text"),
        (stats.long_lines, "line", "over 1 MiB (its tail not read)"),
        (
            stats.unmap_sg_unpaired,
            "dma_unmap_sg",
            "without its map in the text (DMA address taken from the physical one, size unknown)",
        ),
        (
            stats.names_dropped,
            "process name",
            "not kept (memory budget)",
        ),
    ] {
        if n > 0 {
            s.push_str(&format!("  {} {what}\n", counted(n, noun)));
        }
    }
    if let Some(first) = &stats.first_unreadable {
        s.push_str(&format!("  the first body not read: `{first}`\n"));
    }
    s
}

/// Imports `input` (`-`: standard input) into `out`, flushed.
pub fn import_path<W: Write>(input: &std::path::Path, out: W) -> anyhow::Result<ImportStats> {
    let shown = crate::outfile::display(input);
    let (mut out, stats) = if input.as_os_str() == "-" {
        import(io::stdin().lock(), out, "-").context("reading standard input")?
    } else {
        let f = std::fs::File::open(input).with_context(|| format!("cannot open {shown}"))?;
        if f.metadata().is_ok_and(|m| m.is_dir()) {
            bail!("{shown} is a directory, not ftrace text");
        }
        import(io::BufReader::with_capacity(1 << 16, f), out, &shown)
            .with_context(|| format!("reading {shown}"))?
    };
    out.flush().context("writing the trace file")?;
    Ok(stats)
}

#[cfg(test)]
mod tests;
