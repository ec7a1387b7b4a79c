//! The probe table on this kernel, as text.

use crate::{
    ebpf::{ProbeStatus, Status},
    sanitize::text as clean,
};

/// The probe table as `probes` prints it.
pub fn render(probes: &[ProbeStatus], release: &str, btf: bool) -> String {
    let width = probes.iter().map(|p| p.name.len()).max().unwrap_or(10);
    let mut out = format!(
        "kernel {}, BTF {}\n{:<width$}  {:<14}  {:<11}  REASON\n",
        clean(release),
        if btf { "yes" } else { "no" },
        "PROBE",
        "KIND",
        "STATUS",
    );
    for p in probes {
        out.push_str(&format!(
            "{:<width$}  {:<14}  {:<11}  {}\n",
            p.name,
            p.kind,
            p.status.as_str(),
            // Kernel and loader messages: one line, no control characters.
            clean(&p.reason)
        ));
    }
    let attached = probes
        .iter()
        .filter(|p| p.status == Status::Attached)
        .count();
    let failed = probes.iter().filter(|p| p.status == Status::Failed).count();
    out.push_str(&format!(
        "{attached} attached, {} unavailable, {failed} failed",
        probes
            .iter()
            .filter(|p| p.status == Status::Unavailable)
            .count()
    ));
    out
}
