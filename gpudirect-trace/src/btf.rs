//! A small reader for the kernel's BTF (/sys/kernel/btf/vmlinux and module
//! BTF), enough for what the loader needs to know about the running kernel:
//! structure member offsets (device names, scatterlists), the argument count
//! of each tracepoint (`btf_trace_<name>` typedefs), and which functions exist
//! (fentry targets).
//!
//! aya parses BTF too, but keeps its lookups crate-private; the format is
//! simple and stable (include/uapi/linux/btf.h), so reading it here costs
//! ~150 lines and no dependency.

use std::{collections::HashMap, path::Path};

use anyhow::{bail, Context as _};

const BTF_MAGIC: u16 = 0xEB9F;

pub const KIND_INT: u8 = 1;
pub const KIND_PTR: u8 = 2;
pub const KIND_ARRAY: u8 = 3;
pub const KIND_STRUCT: u8 = 4;
pub const KIND_UNION: u8 = 5;
pub const KIND_ENUM: u8 = 6;
pub const KIND_FWD: u8 = 7;
pub const KIND_TYPEDEF: u8 = 8;
pub const KIND_VOLATILE: u8 = 9;
pub const KIND_CONST: u8 = 10;
pub const KIND_RESTRICT: u8 = 11;
pub const KIND_FUNC: u8 = 12;
pub const KIND_FUNC_PROTO: u8 = 13;
pub const KIND_VAR: u8 = 14;
pub const KIND_DATASEC: u8 = 15;
pub const KIND_FLOAT: u8 = 16;
pub const KIND_DECL_TAG: u8 = 17;
pub const KIND_TYPE_TAG: u8 = 18;
pub const KIND_ENUM64: u8 = 19;

#[derive(Clone, Debug)]
struct Type {
    kind: u8,
    kind_flag: bool,
    name_off: u32,
    vlen: u16,
    /// `size` for sized types, referenced type id for the others.
    size_or_type: u32,
    /// Members (name_off, type, offset) for struct/union; params (name_off,
    /// type, 0) for func protos; variables (0, type, offset) for data
    /// sections.
    members: Vec<(u32, u32, u32)>,
}

/// A per-CPU variable of the kernel (`Btf::percpu_var`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PercpuVar {
    /// Its BTF type id (the VAR's).
    pub id: u32,
    /// Its type's kind (`KIND_INT`, `KIND_STRUCT`...) and size in bytes.
    pub kind: u8,
    pub size: u32,
}

/// Parsed BTF: vmlinux alone, or vmlinux plus one module (split BTF).
#[derive(Debug, Default)]
pub struct Btf {
    /// Index 0 is `void`.
    types: Vec<Type>,
    strings: Vec<u8>,
    by_name: HashMap<(u8, String), u32>,
    /// Modules appended with `add_module`: (name, index of its first type).
    modules: Vec<(String, u32)>,
}

impl Btf {
    /// The running kernel's BTF.
    pub fn vmlinux() -> anyhow::Result<Self> {
        Self::from_file(Path::new("/sys/kernel/btf/vmlinux"))
    }

    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        Self::from_bytes(&data).with_context(|| format!("parsing BTF {}", path.display()))
    }

    /// BTF of a whole kernel (not split) from its bytes.
    pub fn from_bytes(data: &[u8]) -> anyhow::Result<Self> {
        let mut btf = Btf {
            types: vec![Type {
                kind: 0,
                kind_flag: false,
                name_off: 0,
                vlen: 0,
                size_or_type: 0,
                members: Vec::new(),
            }],
            ..Default::default()
        };
        btf.append(data)?;
        Ok(btf)
    }

    /// Adds a module's split BTF (/sys/kernel/btf/<module>) on top of vmlinux.
    /// Split BTF numbers its types after the base's and its string offsets
    /// after the base's string section, so appending both keeps every id and
    /// offset valid.
    /// On error `self` is left as it was.
    pub fn add_module(&mut self, path: &Path) -> anyhow::Result<()> {
        let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        if !self.modules.is_empty() {
            // Every module's split BTF numbers its types from the end of
            // vmlinux's: a second module would overlap the first's ids.
            bail!("only one module's BTF can be added");
        }
        let (types, strings) = (self.types.len(), self.strings.len());
        self.append(&data).map_err(|e| {
            self.types.truncate(types);
            self.strings.truncate(strings);
            e.context(format!("parsing BTF {}", path.display()))
        })?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        self.modules.push((name, types as u32));
        Ok(())
    }

    /// The BTF type id of function `name` as the kernel numbers it, and the
    /// module whose BTF holds it (None: vmlinux). fentry on a module function
    /// needs both: the id, and the module's BTF object (`attach_btf_obj_fd`).
    pub fn function_id(&self, name: &str) -> Option<(u32, Option<&str>)> {
        let id = *self.by_name.get(&(KIND_FUNC, name.to_owned()))?;
        let module = self
            .modules
            .iter()
            .rev()
            .find(|(_, first)| id >= *first)
            .map(|(m, _)| m.as_str());
        Some((id, module))
    }

    fn append(&mut self, data: &[u8]) -> anyhow::Result<()> {
        let u16_at = |o: usize| -> anyhow::Result<u16> {
            Ok(u16::from_le_bytes(
                data.get(o..o + 2).context("truncated")?.try_into()?,
            ))
        };
        let u32_at = |o: usize| -> anyhow::Result<u32> {
            Ok(u32::from_le_bytes(
                data.get(o..o + 4).context("truncated")?.try_into()?,
            ))
        };
        if u16_at(0)? != BTF_MAGIC {
            bail!("not BTF (bad magic)");
        }
        let hdr_len = u32_at(4)? as usize;
        let type_off = u32_at(8)? as usize;
        let type_len = u32_at(12)? as usize;
        let str_off = u32_at(16)? as usize;
        let str_len = u32_at(20)? as usize;
        let strings = data
            .get(hdr_len + str_off..hdr_len + str_off + str_len)
            .context("string section out of bounds")?;
        self.strings.extend_from_slice(strings);

        let start = hdr_len + type_off;
        let end = start + type_len;
        if end > data.len() {
            bail!("type section out of bounds");
        }
        let mut o = start;
        let first_new = self.types.len();
        while o < end {
            let name_off = u32_at(o)?;
            let info = u32_at(o + 4)?;
            let size_or_type = u32_at(o + 8)?;
            o += 12;
            let vlen = (info & 0xffff) as u16;
            let kind = ((info >> 24) & 0x1f) as u8;
            let kind_flag = info >> 31 == 1;
            let mut members = Vec::new();
            match kind {
                KIND_INT | KIND_VAR | KIND_DECL_TAG => o += 4,
                KIND_ARRAY => o += 12,
                KIND_STRUCT | KIND_UNION => {
                    for _ in 0..vlen {
                        members.push((u32_at(o)?, u32_at(o + 4)?, u32_at(o + 8)?));
                        o += 12;
                    }
                }
                KIND_ENUM => o += 8 * vlen as usize,
                KIND_ENUM64 => o += 12 * vlen as usize,
                KIND_DATASEC => {
                    for _ in 0..vlen {
                        members.push((0, u32_at(o)?, u32_at(o + 4)?));
                        o += 12;
                    }
                }
                KIND_FUNC_PROTO => {
                    for _ in 0..vlen {
                        members.push((u32_at(o)?, u32_at(o + 4)?, 0));
                        o += 8;
                    }
                }
                // No trailing data.
                KIND_PTR | KIND_FWD | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT
                | KIND_FUNC | KIND_FLOAT | KIND_TYPE_TAG => {}
                other => bail!("unknown BTF kind {other}"),
            }
            self.types.push(Type {
                kind,
                kind_flag,
                name_off,
                vlen,
                size_or_type,
                members,
            });
        }
        for id in first_new..self.types.len() {
            let t = &self.types[id];
            if t.name_off != 0 {
                let name = self.name(t.name_off).to_owned();
                self.by_name.entry((t.kind, name)).or_insert(id as u32);
            }
        }
        Ok(())
    }

    fn name(&self, off: u32) -> &str {
        let Some(rest) = self.strings.get(off as usize..) else {
            return "";
        };
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        std::str::from_utf8(&rest[..end]).unwrap_or("")
    }

    fn find(&self, kind: u8, name: &str) -> Option<&Type> {
        let id = *self.by_name.get(&(kind, name.to_owned()))?;
        self.types.get(id as usize)
    }

    /// The name of the function whose BTF type id is `id`.
    pub fn function_name(&self, id: u32) -> Option<&str> {
        let t = self.types.get(id as usize)?;
        (t.kind == KIND_FUNC).then(|| self.name(t.name_off))
    }

    /// Whether the kernel (or loaded module) has a function of this name.
    pub fn has_function(&self, name: &str) -> bool {
        self.find(KIND_FUNC, name).is_some()
    }

    /// Number of parameters of function `name` (its FUNC_PROTO's).
    pub fn function_args(&self, name: &str) -> Option<usize> {
        let f = self.find(KIND_FUNC, name)?;
        let proto = self.types.get(f.size_or_type as usize)?;
        (proto.kind == KIND_FUNC_PROTO).then_some(proto.vlen as usize)
    }

    /// The BTF id of the per-CPU variable `name` (a VAR that the
    /// `.data..percpu` section lists: the kernel takes no other for
    /// `bpf_this_cpu_ptr()`) and its type's kind and size.
    pub fn percpu_var(&self, name: &str) -> Option<PercpuVar> {
        let id = *self.by_name.get(&(KIND_VAR, name.to_owned()))?;
        let percpu = self.find(KIND_DATASEC, ".data..percpu")?;
        if !percpu.members.iter().any(|&(_, ty, _)| ty == id) {
            return None;
        }
        let mut ty = self
            .types
            .get(self.types.get(id as usize)?.size_or_type as usize)?;
        // Through typedefs and qualifiers.
        for _ in 0..8 {
            if !matches!(
                ty.kind,
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG
            ) {
                break;
            }
            ty = self.types.get(ty.size_or_type as usize)?;
        }
        Some(PercpuVar {
            id,
            kind: ty.kind,
            size: ty.size_or_type,
        })
    }

    pub fn struct_size(&self, name: &str) -> Option<u32> {
        self.find(KIND_STRUCT, name).map(|t| t.size_or_type)
    }

    /// Byte offset of `member` in `struct name`, looking through anonymous
    /// struct/union members; None for bitfields and unknown names.
    pub fn member_offset(&self, name: &str, member: &str) -> Option<u32> {
        let t = self.find(KIND_STRUCT, name)?;
        self.member_offset_in(t, member, 0)
    }

    /// Like `member_offset`, for a struct known by its typedef name
    /// (`nv_dma_device_t`), which may name an anonymous struct.
    pub fn typedef_member_offset(&self, typedef: &str, member: &str) -> Option<u32> {
        let mut t = self.find(KIND_TYPEDEF, typedef)?;
        for _ in 0..8 {
            t = self.types.get(t.size_or_type as usize)?;
            if t.kind == KIND_STRUCT {
                return self.member_offset_in(t, member, 0);
            }
            if t.kind != KIND_TYPEDEF {
                return None;
            }
        }
        None
    }

    fn member_offset_in(&self, t: &Type, member: &str, depth: u32) -> Option<u32> {
        if depth > 8 {
            return None;
        }
        for &(name_off, ty, offset) in &t.members {
            let bit_off = if t.kind_flag {
                offset & 0x00ff_ffff
            } else {
                offset
            };
            if name_off == 0 {
                let inner = self.types.get(ty as usize)?;
                if matches!(inner.kind, KIND_STRUCT | KIND_UNION) {
                    if let Some(o) = self.member_offset_in(inner, member, depth + 1) {
                        return Some(bit_off / 8 + o);
                    }
                }
            } else if self.name(name_off) == member {
                if bit_off % 8 != 0 {
                    return None;
                }
                return Some(bit_off / 8);
            }
        }
        None
    }

    /// Number of TP_PROTO arguments of a tracepoint, from the
    /// `typedef void (*btf_trace_<name>)(void *__data, ...)` the kernel emits
    /// for every tracepoint it (or the module) defines.
    pub fn tracepoint_args(&self, name: &str) -> Option<usize> {
        let td = self.find(KIND_TYPEDEF, &format!("btf_trace_{name}"))?;
        let ptr = self.types.get(td.size_or_type as usize)?;
        if ptr.kind != KIND_PTR {
            return None;
        }
        let proto = self.types.get(ptr.size_or_type as usize)?;
        if proto.kind != KIND_FUNC_PROTO {
            return None;
        }
        Some((proto.vlen as usize).saturating_sub(1))
    }

    /// Number of types, for diagnostics.
    pub fn len(&self) -> usize {
        self.types.len()
    }

    pub fn is_empty(&self) -> bool {
        self.types.len() <= 1
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn push_str(strings: &mut Vec<u8>, s: &str) -> u32 {
        let off = strings.len() as u32;
        strings.extend_from_slice(s.as_bytes());
        strings.push(0);
        off
    }

    /// A hand-assembled BTF blob: int, struct kobject { char *name; },
    /// struct device { u64 pad; struct kobject kobj; }, and a tracepoint
    /// typedef with two arguments.
    fn sample() -> Vec<u8> {
        let mut strings = vec![0u8];
        let s_int = push_str(&mut strings, "long");
        let s_kobj = push_str(&mut strings, "kobject");
        let s_name = push_str(&mut strings, "name");
        let s_dev = push_str(&mut strings, "device");
        let s_pad = push_str(&mut strings, "pad");
        let s_kobjm = push_str(&mut strings, "kobj");
        let s_td = push_str(&mut strings, "btf_trace_map");
        let s_pc = push_str(&mut strings, "__preempt_count");
        let s_i32 = push_str(&mut strings, "int");
        let s_plain = push_str(&mut strings, "jiffies");
        let s_percpu = push_str(&mut strings, ".data..percpu");
        let mut types = Vec::new();
        let mut ty = |words: &[u32]| {
            for w in words {
                types.extend_from_slice(&w.to_le_bytes());
            }
        };
        let info = |kind: u32, vlen: u32| (kind << 24) | vlen;
        ty(&[s_int, info(1, 0), 8, 64]); // 1: long
        ty(&[0, info(2, 0), 1]); // 2: ptr -> long
        ty(&[s_kobj, info(4, 1), 8, s_name, 2, 0]); // 3: struct kobject
        ty(&[s_dev, info(4, 2), 16, s_pad, 1, 0, s_kobjm, 3, 64]); // 4: struct device
        ty(&[0, info(13, 3), 0, 0, 2, 0, 1, 0, 1]); // 5: proto(void*, long, long)
        ty(&[0, info(2, 0), 5]); // 6: ptr -> proto
        ty(&[s_td, info(8, 0), 6]); // 7: typedef btf_trace_map
        ty(&[s_pc, info(14, 0), 11, 1]); // 8: var __preempt_count (int)
        ty(&[s_plain, info(14, 0), 1, 1]); // 9: var jiffies, not per-CPU
        ty(&[s_percpu, info(15, 1), 8, 8, 0, 4]); // 10: datasec { var 8 }
        ty(&[s_i32, info(1, 0), 4, (1 << 24) | 32]); // 11: int
        let mut out = Vec::new();
        out.extend_from_slice(&BTF_MAGIC.to_le_bytes());
        out.push(1);
        out.push(0);
        for w in [
            24u32,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&types);
        out.extend_from_slice(&strings);
        out
    }

    /// The sample, parsed (other modules' tests read it too).
    pub(crate) fn sample_btf() -> Btf {
        Btf::from_bytes(&sample()).expect("parse sample BTF")
    }

    #[test]
    fn reads_members_and_tracepoint_args() {
        let dir = std::env::temp_dir().join(format!("gdt-btf-{}", std::process::id()));
        std::fs::write(&dir, sample()).expect("write sample BTF");
        let btf = Btf::from_file(&dir).expect("parse sample BTF");
        std::fs::remove_file(&dir).ok();
        assert_eq!(btf.len(), sample_btf().len());
        assert_eq!(btf.member_offset("device", "kobj"), Some(8));
        assert_eq!(btf.member_offset("kobject", "name"), Some(0));
        assert_eq!(btf.member_offset("device", "missing"), None);
        assert_eq!(btf.struct_size("device"), Some(16));
        assert_eq!(btf.tracepoint_args("map"), Some(2));
        assert_eq!(btf.tracepoint_args("unmap"), None);
        let pc = btf
            .percpu_var("__preempt_count")
            .expect("a per-CPU variable");
        assert_eq!((pc.id, pc.kind, pc.size), (8, KIND_INT, 4));
        assert_eq!(btf.percpu_var("jiffies"), None, "not in .data..percpu");
        assert_eq!(btf.percpu_var("pcpu_hot"), None);
    }

    #[test]
    fn rejects_garbage() {
        let dir = std::env::temp_dir().join(format!("gdt-btf-bad-{}", std::process::id()));
        std::fs::write(&dir, b"not btf at all, definitely not").expect("write");
        let err = Btf::from_file(&dir).expect_err("garbage must not parse");
        std::fs::remove_file(&dir).ok();
        assert!(format!("{err:#}").contains("bad magic"), "{err:#}");
    }

    // The running kernel's BTF: tests/host (`running_kernel_btf_gives_the_offsets`).
}
