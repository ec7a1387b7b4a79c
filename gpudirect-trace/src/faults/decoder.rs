//! Stateful decoding: joins the multi-line reports and keeps the VT-d rate
//! limiting accounting. Feed lines in log order; call `finish` at the end.

use super::{
    aer::{self, AerPending},
    amd,
    kmsg::split_prefix,
    parse_body, smmu, vtd, Fault, Source,
};

#[derive(Debug)]
enum Pending {
    /// 3.x VT-d: first line, waiting for `DMAR:[fault reason NN] text`.
    VtdOld(Fault),
    /// <= 4.19 AMD-Vi: `Event logged [` alone, details on the next line.
    AmdOpen(Fault),
    /// `Event logged [Device not attached ...]`, `device=` on the next line.
    AmdNotAttached(Fault),
    Smmu {
        fault: Fault,
        prefix: String,
        dwords: usize,
    },
    Aer(AerPending),
    /// `NVRM: The NVIDIA GPU <bdf>` waiting for "...fallen off the bus".
    NvProbe {
        fault: Fault,
        lines_left: u8,
    },
}

/// A VT-d "handling fault status reg" line with the pending-fault bit set
/// and no record printed after it yet.
#[derive(Debug)]
struct VtdStatus {
    fault: Fault,
}

#[derive(Debug, Default)]
pub struct Decoder {
    pending: Option<Pending>,
    vtd_status: Option<VtdStatus>,
    last_xid79_device: Option<String>,
}

impl Decoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Every fault in `lines`, a whole log read through one decoder (its
    /// unfinished report included at the end).
    pub fn decode_all<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<Fault> {
        let mut d = Self::new();
        let mut out = Vec::new();
        for line in lines {
            out.extend(d.feed(line));
        }
        out.extend(d.finish());
        out
    }

    /// Decode one line; returns the faults completed by it (possibly an
    /// earlier multi-line report that this line ends). A `journalctl -o
    /// json` line is read as the log text it carries (`journal_json`).
    pub fn feed(&mut self, line: &str) -> Vec<Fault> {
        match super::journal_json::text_lines(line) {
            Some(lines) => lines.iter().flat_map(|l| self.feed_text(l)).collect(),
            None => self.feed_text(line),
        }
    }

    fn feed_text(&mut self, line: &str) -> Vec<Fault> {
        let mut out = Vec::new();
        let meta = split_prefix(line);
        let body = meta.body;
        let raw = line.trim_end();

        if let Some(p) = self.pending.take() {
            match continue_pending(p, body, raw) {
                Step::Pending(p) => {
                    self.pending = Some(p);
                    return out;
                }
                Step::Done(f) => {
                    out.extend(self.emit(f));
                    return out;
                }
                Step::Closed(f) => out.extend(self.emit(f)),
                Step::Dropped => {}
            }
        }

        if let Some(reg) = vtd::parse_status(body) {
            out.extend(self.flush_vtd_status());
            if reg & 0x2 != 0 {
                let mut f = Fault::new(
                    Source::Vtd,
                    "DMAR fault interrupt without a printed fault record",
                    raw,
                );
                f.timestamp_ns = meta.timestamp_ns;
                f.wall_time = meta.wall_time.clone();
                f.flags = vtd::status_flags(reg);
                f.partial = true;
                f.explanation = "The IOMMU raised a fault interrupt (fault status register \
                     decoded in details) but no fault record was printed after it. Either the \
                     record was cleared under printk rate limiting (a 'dmar_fault: N callbacks \
                     suppressed' line appears later), or the handler found no valid record: the \
                     previous interrupt's loop already reported it, or the hardware collapsed \
                     repeated faults from the same requester. Look at the faults printed just \
                     before: this is usually the same device."
                    .to_string();
                if reg & 0x1 != 0 {
                    f.explanation.push_str(
                        " PFO is set: the hardware fault log overflowed and dropped records.",
                    );
                }
                self.vtd_status = Some(VtdStatus { fault: f });
            }
            return out;
        }

        // Reports that continue on the next lines.
        if body.contains("AMD-Vi") && body.trim_end().ends_with("Event logged [") {
            let mut f = Fault::new(Source::AmdVi, "", raw);
            f.timestamp_ns = meta.timestamp_ns;
            f.wall_time = meta.wall_time;
            self.pending = Some(Pending::AmdOpen(f));
            return out;
        }
        if let Some(p) = aer::start(body, raw) {
            let mut p = p;
            p.fault.timestamp_ns = meta.timestamp_ns;
            p.fault.wall_time = meta.wall_time;
            self.pending = Some(Pending::Aer(p));
            return out;
        }
        if let Some(dev) = nv_probe_device(body) {
            let mut f = Fault::new(Source::NvidiaXid, "GPU has fallen off the bus", raw);
            f.set_device(dev);
            f.timestamp_ns = meta.timestamp_ns;
            f.wall_time = meta.wall_time;
            self.pending = Some(Pending::NvProbe {
                fault: f,
                lines_left: 3,
            });
            return out;
        }

        let Some(mut f) = parse_body(body) else {
            return out;
        };
        f.timestamp_ns = meta.timestamp_ns;
        f.wall_time = meta.wall_time;
        f.raw = raw.to_string();

        match f.source {
            Source::Vtd if f.flags.iter().any(|x| x == super::SUPPRESSED_FLAG) => {
                out.extend(self.flush_vtd_status());
            }
            Source::Vtd => {
                // A printed record answers the last status line.
                self.vtd_status = None;
                if f.reason_code.is_none() && f.address.is_some() {
                    self.pending = Some(Pending::VtdOld(f));
                    return out;
                }
            }
            Source::Smmu if body.trim_end().ends_with("received:") => {
                let prefix = smmu::smmu_prefix(body)
                    .map(|p| p.0.to_string())
                    .unwrap_or_default();
                self.pending = Some(Pending::Smmu {
                    fault: f,
                    prefix,
                    dwords: 0,
                });
                return out;
            }
            Source::AmdVi if f.reason == "Device not attached to domain properly" => {
                self.pending = Some(Pending::AmdNotAttached(f));
                return out;
            }
            _ => {}
        }
        out.extend(self.emit(f));
        out
    }

    /// Emit whatever is still pending at the end of input.
    pub fn finish(&mut self) -> Vec<Fault> {
        let mut out = Vec::new();
        if let Some(p) = self.pending.take() {
            if let Some(f) = close(p) {
                out.extend(self.emit(f));
            }
        }
        out.extend(self.flush_vtd_status());
        out
    }

    fn flush_vtd_status(&mut self) -> Option<Fault> {
        self.vtd_status.take().map(|s| s.fault)
    }

    /// Final filtering: the "GPU has fallen off the bus" line that follows an
    /// Xid 79 for the same GPU is the same event.
    fn emit(&mut self, f: Fault) -> Option<Fault> {
        if !(f.source == Source::NvidiaXid && f.xid == Some(79)) {
            self.last_xid79_device = None;
        }
        if f.source == Source::NvidiaXid && f.xid == Some(79) {
            let is_echo = !f.raw.contains("Xid") && self.last_xid79_device == f.device;
            if f.raw.contains("Xid") {
                self.last_xid79_device = f.device.clone();
            }
            if is_echo && f.device.is_some() {
                return None;
            }
        }
        Some(f)
    }
}

/// What a line does to the pending report.
enum Step {
    /// Line consumed, report still open.
    Pending(Pending),
    /// Line consumed, report complete.
    Done(Fault),
    /// Report complete; the line is not part of it (processed afresh).
    Closed(Fault),
    /// Pending text was not a fault after all; the line is processed afresh.
    Dropped,
}

fn continue_pending(p: Pending, body: &str, raw: &str) -> Step {
    match p {
        Pending::VtdOld(mut f) => {
            if body.contains("DMAR") && body.contains("[fault reason") {
                if let Some(reason) = vtd::parse(body) {
                    let code = reason.reason_code.unwrap_or(u32::MAX);
                    f.reason_code = reason.reason_code;
                    f.reason = reason.reason;
                    f.explanation = vtd::explain(code, f.access);
                    f.partial = vtd::fault_reason(code).is_none();
                    f.raw = format!("{}\n{raw}", f.raw);
                    return Step::Done(f);
                }
            }
            f.partial = true;
            Step::Closed(f)
        }
        Pending::AmdOpen(open) => {
            let combined = format!("{}\n{raw}", open.raw);
            match amd::parse_event(body.trim(), &combined) {
                Some(mut f) => {
                    f.timestamp_ns = open.timestamp_ns;
                    f.wall_time = open.wall_time;
                    if f.reason == "Device not attached to domain properly" {
                        return Step::Pending(Pending::AmdNotAttached(f));
                    }
                    Step::Done(f)
                }
                None => close(Pending::AmdOpen(open)).map_or(Step::Dropped, Step::Closed),
            }
        }
        Pending::AmdNotAttached(mut f) => match super::field(body, "device=") {
            Some(dev) => {
                f.set_device(dev);
                f.raw = format!("{}\n{raw}", f.raw);
                Step::Done(f)
            }
            None => Step::Closed(f),
        },
        Pending::Smmu {
            mut fault,
            prefix,
            mut dwords,
        } => {
            if let Some((pre, rest)) = smmu::smmu_prefix(body) {
                // Bounded like AER reports: endless continuation lines
                // close the report instead of growing it.
                let room = fault.raw.matches('\n').count() + 1 < aer::MAX_REPORT_LINES;
                if pre == prefix && room && smmu::apply_continuation(&mut fault, rest, &mut dwords)
                {
                    fault.raw.push('\n');
                    fault.raw.push_str(raw);
                    return Step::Pending(Pending::Smmu {
                        fault,
                        prefix,
                        dwords,
                    });
                }
            }
            Step::Closed(fault)
        }
        Pending::Aer(mut a) => {
            if a.continue_with(body, raw) {
                return Step::Pending(Pending::Aer(a));
            }
            if a.is_announce {
                // The details that follow an announce replace it.
                if let Some(mut next) = aer::start(body, raw).filter(|n| !n.is_announce) {
                    let meta = split_prefix(raw);
                    next.fault.timestamp_ns = meta.timestamp_ns;
                    next.fault.wall_time = meta.wall_time;
                    if a.dev != next.dev {
                        next.via = Some(a.dev.clone());
                    }
                    return Step::Pending(Pending::Aer(next));
                }
            }
            Step::Closed(a.finish())
        }
        Pending::NvProbe {
            mut fault,
            lines_left,
        } => {
            if !body.contains("NVRM:") {
                return Step::Dropped;
            }
            fault.raw = format!("{}\n{raw}", fault.raw);
            if body.contains("fallen off the bus") {
                fault.xid = Some(79);
                fault.reason_code = Some(79);
                if let Some((m, c)) = super::xid::lookup(79) {
                    fault.explanation =
                        format!("{m}. {c} (Reported at probe, without an Xid line.)");
                }
                return Step::Done(fault);
            }
            if lines_left > 1 {
                return Step::Pending(Pending::NvProbe {
                    fault,
                    lines_left: lines_left - 1,
                });
            }
            Step::Dropped
        }
    }
}

fn close(p: Pending) -> Option<Fault> {
    match p {
        Pending::VtdOld(mut f) | Pending::AmdNotAttached(mut f) => {
            f.partial = true;
            Some(f)
        }
        Pending::AmdOpen(mut f) => {
            f.reason = "AMD-Vi event without details".to_string();
            f.partial = true;
            Some(f)
        }
        Pending::Smmu { fault, .. } => Some(fault),
        Pending::Aer(a) => Some(a.finish()),
        Pending::NvProbe { .. } => None,
    }
}

/// `NVRM: The NVIDIA GPU 0000:b3:00.0` (first line of a multi-line message).
fn nv_probe_device(body: &str) -> Option<&str> {
    let rest = body.split_once("NVRM: The NVIDIA GPU ")?.1;
    let dev = rest.split_whitespace().next()?;
    super::normalize_bdf(dev).map(|_| dev)
}
