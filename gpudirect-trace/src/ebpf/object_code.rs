//! Where an eBPF object's instructions are, for the patches that rewrite
//! some of them before aya reads the object (`lifetime_table`'s atomics,
//! `task_context`'s ksym): below both, and below `object_patch`, which
//! calls them.

use anyhow::Context as _;
use object::{Object as _, ObjectSection as _};

/// Where the object's instruction sections lie in `bytes`: (start, length).
pub(super) fn instruction_ranges(bytes: &[u8]) -> anyhow::Result<Vec<(usize, usize)>> {
    let file = object::File::parse(bytes).context("parsing the eBPF object")?;
    Ok(file
        .sections()
        .filter(|s| s.kind() == object::SectionKind::Text)
        .filter_map(|s| s.file_range())
        .map(|(at, len)| (at as usize, len as usize))
        .collect())
}
