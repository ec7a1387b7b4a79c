//! The session's part in the misuse checks (`--check`): the kernel image's
//! ranges and the devices' drivers at the start, driver unbinds as they
//! happen, and the loss check that turns findings into incidents.

use std::sync::Arc;

use super::{uevent::Uevents, Observed, Session, SessionOptions};
use crate::{
    analysis::misuse::kernel_image,
    model::{
        misuse::{CheckSetup, StackFrames},
        pci::{DriverChange, PciUevent},
    },
    output,
    symbols::Symbolizer,
    tracefile::PciDevice,
};

/// Waits for PCI uevents (never returns when not followed); an error stops
/// following them, with a warning.
pub async fn pci_uevents(uevents: &mut Option<Uevents>) -> Vec<PciUevent> {
    match uevents.as_mut() {
        Some(u) => match u.next().await {
            Ok(v) => v,
            Err(e) => {
                output::warn(&format!(
                    "uevent socket: {e}: driver binds and device removals no longer followed"
                ));
                *uevents = None;
                Vec::new()
            }
        },
        None => std::future::pending().await,
    }
}

impl Session {
    pub(super) fn start_checks(
        &mut self,
        opts: &SessionOptions,
        pci: &[PciDevice],
    ) -> anyhow::Result<()> {
        if !opts.stream {
            anyhow::bail!("--check needs every DMA-API call: it cannot run with --aggregate-only");
        }
        let image = match std::fs::read_to_string("/proc/iomem") {
            Ok(t) => kernel_image(&t),
            Err(e) => {
                output::warn(&format!(
                    "reading /proc/iomem failed ({e}): maps of kernel text or rodata go unchecked"
                ));
                Vec::new()
            }
        };
        if opts.stacks {
            self.symbols = Some(Symbolizer::live());
        }
        if self.symbols.as_ref().is_some_and(Symbolizer::is_empty) {
            output::warn(
                "/proc/kallsyms shows no addresses (kptr_restrict, not root?): stacks are \
                 shown as addresses",
            );
        }
        if image.is_empty() {
            output::warn(
                "/proc/iomem shows no kernel code or rodata ranges (not root?): maps of kernel \
                 text or rodata go unchecked",
            );
        }
        let setup = CheckSetup {
            kernel_image: image,
            stacks: opts.stacks,
        };
        self.analysis.enable_checks(
            &setup,
            pci.iter().map(|d| (d.bus_id.as_str(), d.driver.as_deref())),
        );
        self.check = Some(setup);
        Ok(())
    }

    /// Whether PCI uevents (driver binds and unbinds, devices added and
    /// removed) are followed.
    pub fn follows_uevents(&self) -> bool {
        self.uevents.is_some()
    }

    /// PCI uevents waiting at the end of the session.
    pub fn last_uevents(
        &mut self,
        f: &mut dyn FnMut(Observed<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let changes = self
            .uevents
            .as_ref()
            .map(|u| u.pending())
            .unwrap_or_default();
        self.uevents_seen(&changes, f)
    }

    /// PCI uevents, after everything the ring holds before them: driver
    /// changes (the tables' driver column, a recording's Driver records,
    /// and with `--check` the misuse checks), arrivals and departures for
    /// the families. Binds are followed without `--check` too: a GPU rebound
    /// to vfio-pci mid-session kept the driver it had at the start in the
    /// table, live and in the recording's report.
    pub fn uevents_seen(
        &mut self,
        changes: &[PciUevent],
        f: &mut dyn FnMut(Observed<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        for c in changes {
            match c {
                PciUevent::Driver(c) => self.driver_change(c, f)?,
                PciUevent::Presence(p) => self.presence(p, f)?,
            }
        }
        Ok(())
    }

    /// A driver change, after everything the ring holds before it.
    pub fn driver_change(
        &mut self,
        c: &DriverChange,
        f: &mut dyn FnMut(Observed<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        f(Observed::Driver(c))?;
        let device: Arc<str> = Arc::from(c.device.as_str());
        self.analysis
            .driver_change(&device, c.driver.as_deref(), c.ts_ns);
        Ok(())
    }

    /// The loss check (`lost_total`: events lost since the start, as the
    /// checkpoint just written says): the findings it proves become
    /// incidents, handed to `f`.
    pub fn confirm_findings(
        &mut self,
        lost_total: u64,
        f: &mut dyn FnMut(Observed<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let proven = self.analysis.confirm(lost_total);
        if self.check.as_ref().is_some_and(|c| c.stacks) {
            self.take_stacks(f)?;
        }
        for o in proven {
            self.incident(Some(o), f)?;
        }
        Ok(())
    }

    /// Reads and symbolizes the kernel stacks the findings name, before
    /// they are shown; hands them to `f` (trace files keep them).
    fn take_stacks(
        &mut self,
        f: &mut dyn FnMut(Observed<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let ids = self.analysis.missing_stacks();
        if ids.is_empty() {
            return Ok(());
        }
        let list = self.stack_frames(ids);
        f(Observed::Stacks(&list))?;
        self.analysis.add_stacks(&list);
        self.analysis.fill_stacks();
        Ok(())
    }

    /// The kernel's stacks of `ids`, symbolized.
    pub fn stack_frames(&mut self, ids: Vec<u32>) -> Vec<StackFrames> {
        let stacks: Vec<Option<Vec<u64>>> = ids.iter().map(|&id| self.tracer.stack(id)).collect();
        let found: Vec<&[u64]> = stacks.iter().flatten().map(Vec::as_slice).collect();
        let syms = self.symbols.get_or_insert_with(Symbolizer::live);
        let mut named = syms.stacks(&found).into_iter();
        ids.into_iter()
            .zip(&stacks)
            .map(|(id, s)| StackFrames {
                id,
                frames: match s {
                    Some(_) => named.next().unwrap_or_default(),
                    None => vec!["(stack no longer in the kernel's map)".into()],
                },
            })
            .collect()
    }
}
