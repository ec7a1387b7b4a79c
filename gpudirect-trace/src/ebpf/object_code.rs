//! Where an eBPF object's instructions are, for the patches that rewrite
//! some of them before aya reads the object (`lifetime_table`'s atomics,
//! `task_context`'s ksym): below both, and below `object_patch`, which
//! calls them.

use anyhow::Context as _;
use object::{Object as _, ObjectSection as _};

/// Hands each instruction section of the object in `bytes` to `patch`.
pub(super) fn each_section(
    bytes: &mut [u8],
    mut patch: impl FnMut(&mut [u8]),
) -> anyhow::Result<()> {
    for (at, len) in instruction_ranges(bytes)? {
        let code = bytes
            .get_mut(at..at.saturating_add(len))
            .context("an instruction section past the object's end")?;
        patch(code);
    }
    Ok(())
}

/// Where the object's instruction sections lie in `bytes`: (start, length).
fn instruction_ranges(bytes: &[u8]) -> anyhow::Result<Vec<(usize, usize)>> {
    let file = object::File::parse(bytes).context("parsing the eBPF object")?;
    Ok(file
        .sections()
        .filter(|s| s.kind() == object::SectionKind::Text)
        .filter_map(|s| s.file_range())
        .map(|(at, len)| (at as usize, len as usize))
        .collect())
}
