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
    os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd, RawFd},
};

use aya::{maps::Map, Ebpf};
use aya_obj::{
    generated::{
        bpf_attach_type::{BPF_TRACE_FENTRY, BPF_TRACE_FEXIT},
        bpf_attr, bpf_btf_info, bpf_cmd, bpf_insn, bpf_prog_info,
        bpf_prog_type::BPF_PROG_TYPE_TRACING,
    },
    Object,
};

fn sys_bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<i64> {
    // SAFETY: `attr` is a zero-initialised bpf_attr whose pointers (if any)
    // point at buffers that outlive the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut bpf_attr,
            std::mem::size_of::<bpf_attr>() as u32,
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn zeroed_attr() -> bpf_attr {
    // SAFETY: bpf_attr is a plain C union of integers; all-zero is valid
    // and is what the kernel requires of unused fields.
    unsafe { std::mem::zeroed() }
}

fn owned(fd: i64) -> OwnedFd {
    // SAFETY: the kernel just returned this new descriptor to us.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

/// The kernel's BTF object of `module` (found by walking every loaded BTF
/// object: the kernel offers no lookup by name).
pub fn module_btf_fd(module: &str) -> io::Result<OwnedFd> {
    let mut id = 0u32;
    loop {
        let mut attr = zeroed_attr();
        attr.__bindgen_anon_6.__bindgen_anon_1.start_id = id;
        match sys_bpf(bpf_cmd::BPF_BTF_GET_NEXT_ID, &mut attr) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no BTF object named {module} is loaded"),
                ))
            }
            Err(e) => return Err(e),
        }
        // SAFETY: the kernel filled `next_id`.
        id = unsafe { attr.__bindgen_anon_6.next_id };
        let mut attr = zeroed_attr();
        attr.__bindgen_anon_6.__bindgen_anon_1.btf_id = id;
        let fd = match sys_bpf(bpf_cmd::BPF_BTF_GET_FD_BY_ID, &mut attr) {
            Ok(fd) => owned(fd),
            // Unloaded between the two calls.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) => return Err(e),
        };
        let mut name = [0u8; 64];
        // SAFETY: plain integers.
        let mut info: bpf_btf_info = unsafe { std::mem::zeroed() };
        info.name = name.as_mut_ptr() as u64;
        info.name_len = name.len() as u32;
        let mut attr = zeroed_attr();
        attr.info.bpf_fd = fd.as_raw_fd() as u32;
        attr.info.info_len = std::mem::size_of::<bpf_btf_info>() as u32;
        attr.info.info = &mut info as *mut bpf_btf_info as u64;
        sys_bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
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

/// Loads `program` as fentry (`exit` false) or fexit on the function with
/// BTF id `btf_id` of the module whose BTF object is `module_btf`, and
/// attaches it.
pub fn attach(
    obj: &RelocatedObject,
    program: &str,
    exit: bool,
    btf_id: u32,
    module_btf: BorrowedFd<'_>,
) -> Result<ModuleHook, String> {
    let insns = obj
        .instructions(program)
        .ok_or_else(|| format!("program {program} missing from the object"))?;
    let license = CString::new("GPL").expect("no NUL");
    let mut log = vec![0u8; 64 * 1024];
    let load = |log_level: u32, log: &mut [u8]| -> io::Result<OwnedFd> {
        let mut attr = zeroed_attr();
        // SAFETY: writing plain integer fields of the union member in use.
        let a = unsafe { &mut attr.__bindgen_anon_3 };
        a.prog_type = BPF_PROG_TYPE_TRACING as u32;
        a.expected_attach_type = if exit {
            BPF_TRACE_FEXIT
        } else {
            BPF_TRACE_FENTRY
        } as u32;
        a.insns = insns.as_ptr() as u64;
        a.insn_cnt = insns.len() as u32;
        a.license = license.as_ptr() as u64;
        a.attach_btf_id = btf_id;
        a.__bindgen_anon_1.attach_btf_obj_fd = module_btf.as_raw_fd() as u32;
        for (dst, src) in a.prog_name.iter_mut().zip(program.bytes().take(15)) {
            *dst = src as libc::c_char;
        }
        if log_level > 0 {
            a.log_level = log_level;
            a.log_buf = log.as_mut_ptr() as u64;
            a.log_size = log.len() as u32;
        }
        sys_bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr).map(owned)
    };
    let prog = match load(0, &mut log) {
        Ok(fd) => fd,
        Err(first) => {
            // Load again with the verifier's log, for a useful message.
            let _ = load(1, &mut log);
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            let tail: Vec<&str> = text.lines().rev().take(3).collect();
            return Err(if tail.is_empty() {
                format!("{program}: {}", super::timing::refusal(&first))
            } else {
                format!(
                    "verifier rejected {program} ({first}): {}",
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                )
            });
        }
    };
    let mut attr = zeroed_attr();
    attr.raw_tracepoint.prog_fd = prog.as_raw_fd() as u32;
    let link = sys_bpf(bpf_cmd::BPF_RAW_TRACEPOINT_OPEN, &mut attr)
        .map(owned)
        .map_err(|e| format!("attaching {program} failed: {e}"))?;
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
        // SAFETY: plain integers.
        let mut info: bpf_prog_info = unsafe { std::mem::zeroed() };
        let mut attr = zeroed_attr();
        attr.info.bpf_fd = self.prog.as_raw_fd() as u32;
        attr.info.info_len = std::mem::size_of::<bpf_prog_info>() as u32;
        attr.info.info = &mut info as *mut bpf_prog_info as u64;
        sys_bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
        Ok((info.run_cnt, info.run_time_ns))
    }
}
