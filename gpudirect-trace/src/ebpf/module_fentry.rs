//! fentry/fexit on functions of loadable modules: the NVIDIA driver's
//! nv_dma_* and nvidia_p2p_* entry points.
//!
//! A tracing program aimed at a module function must name the module's BTF
//! object at load time (`attach_btf_obj_fd`, Linux 5.11+), and aya 0.13 only
//! loads fentry against vmlinux (aya-rs/aya#301). So these few programs are
//! loaded here: the same embedded object, parsed and relocated with aya-obj
//! against the maps the main `Ebpf` already created (so they share every map
//! with the other programs), then BPF_PROG_LOAD and BPF_RAW_TRACEPOINT_OPEN.
//! The kernel's verifier checks them exactly as it checks aya's.

use std::{
    collections::HashSet,
    ffi::CString,
    io,
    os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, OwnedFd, RawFd},
};

use aya::{maps::Map, Ebpf};
use aya_obj::{
    generated::{
        bpf_attach_type::{BPF_TRACE_FENTRY, BPF_TRACE_FEXIT},
        bpf_insn,
        bpf_prog_type::BPF_PROG_TYPE_TRACING,
    },
    Object,
};

use super::{
    explain::{self, Env, Failure, Stage, Target},
    sys,
};

/// The kernel's BTF object of `module` (found by walking every loaded BTF
/// object: the kernel offers no lookup by name).
pub fn module_btf_fd(module: &str) -> io::Result<OwnedFd> {
    let mut id = 0u32;
    loop {
        id = sys::btf_next_id(id)?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("no BTF object named {module} is loaded"),
            )
        })?;
        // None: unloaded between the two calls.
        let Some(fd) = sys::btf_fd_by_id(id)? else {
            continue;
        };
        let mut name = [0u8; 64];
        let mut info = sys::BtfInfo {
            name: name.as_mut_ptr() as u64,
            name_len: name.len() as u32,
            ..Default::default()
        };
        sys::obj_info(fd.as_fd(), &mut info)?;
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        if info.kernel_btf != 0 && &name[..end] == module.as_bytes() {
            return Ok(fd);
        }
    }
}

fn map_fd(map: &Map) -> BorrowedFd<'_> {
    let data = match map {
        Map::Array(m)
        | Map::BloomFilter(m)
        | Map::CpuMap(m)
        | Map::DevMap(m)
        | Map::DevMapHash(m)
        | Map::HashMap(m)
        | Map::LpmTrie(m)
        | Map::LruHashMap(m)
        | Map::PerCpuArray(m)
        | Map::PerCpuHashMap(m)
        | Map::PerCpuLruHashMap(m)
        | Map::PerfEventArray(m)
        | Map::ProgramArray(m)
        | Map::Queue(m)
        | Map::RingBuf(m)
        | Map::SockHash(m)
        | Map::SockMap(m)
        | Map::Stack(m)
        | Map::StackTraceMap(m)
        | Map::Unsupported(m)
        | Map::XskMap(m) => m,
    };
    data.fd().as_fd()
}

/// The eBPF object relocated against the maps of a loaded `Ebpf`: map
/// references point at the same kernel maps, calls are resolved.
pub struct RelocatedObject {
    obj: Object,
}

impl RelocatedObject {
    pub fn new(bytes: &[u8], ebpf: &Ebpf) -> Result<Self, String> {
        let mut obj = Object::parse(bytes).map_err(|e| format!("parsing the eBPF object: {e}"))?;
        let maps: Vec<(String, RawFd, aya_obj::Map)> = obj
            .maps
            .iter()
            .map(|(name, desc)| {
                ebpf.map(name)
                    .map(|m| (name.clone(), map_fd(m).as_raw_fd(), desc.clone()))
                    .ok_or_else(|| format!("map {name} is not loaded"))
            })
            .collect::<Result<_, _>>()?;
        let text_sections: HashSet<usize> = obj.functions.keys().map(|(s, _)| *s).collect();
        obj.relocate_maps(
            maps.iter().map(|(n, fd, m)| (n.as_str(), *fd, m)),
            &text_sections,
        )
        .map_err(|e| format!("relocating maps: {e}"))?;
        obj.relocate_calls(&text_sections)
            .map_err(|e| format!("relocating calls: {e}"))?;
        Ok(Self { obj })
    }

    pub fn instructions(&self, program: &str) -> Option<&[bpf_insn]> {
        let prog = self.obj.programs.get(program)?;
        let function = self.obj.functions.get(&prog.function_key())?;
        Some(&function.instructions)
    }
}

/// A loaded and attached tracing program; detached when dropped.
pub struct ModuleHook {
    pub program: String,
    pub prog: OwnedFd,
    /// Keeps the attachment alive.
    _link: OwnedFd,
}

/// Loads `program` as fentry (`exit` false) or fexit on `func`, the
/// function with BTF id `btf_id` of the module whose BTF object is
/// `module_btf`, and attaches it.
pub fn attach(
    obj: &RelocatedObject,
    program: &str,
    exit: bool,
    (func, btf_id): (&str, u32),
    module_btf: BorrowedFd<'_>,
    env: &Env,
) -> Result<ModuleHook, String> {
    let insns = obj
        .instructions(program)
        .ok_or_else(|| format!("program {program} missing from the object"))?;
    let license = CString::new("GPL").expect("no NUL");
    let mut log = vec![0u8; 64 * 1024];
    let load = |log_level: u32, log: &mut [u8]| -> io::Result<OwnedFd> {
        let mut attr = sys::ProgLoadAttr {
            prog_type: BPF_PROG_TYPE_TRACING as u32,
            expected_attach_type: if exit {
                BPF_TRACE_FEXIT
            } else {
                BPF_TRACE_FENTRY
            } as u32,
            insns: insns.as_ptr() as u64,
            insn_cnt: insns.len() as u32,
            license: license.as_ptr() as u64,
            attach_btf_id: btf_id,
            attach_btf_obj_fd: module_btf.as_raw_fd() as u32,
            ..Default::default()
        };
        for (dst, src) in attr.prog_name.iter_mut().zip(program.bytes().take(15)) {
            *dst = src;
        }
        if log_level > 0 {
            attr.log_level = log_level;
            attr.log_buf = log.as_mut_ptr() as u64;
            attr.log_size = log.len() as u32;
        }
        sys::prog_load(&mut attr)
    };
    let prog = match load(0, &mut log) {
        Ok(fd) => fd,
        Err(first) => {
            // Load again with the verifier's log, for a useful message.
            let _ = load(1, &mut log);
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            let failure = Failure::from_io(&first, &text);
            let why = explain::explain(&failure, Stage::Load, Target::Fentry { name: func }, env);
            return Err(format!("{program}: {why}"));
        }
    };
    let link = sys::raw_tracepoint_open(prog.as_fd(), None).map_err(|e| {
        let why = explain::explain(
            &Failure::from_io(&e, ""),
            Stage::Attach,
            Target::Fentry { name: func },
            env,
        );
        format!("attaching {program} failed: {why}")
    })?;
    Ok(ModuleHook {
        program: program.to_owned(),
        prog,
        _link: link,
    })
}

impl ModuleHook {
    /// The kernel's accounting of this program: (run count, run time in ns);
    /// non-zero only while kernel.bpf_stats_enabled is 1.
    pub fn run_stats(&self) -> io::Result<(u64, u64)> {
        let mut info = sys::ProgInfo::default();
        sys::obj_info(self.prog.as_fd(), &mut info)?;
        Ok((info.run_cnt, info.run_time_ns))
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::{
        super::sys::{fake, BtfInfo, Cmd, IdAttr, ObjInfoAttr, Syscall},
        module_btf_fd,
    };

    /// The kernel's BTF objects as (id, name, kernel_btf); None: unloaded
    /// between BPF_BTF_GET_NEXT_ID and BPF_BTF_GET_FD_BY_ID.
    const OBJECTS: [(u32, Option<&str>, u32); 5] = [
        (1, Some("vmlinux"), 1),
        (4, None, 1),
        (6, Some("nvidia"), 0),
        (9, Some("nvidia_uvm"), 1),
        (12, Some("nvidia"), 1),
    ];

    /// Answers as a kernel holding `OBJECTS`; records the ids opened.
    fn kernel(
        opened: std::rc::Rc<std::cell::RefCell<Vec<u32>>>,
    ) -> impl FnMut(&Syscall<'_>) -> io::Result<i64> {
        let mut current = 0u32;
        move |c| {
            let Syscall::Bpf { cmd, attr, .. } = *c else {
                panic!("{c:?}")
            };
            match cmd {
                Cmd::BtfGetNextId => {
                    // SAFETY: this command's attr is an IdAttr.
                    let a = unsafe { &mut *attr.cast::<IdAttr>() };
                    let Some(next) = OBJECTS.iter().find(|o| o.0 > a.id) else {
                        return fake::errno(libc::ENOENT);
                    };
                    a.next_id = next.0;
                    Ok(0)
                }
                Cmd::BtfGetFdById => {
                    // SAFETY: as above.
                    let id = unsafe { &*attr.cast::<IdAttr>() }.id;
                    let o = OBJECTS.iter().find(|o| o.0 == id).expect("a listed id");
                    if o.1.is_none() {
                        return fake::errno(libc::ENOENT);
                    }
                    current = id;
                    opened.borrow_mut().push(id);
                    fake::descriptor()
                }
                Cmd::ObjGetInfoByFd => {
                    // SAFETY: this command's attr is an ObjInfoAttr whose
                    // `info` the caller made a BtfInfo with a name buffer
                    // of `name_len` bytes.
                    let info = unsafe {
                        let a = &*attr.cast::<ObjInfoAttr>();
                        &mut *(a.info as *mut BtfInfo)
                    };
                    let o = OBJECTS.iter().find(|o| o.0 == current).expect("present");
                    let name = o.1.expect("present").as_bytes();
                    assert!(name.len() < info.name_len as usize);
                    // SAFETY: within the caller's buffer (checked above).
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            name.as_ptr(),
                            info.name as *mut u8,
                            name.len(),
                        );
                        *(info.name as *mut u8).add(name.len()) = 0;
                    }
                    info.kernel_btf = o.2;
                    Ok(0)
                }
                _ => panic!("{c:?}"),
            }
        }
    }

    #[test]
    fn a_modules_btf_is_found_by_name_past_vanished_and_user_objects() {
        let opened = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let fd = fake::with(kernel(opened.clone()), || module_btf_fd("nvidia"));
        assert!(fd.is_ok(), "{fd:?}");
        // 4 vanished; 6 is a program's BTF named like the module; 9 is
        // another module whose name starts like it.
        assert_eq!(*opened.borrow(), [1, 6, 9, 12]);
    }

    #[test]
    fn a_module_without_btf_is_not_found_and_says_so() {
        let opened = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let e = fake::with(kernel(opened), || module_btf_fd("nvidia_p2p")).expect_err("an error");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert_eq!(e.to_string(), "no BTF object named nvidia_p2p is loaded");
    }
}
