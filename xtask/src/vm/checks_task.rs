//! Host check of the interrupt-context scenario (issue 20).

use anyhow::{ensure, Result};
use serde_json::Value;

/// tests/vm/scenarios/irq-context.sh: the NVMe's unmaps (its completion
/// interrupt) flagged as interrupt context, its maps (dd's submissions) not,
/// and the probe list naming the preempt count this kernel era has.
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
    ensure!(
        probe.contains("attached") && probe.contains(want),
        "{series}: the probe list's interrupt-context row does not say attached via {want}: {probe:?}"
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
