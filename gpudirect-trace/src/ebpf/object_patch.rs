//! The eBPF object as this kernel and these options need it: the embedded
//! bytes where nothing needs changing, else a patched copy.
//!
//! Two patches exist:
//! - without BPF atomics (kernels before 5.12), each compare-and-exchange
//!   becomes an atomic add (`lifetime_table::without_cmpxchg` says why);
//! - where BTF has the preempt count's per-CPU variable, the programs'
//!   marker constant becomes a typed ksym of it (`task_context::make_ksym`);
//! - a kernel stack depth other than the stack map's compiled 127 frames
//!   (`--stack-depth`) rewrites the map definition's value size, which is
//!   how the kernel bounds its unwind (bpf_get_stackid walks value_size / 8
//!   frames): aya sets a map's entries at load, never its value size.

use anyhow::{bail, Context as _};
use object::{Object as _, ObjectSection as _, ObjectSymbol as _};

use super::{lifetime_table, task_context};

/// Frames the stack map holds as compiled (aya-ebpf's StackTrace:
/// PERF_MAX_STACK_DEPTH, the kernel's default perf_event_max_stack).
pub const COMPILED_STACK_DEPTH: u32 = 127;

/// What the copy must differ in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Patches {
    /// The kernel takes BPF_CMPXCHG: keep it.
    pub atomics: bool,
    /// Frames per kernel stack (1..=COMPILED_STACK_DEPTH).
    pub stack_depth: u32,
    /// The BTF id of the preempt count's per-CPU variable, for the
    /// programs' typed ksym (`task_context::make_ksym`).
    pub preempt_count_ksym: Option<u32>,
}

/// The object to load.
pub fn object_for(object: &'static [u8], patches: Patches) -> anyhow::Result<ObjectBytes> {
    if patches.atomics
        && patches.stack_depth == COMPILED_STACK_DEPTH
        && patches.preempt_count_ksym.is_none()
    {
        return Ok(ObjectBytes::Embedded(object));
    }
    // In u64s: the ELF reader wants its headers 8-byte aligned, which a
    // Vec<u8> does not promise.
    let mut words = vec![0u64; object.len().div_ceil(8)];
    // SAFETY: u64s are plain bytes; the length is the vector's in bytes.
    let bytes =
        unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), words.len() * 8) };
    let bytes = &mut bytes[..object.len()];
    bytes.copy_from_slice(object);
    if !patches.atomics {
        let patched = lifetime_table::without_cmpxchg(bytes)?;
        log::debug!("no BPF atomics: {patched} compare-and-exchange instructions made adds");
    }
    if patches.stack_depth != COMPILED_STACK_DEPTH {
        set_stack_depth(bytes, patches.stack_depth)?;
    }
    if let Some(id) = patches.preempt_count_ksym {
        let made = task_context::make_ksym(bytes, id)?;
        if made == 0 {
            bail!("the eBPF object loads no preempt-count marker to make a ksym of");
        }
        log::debug!("{made} loads of the preempt count made a typed ksym (BTF id {id})");
    }
    Ok(ObjectBytes::Patched(words, object.len()))
}

/// The eBPF object's bytes: embedded, or a patched copy.
pub enum ObjectBytes {
    Embedded(&'static [u8]),
    Patched(Vec<u64>, usize),
}

impl ObjectBytes {
    pub fn bytes(&self) -> &[u8] {
        match self {
            Self::Embedded(b) => b,
            Self::Patched(words, len) => &words_as_bytes(words)[..*len],
        }
    }
}

fn words_as_bytes(words: &[u64]) -> &[u8] {
    // SAFETY: u64s are plain bytes; the length is the slice's in bytes.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), std::mem::size_of_val(words)) }
}

/// Offset of `value_size` in a legacy map definition (struct bpf_map_def:
/// type, key_size, value_size, max_entries, map_flags, id, pinning).
const VALUE_SIZE_AT: usize = 8;

/// Rewrites the stack map's value size to `depth` frames.
fn set_stack_depth(bytes: &mut [u8], depth: u32) -> anyhow::Result<()> {
    if !(1..=COMPILED_STACK_DEPTH).contains(&depth) {
        bail!("a stack depth of {depth} frames: it must be 1 to {COMPILED_STACK_DEPTH}");
    }
    let at = {
        let file = object::File::parse(&*bytes).context("parsing the eBPF object")?;
        let name = gpudirect_trace_common::maps::STACKS;
        let sym = file
            .symbols()
            .find(|s| s.name() == Ok(name))
            .with_context(|| format!("no {name} map in the eBPF object"))?;
        let section = sym
            .section_index()
            .and_then(|i| file.section_by_index(i).ok())
            .with_context(|| format!("the {name} map has no section"))?;
        let (start, _) = section
            .file_range()
            .with_context(|| format!("the {name} map's section has no data"))?;
        // In a relocatable object a symbol's value is its offset in its section.
        (start + sym.address()) as usize + VALUE_SIZE_AT
    };
    let field = bytes
        .get_mut(at..at + 4)
        .context("the stack map's definition past the object's end")?;
    let compiled = u32::from_le_bytes([field[0], field[1], field[2], field[3]]);
    if compiled != COMPILED_STACK_DEPTH * 8 {
        bail!(
            "the stack map's value size is {compiled}, not {}: its definition changed",
            COMPILED_STACK_DEPTH * 8
        );
    }
    field.copy_from_slice(&(depth * 8).to_le_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack_value_size(object: &[u8]) -> u32 {
        let obj = aya_obj::Object::parse(object).expect("parses");
        obj.maps[gpudirect_trace_common::maps::STACKS].value_size()
    }

    /// The copy for kernels without atomics holds no compare-and-exchange
    /// and still parses as aya parses it; a stack depth changes the stack
    /// map's value size and nothing else aya reads.
    #[test]
    fn patched_copies_parse_and_differ_only_where_asked() {
        let object = super::super::EBPF_OBJECT;
        assert_eq!(stack_value_size(object), COMPILED_STACK_DEPTH * 8);
        let plain = Patches {
            atomics: true,
            stack_depth: COMPILED_STACK_DEPTH,
            preempt_count_ksym: None,
        };
        assert!(matches!(
            object_for(object, plain).expect("embedded"),
            ObjectBytes::Embedded(_)
        ));
        let old = object_for(
            object,
            Patches {
                atomics: false,
                ..plain
            },
        )
        .expect("copy");
        let mut again = old.bytes().to_vec();
        assert_eq!(
            lifetime_table::without_cmpxchg(&mut again).expect("patches"),
            0
        );
        assert_eq!(stack_value_size(old.bytes()), COMPILED_STACK_DEPTH * 8);

        let short = object_for(
            object,
            Patches {
                stack_depth: 16,
                ..plain
            },
        )
        .expect("copy");
        assert_eq!(stack_value_size(short.bytes()), 16 * 8);
        let differ = object
            .iter()
            .zip(short.bytes())
            .filter(|(a, b)| a != b)
            .count();
        assert_eq!(differ, 2, "1016 -> 128: two bytes of one field");
        assert!(object_for(
            object,
            Patches {
                stack_depth: 0,
                ..plain
            }
        )
        .is_err());
        assert!(object_for(
            object,
            Patches {
                stack_depth: 128,
                ..plain
            }
        )
        .is_err());
    }
}
