//! One line of ftrace text, in the shapes tools print it: the tracefs
//! `trace` file (every kernel's column layout, with or without the
//! `record-tgid` option's `(TGID)` column), `trace-cmd report`, and
//! `perf script` (`COMM PID[/TID] [CPU] TS: system:event: ...`).

/// What a line is.
#[derive(Debug, PartialEq, Eq)]
pub enum Line<'a> {
    Event(EventLine<'a>),
    /// `CPU:N [LOST M EVENTS]`: the ring dropped or overwrote M events of
    /// CPU N (`[LOST EVENTS]`, no count, from trace-cmd: at least one).
    Lost {
        events: Option<u64>,
    },
    /// `# entries-in-buffer/entries-written: A/B`: B - A events were
    /// overwritten before the file was read.
    Entries {
        in_buffer: u64,
        written: u64,
    },
    /// A comment or blank line.
    Comment,
}

/// An event line's columns.
#[derive(Debug, PartialEq, Eq)]
pub struct EventLine<'a> {
    pub comm: &'a str,
    /// The task column's number: the thread's id.
    pub tid: u32,
    /// The process, where the line says (`record-tgid`, `perf script`).
    pub tgid: Option<u32>,
    pub cpu: u32,
    pub ts_ns: u64,
    /// The irq-flags column said hard or soft interrupt (or NMI).
    pub in_interrupt: bool,
    /// The event's name without its system (`dma_map_sg` from
    /// `dma:dma_map_sg:` too).
    pub name: &'a str,
    pub body: &'a str,
}

/// `None`: not a line of ftrace text.
pub fn parse(line: &str) -> Option<Line<'_>> {
    let t = line.trim();
    if t.is_empty() {
        return Some(Line::Comment);
    }
    if let Some(rest) = t.strip_prefix('#') {
        return Some(entries(rest).unwrap_or(Line::Comment));
    }
    // trace-cmd report's preamble: `cpus=32`, `version = 6`, `CPU 3 is empty`.
    if t.starts_with("cpus=")
        || t.starts_with("version =")
        || (t.starts_with("CPU ") && t.ends_with(" is empty"))
    {
        return Some(Line::Comment);
    }
    if t.starts_with("CPU:") && t.contains("[LOST") {
        let events = t
            .split_once("[LOST")
            .and_then(|(_, r)| r.split_whitespace().next())
            .and_then(|n| n.parse().ok());
        return Some(Line::Lost { events });
    }
    event(line).map(Line::Event)
}

fn entries(comment: &str) -> Option<Line<'static>> {
    let (_, r) = comment.split_once("entries-in-buffer/entries-written:")?;
    let (a, b) = r.split_whitespace().next()?.split_once('/')?;
    Some(Line::Entries {
        in_buffer: a.parse().ok()?,
        written: b.parse().ok()?,
    })
}

/// The first `[digits]` preceded by a blank: the CPU column.
fn cpu_column(line: &str) -> Option<(usize, usize, u32)> {
    let b = line.as_bytes();
    let mut from = 0;
    while let Some(i) = line[from..].find('[').map(|i| i + from) {
        let close = line[i..].find(']').map(|j| i + j)?;
        let inner = &line[i + 1..close];
        if i > 0
            && b[i - 1].is_ascii_whitespace()
            && !inner.is_empty()
            && inner.bytes().all(|c| c.is_ascii_digit())
        {
            return Some((i, close, inner.parse().ok()?));
        }
        from = i + 1;
    }
    None
}

fn event(line: &str) -> Option<EventLine<'_>> {
    let (open, close, cpu) = cpu_column(line)?;
    let (comm, tid, tgid) = task(line[..open].trim())?;
    let mut rest = line[close + 1..].trim_start();
    let mut in_interrupt = false;
    // The irq-flags column (`d.h2.`, `.....`), where the layout has one.
    let first = rest.split_whitespace().next()?;
    if timestamp(first).is_none() {
        in_interrupt = first
            .as_bytes()
            .get(2)
            .is_some_and(|c| matches!(c, b'h' | b's' | b'H' | b'z'));
        rest = rest[first.len()..].trim_start();
    }
    let ts = rest.split_whitespace().next()?;
    let ts_ns = timestamp(ts)?;
    rest = rest[ts.len()..].trim_start();
    let name = rest.split_whitespace().next()?;
    let body = rest[name.len()..].trim_start();
    let name = name.strip_suffix(':')?;
    let name = name.rsplit(':').next().unwrap_or(name);
    if name.is_empty() {
        return None;
    }
    Some(EventLine {
        comm,
        tid,
        tgid,
        cpu,
        ts_ns,
        in_interrupt,
        name,
        body,
    })
}

/// `comm-tid`, `comm-tid (tgid)`, `comm-tid (-----)`, or perf's `comm
/// pid[/tid]`. A comm may hold blanks and dashes: the number is the last.
fn task(s: &str) -> Option<(&str, u32, Option<u32>)> {
    let (s, tgid) = match s.strip_suffix(')').and_then(|x| x.rsplit_once('(')) {
        Some((left, inner)) => (left.trim_end(), inner.trim().parse().ok()),
        None => (s, None),
    };
    if let Some((comm, last)) = s.rsplit_once(char::is_whitespace) {
        // perf script: `comm pid` or `comm pid/tid`.
        let (pid, tid) = last.split_once('/').unwrap_or((last, last));
        if let (Ok(pid), Ok(tid)) = (pid.parse::<u32>(), tid.parse::<u32>()) {
            return Some((comm.trim_end(), tid, Some(pid)));
        }
    }
    let (comm, tid) = s.rsplit_once('-')?;
    Some((comm.trim_start(), tid.parse().ok()?, tgid))
}

/// `SECONDS.FRACTION:` (microseconds by default, nanoseconds from
/// `trace-cmd report -t`) or a bare counter (`trace_clock` counter,
/// x86-tsc), taken as nanoseconds.
fn timestamp(tok: &str) -> Option<u64> {
    let t = tok.strip_suffix(':')?;
    let (s, frac) = t.split_once('.').unwrap_or((t, ""));
    if s.is_empty()
        || !s.bytes().all(|c| c.is_ascii_digit())
        || frac.len() > 9
        || !frac.bytes().all(|c| c.is_ascii_digit())
    {
        return None;
    }
    let secs: u64 = s.parse().ok()?;
    if frac.is_empty() && !t.contains('.') {
        return Some(secs);
    }
    let mut ns: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    for _ in frac.len()..9 {
        ns *= 10;
    }
    secs.checked_mul(1_000_000_000)?.checked_add(ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(line: &str) -> EventLine<'_> {
        match parse(line) {
            Some(Line::Event(e)) => e,
            other => panic!("{line:?}: {other:?}"),
        }
    }

    #[test]
    fn tracefs_layouts_of_every_era() {
        // 6.x: five flag characters.
        let e = ev("         python3-1220    [031] .....    49.107569: dma_map_phys: 0000:00:06.0 dir=BIDIRECTIONAL dma_addr=10b000000 size=4096");
        assert_eq!((e.comm, e.tid, e.tgid, e.cpu), ("python3", 1220, None, 31));
        assert_eq!(e.ts_ns, 49_107_569_000);
        assert_eq!(e.name, "dma_map_phys");
        assert!(e.body.starts_with("0000:00:06.0 dir="));
        assert!(!e.in_interrupt);
        // 4.x/5.x: four, and a softirq.
        let e = ev("  kworker/u16:2-1234  [002] ..s1   812.000001: iommu_map: IOMMU: iova=0x0000000000001000 - 0x0000000000002000 paddr=0x0000000123456000 size=4096");
        assert_eq!((e.comm, e.tid), ("kworker/u16:2", 1234));
        assert!(e.in_interrupt);
        assert_eq!(e.name, "iommu_map");
        // record-tgid, and a comm with a dash and a blank.
        let e =
            ev("  my-app x-77 (   70) [000] d.h2. 1.5: dma_unmap_phys: 0000:01:00.0 dir=TO_DEVICE");
        assert_eq!((e.comm, e.tid, e.tgid), ("my-app x", 77, Some(70)));
        assert!(e.in_interrupt);
        assert_eq!(e.ts_ns, 1_500_000_000);
        let e = ev("<idle>-0 (-------) [005] ..... 3.000000001: swiotlb_bounced: dev_name: 0000:00:04.0 dma_mask=ffffffff dev_addr=1000 size=4096 NORMAL");
        assert_eq!((e.comm, e.tid, e.tgid), ("<idle>", 0, None));
        assert_eq!(e.ts_ns, 3_000_000_001);
    }

    #[test]
    fn trace_cmd_and_perf_script() {
        // trace-cmd report: no flags column.
        let e = ev("         fio-4321  [003]  1234.567890: dma_map_sg:           0000:00:04.0 dir=FROM_DEVICE");
        assert_eq!(
            (e.comm, e.tid, e.cpu, e.name),
            ("fio", 4321, 3, "dma_map_sg")
        );
        assert!(e.body.starts_with("0000:00:04.0"));
        // perf script: system:event, pid/tid.
        let e = ev("         python3  1220/1225 [031]    49.107569: dma:dma_map_phys: 0000:00:06.0 dir=TO_DEVICE");
        assert_eq!(
            (e.comm, e.tid, e.tgid, e.name),
            ("python3", 1225, Some(1220), "dma_map_phys")
        );
        let e = ev("python3 1220 [031] 49.1: dma:dma_unmap_phys: x");
        assert_eq!((e.tid, e.tgid), (1220, Some(1220)));
    }

    #[test]
    fn losses_headers_and_other_text() {
        assert_eq!(
            parse("CPU:3 [LOST 1234 EVENTS]"),
            Some(Line::Lost { events: Some(1234) })
        );
        assert_eq!(
            parse("CPU:0 [LOST EVENTS]"),
            Some(Line::Lost { events: None })
        );
        assert_eq!(
            parse("# entries-in-buffer/entries-written: 4358/5000   #P:32"),
            Some(Line::Entries {
                in_buffer: 4358,
                written: 5000
            })
        );
        assert_eq!(parse("# tracer: nop"), Some(Line::Comment));
        for preamble in ["cpus=32", "version = 6", "CPU 3 is empty"] {
            assert_eq!(parse(preamble), Some(Line::Comment), "{preamble}");
        }
        assert_eq!(parse("   "), Some(Line::Comment));
        for not in [
            "Dec  5 10:00:00 host kernel: [ 12.0] DMAR: fault",
            "python3-12 [x] 1.0: a: b",
            "python3-12 [001] 1.0 dma_map: no colon after the time",
            "python3-12 [001] ..... 1.2.3: dma_map: x",
            "python3 [001] 1.0: dma_map: no number before the cpu",
        ] {
            assert_eq!(parse(not), None, "{not}");
        }
    }

    #[test]
    fn timestamps() {
        assert_eq!(timestamp("0.000001:"), Some(1_000));
        assert_eq!(timestamp("12.123456789:"), Some(12_123_456_789));
        assert_eq!(timestamp("987654321:"), Some(987_654_321));
        assert_eq!(timestamp("1.1234567891:"), None);
        assert_eq!(timestamp("99999999999999999999.0:"), None);
        assert_eq!(timestamp("1.0"), None);
    }
}
