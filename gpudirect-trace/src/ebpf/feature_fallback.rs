//! Loading again without an optional feature of the programs that the
//! kernel's verifier refused. Two features are optional in this way: the
//! debug messages (program_log.rs: a larger program) and the preempt count
//! read as a typed per-CPU ksym (task_context.rs: a kernel may refuse the
//! ksym in ways its two checks did not foresee). Either way a program that
//! fails with the feature would otherwise cost the user a probe, for a
//! feature worth less than the probe.

use super::Tracer;

/// How many refused probes' messages the warning quotes: a refusal of the
/// typed ksym fails every program that stamps a record (54 on the CI host),
/// and each verifier message runs to a line or more.
const QUOTED: usize = 3;

/// Where `tracer` (loaded with the feature) has failed probes, drops it (its
/// probes detach) and loads the whole object again with `again`, which is
/// given the refused probes' messages; warns with both counts and the first
/// messages. `feature` names it in that warning's sentence (`it`, `them`).
/// Returns the tracer to keep, and whether it still has the feature.
pub(super) fn without_where_refused(
    tracer: Tracer,
    headline: &str,
    feature: &str,
    again: impl FnOnce(&[String]) -> anyhow::Result<Tracer>,
) -> anyhow::Result<(Tracer, bool)> {
    let refused = tracer.failed();
    if refused.is_empty() {
        return Ok((tracer, true));
    }
    // Detach first: the second load attaches the same probes.
    drop(tracer);
    let tracer = again(&refused)?;
    log::warn!(
        "{headline}: {} probe(s) failed to load with {feature} ({}), {} without",
        refused.len(),
        quote(&refused),
        tracer.failed().len()
    );
    Ok((tracer, false))
}

/// The first `QUOTED` messages, and how many more there were.
fn quote(messages: &[String]) -> String {
    let mut text = messages[..messages.len().min(QUOTED)].join("; ");
    if messages.len() > QUOTED {
        text.push_str(&format!("; and {} more", messages.len() - QUOTED));
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_warning_quotes_the_first_messages_and_counts_the_rest() {
        let many: Vec<String> = (0..54).map(|i| format!("p{i}: refused")).collect();
        assert_eq!(
            super::quote(&many),
            "p0: refused; p1: refused; p2: refused; and 51 more"
        );
        assert_eq!(super::quote(&many[..2]), "p0: refused; p1: refused");
    }
}
