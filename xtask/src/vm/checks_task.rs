//! Host check of the interrupt-context scenario (issue 20).

use anyhow::{ensure, Result};
use serde_json::Value;

/// tests/vm/scenarios/irq-context.sh: the NVMe's unmaps (its completion
/// interrupt) flagged as interrupt context, its maps (dd's submissions) not,
/// and the probe list naming the preempt count this kernel era has, read
/// as a typed ksym.
pub fn irq_context(series: &str, lines: &[String], v: Value) -> Result<()> {
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    let (maps, maps_irq) = (n("maps"), n("maps_in_interrupt"));
    let (unmaps, unmaps_irq) = (n("unmaps"), n("unmaps_in_interrupt"));
    let probe = super::checks::tagged_str(lines, "PROBE ").unwrap_or("");
    let want = if series == "6.12" {
        "pcpu_hot.preempt_count"
    } else {
        "__preempt_count"
    };
    // The typed ksym where BTF has the variable: Debian's 5.10 BTF has no
    // variables at all (0 VARs in its vmlinux .BTF), so the kernel read at
    // kallsyms' address there; every later kernel of the matrix has it.
    let typed = series != "5.10";
    ensure!(
        probe.contains("attached")
            && probe.contains(want)
            && probe.contains("typed per-CPU") == typed,
        "{series}: the probe list's interrupt-context row does not say attached via {} of \
         {want}: {probe:?}",
        if typed {
            "the typed ksym"
        } else {
            "kallsyms' address"
        }
    );
    ensure!(
        maps > 0 && unmaps > 0,
        "{series}: no NVMe maps/unmaps exported ({v})"
    );
    // Completions run in the interrupt (or the block softirq it raises);
    // a few may complete in process context (polling, a request finished
    // on submission), none of dd's submissions run in an interrupt.
    ensure!(
        unmaps_irq * 10 >= unmaps * 9,
        "{series}: only {unmaps_irq} of {unmaps} NVMe unmaps flagged as interrupt context"
    );
    ensure!(
        maps_irq * 100 <= maps,
        "{series}: {maps_irq} of {maps} NVMe maps flagged as interrupt context (dd maps in process context)"
    );
    eprintln!(
        "xtask: {series}: interrupt context: {unmaps_irq}/{unmaps} NVMe unmaps, {maps_irq}/{maps} maps ({want})"
    );
    Ok(())
}
