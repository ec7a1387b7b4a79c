//! bpf(): one typed `#[repr(C)]` struct per command, the member of the
//! kernel's `union bpf_attr` (include/uapi/linux/bpf.h) that the command
//! reads, as far as we use it, with its padding spelled out and its size
//! asserted at compile time. The kernel accepts a shorter attr than its own
//! (it zeroes the rest) and a longer one whose tail is zero, so a prefix is
//! exact on every kernel that has the fields we set. The tests check each
//! offset against aya-obj's bindgen of the same header.

use std::{
    ffi::CStr,
    io,
    os::fd::{AsRawFd as _, BorrowedFd, OwnedFd},
};

/// `enum bpf_cmd` values (stable kernel ABI).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Cmd {
    ProgLoad = 5,
    ProgTestRun = 10,
    ObjGetInfoByFd = 15,
    RawTracepointOpen = 17,
    BtfGetFdById = 19,
    BtfGetNextId = 23,
}

/// The attr of one command. Sealed: only the `#[repr(C)]` structs below,
/// whose every byte is an integer field or explicit padding.
pub trait Attr: sealed::Sealed {
    const CMD: Cmd;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! attr {
    ($t:ty, $cmd:expr, $size:expr) => {
        impl sealed::Sealed for $t {}
        impl Attr for $t {
            const CMD: Cmd = $cmd;
        }
        const _: () = assert!(std::mem::size_of::<$t>() == $size);
    };
}

/// BPF_PROG_LOAD: `union bpf_attr`'s anonymous prog-load member, up to
/// `attach_btf_obj_fd` (5.11+) and the u32 after it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ProgLoadAttr {
    pub prog_type: u32,
    pub insn_cnt: u32,
    pub insns: u64,
    pub license: u64,
    pub log_level: u32,
    pub log_size: u32,
    pub log_buf: u64,
    pub kern_version: u32,
    pub prog_flags: u32,
    pub prog_name: [u8; 16],
    pub prog_ifindex: u32,
    pub expected_attach_type: u32,
    pub prog_btf_fd: u32,
    pub func_info_rec_size: u32,
    pub func_info: u64,
    pub func_info_cnt: u32,
    pub line_info_rec_size: u32,
    pub line_info: u64,
    pub line_info_cnt: u32,
    pub attach_btf_id: u32,
    /// `attach_prog_fd` for extensions; the module's BTF object for tracing.
    pub attach_btf_obj_fd: u32,
    /// `core_relo_cnt` (5.17+); zero: no CO-RE relocations.
    pub core_relo_cnt: u32,
}
attr!(ProgLoadAttr, Cmd::ProgLoad, 120);

/// BPF_{PROG,MAP,BTF,LINK}_GET_NEXT_ID and BPF_*_GET_FD_BY_ID.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct IdAttr {
    /// `start_id` (GET_NEXT_ID) or the object's id (GET_FD_BY_ID).
    pub id: u32,
    pub next_id: u32,
    pub open_flags: u32,
}

/// BPF_BTF_GET_NEXT_ID.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BtfNextIdAttr(pub IdAttr);
attr!(BtfNextIdAttr, Cmd::BtfGetNextId, 12);

/// BPF_BTF_GET_FD_BY_ID.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BtfFdByIdAttr(pub IdAttr);
attr!(BtfFdByIdAttr, Cmd::BtfGetFdById, 12);

/// BPF_OBJ_GET_INFO_BY_FD.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ObjInfoAttr {
    pub bpf_fd: u32,
    pub info_len: u32,
    pub info: u64,
}
attr!(ObjInfoAttr, Cmd::ObjGetInfoByFd, 16);

/// BPF_RAW_TRACEPOINT_OPEN. For a tracing program (fentry/fexit) `name`
/// is 0: the program's attach target was fixed at load.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RawTracepointAttr {
    pub name: u64,
    pub prog_fd: u32,
    /// A bitfield in 6.10+ headers, then `cookie`; zero here.
    pub _pad: u32,
}
attr!(RawTracepointAttr, Cmd::RawTracepointOpen, 16);

/// BPF_PROG_TEST_RUN: the `test` member (the host tests' driver, and
/// the loader's reading of jiffies, `ebpf/jiffies.rs`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct TestRunAttr {
    pub prog_fd: u32,
    pub retval: u32,
    pub data_size_in: u32,
    pub data_size_out: u32,
    pub data_in: u64,
    pub data_out: u64,
    pub repeat: u32,
    pub duration: u32,
    pub ctx_size_in: u32,
    pub ctx_size_out: u32,
    pub ctx_in: u64,
    pub ctx_out: u64,
    pub flags: u32,
    pub cpu: u32,
    pub batch_size: u32,
    pub _pad: u32,
}
attr!(TestRunAttr, Cmd::ProgTestRun, 80);

/// What BPF_OBJ_GET_INFO_BY_FD fills (sealed like `Attr`).
pub trait ObjInfo: sealed::Sealed + Default {}

/// `struct bpf_btf_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BtfInfo {
    pub btf: u64,
    pub btf_size: u32,
    pub id: u32,
    pub name: u64,
    pub name_len: u32,
    pub kernel_btf: u32,
}
impl sealed::Sealed for BtfInfo {}
impl ObjInfo for BtfInfo {}
const _: () = assert!(std::mem::size_of::<BtfInfo>() == 32);

/// `struct bpf_prog_info` up to `recursion_misses` (5.12+): only the run
/// statistics are named; the kernel fills the rest, which we ignore.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProgInfo {
    pub _head: [u8; 192],
    /// Non-zero only while kernel.bpf_stats_enabled is 1 (5.1+).
    pub run_time_ns: u64,
    pub run_cnt: u64,
    pub recursion_misses: u64,
}
impl Default for ProgInfo {
    fn default() -> Self {
        Self {
            _head: [0; 192],
            run_time_ns: 0,
            run_cnt: 0,
            recursion_misses: 0,
        }
    }
}
impl sealed::Sealed for ProgInfo {}
impl ObjInfo for ProgInfo {}
const _: () = assert!(std::mem::size_of::<ProgInfo>() == 216);

/// The one `bpf()` call: `A::CMD` with `attr`. Returns the kernel's
/// non-negative result (a new fd for the commands that create one).
///
/// # Safety
/// Every address stored in `attr` (and in the structures it points at)
/// must be valid for the kernel to read or write as the command does,
/// for the duration of the call.
pub unsafe fn bpf<A: Attr>(attr: &mut A) -> io::Result<i64> {
    // SAFETY: `attr` is a plain-integer #[repr(C)] struct of exactly the
    // size passed; the caller vouches for the addresses inside it.
    unsafe {
        super::call(super::Syscall::Bpf {
            cmd: A::CMD,
            attr: (attr as *mut A).cast(),
            size: std::mem::size_of::<A>() as u32,
        })
    }
}

/// BPF_PROG_LOAD. `attr`'s pointers (instructions, license, log buffer)
/// must be valid; the caller builds them from slices it holds.
pub fn prog_load(attr: &mut ProgLoadAttr) -> io::Result<OwnedFd> {
    // SAFETY: see the doc comment; the kernel writes only into log_buf,
    // at most log_size bytes.
    unsafe { bpf(attr) }.map(super::owned)
}

/// BPF_PROG_LOAD of a few hand-written instructions under the GPL: how the
/// loader asks the kernel what it takes (a helper, an instruction) and
/// reads what only a program can (jiffies).
pub fn prog_load_insns(prog_type: u32, insns: &[u64]) -> io::Result<OwnedFd> {
    let license = c"GPL";
    let mut attr = ProgLoadAttr {
        prog_type,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        ..Default::default()
    };
    prog_load(&mut attr)
}

/// One instruction, as the kernel reads it (little-endian `struct bpf_insn`).
pub const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    let [o0, o1] = off.to_le_bytes();
    let [i0, i1, i2, i3] = imm.to_le_bytes();
    u64::from_le_bytes([code, (src << 4) | (dst & 0xf), o0, o1, i0, i1, i2, i3])
}

/// The BTF object id after `start` (0: the first); None when there is none.
pub fn btf_next_id(start: u32) -> io::Result<Option<u32>> {
    let mut attr = BtfNextIdAttr(IdAttr {
        id: start,
        ..Default::default()
    });
    // SAFETY: no pointers.
    match unsafe { bpf(&mut attr) } {
        Ok(_) => Ok(Some(attr.0.next_id)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A descriptor of BTF object `id`; None when it went away (unloaded).
pub fn btf_fd_by_id(id: u32) -> io::Result<Option<OwnedFd>> {
    let mut attr = BtfFdByIdAttr(IdAttr {
        id,
        ..Default::default()
    });
    // SAFETY: no pointers.
    match unsafe { bpf(&mut attr) } {
        Ok(fd) => Ok(Some(super::owned(fd))),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// BPF_OBJ_GET_INFO_BY_FD into `info`. Pointers inside `info` (e.g.
/// `BtfInfo::name`) must point at buffers of the lengths given there.
pub fn obj_info<T: ObjInfo>(fd: BorrowedFd<'_>, info: &mut T) -> io::Result<()> {
    let mut attr = ObjInfoAttr {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: std::mem::size_of::<T>() as u32,
        info: info as *mut T as u64,
    };
    // SAFETY: `info` is a live, writable T of `info_len` bytes.
    unsafe { bpf(&mut attr) }.map(|_| ())
}

/// BPF_RAW_TRACEPOINT_OPEN: attaches `prog` (to tracepoint `name`, or, for
/// tracing programs, to the target fixed at load). The link detaches
/// when the returned descriptor closes.
pub fn raw_tracepoint_open(prog: BorrowedFd<'_>, name: Option<&CStr>) -> io::Result<OwnedFd> {
    let mut attr = RawTracepointAttr {
        name: name.map_or(0, |n| n.as_ptr() as u64),
        prog_fd: prog.as_raw_fd() as u32,
        _pad: 0,
    };
    // SAFETY: `name` outlives the call.
    unsafe { bpf(&mut attr) }.map(super::owned)
}

/// BPF_PROG_TEST_RUN; the kernel writes `retval` (and `duration`) back.
pub fn prog_test_run(attr: &mut TestRunAttr) -> io::Result<()> {
    // SAFETY: the caller's ctx_in/data_in point at buffers of the sizes
    // given; ctx_out/data_out are 0 or point at buffers of their sizes.
    unsafe { bpf(attr) }.map(|_| ())
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use aya_obj::generated as g;

    use super::*;

    /// Every field at the offset the kernel's header gives it (aya-obj's
    /// bindgen of include/uapi/linux/bpf.h).
    #[test]
    fn attr_layouts_match_the_kernel_header() {
        type L = g::bpf_attr__bindgen_ty_4;
        macro_rules! same {
            ($ours:ty, $theirs:ty, $($f:ident => $g:ident),+) => {
                $(assert_eq!(
                    offset_of!($ours, $f),
                    offset_of!($theirs, $g),
                    concat!(stringify!($ours), ".", stringify!($f))
                );)+
            };
        }
        same!(ProgLoadAttr, L,
            prog_type => prog_type, insn_cnt => insn_cnt, insns => insns,
            license => license, log_level => log_level, log_size => log_size,
            log_buf => log_buf, kern_version => kern_version,
            prog_flags => prog_flags, prog_name => prog_name,
            prog_ifindex => prog_ifindex,
            expected_attach_type => expected_attach_type,
            prog_btf_fd => prog_btf_fd, func_info_rec_size => func_info_rec_size,
            func_info => func_info, func_info_cnt => func_info_cnt,
            line_info_rec_size => line_info_rec_size, line_info => line_info,
            line_info_cnt => line_info_cnt, attach_btf_id => attach_btf_id,
            attach_btf_obj_fd => __bindgen_anon_1, core_relo_cnt => core_relo_cnt);
        assert_eq!(offset_of!(L, fd_array), size_of::<ProgLoadAttr>());
        same!(IdAttr, g::bpf_attr__bindgen_ty_8,
            id => __bindgen_anon_1, next_id => next_id, open_flags => open_flags);
        assert_eq!(size_of::<IdAttr>(), size_of::<g::bpf_attr__bindgen_ty_8>());
        same!(ObjInfoAttr, g::bpf_attr__bindgen_ty_9,
            bpf_fd => bpf_fd, info_len => info_len, info => info);
        same!(RawTracepointAttr, g::bpf_attr__bindgen_ty_11, name => name, prog_fd => prog_fd);
        assert_eq!(offset_of!(g::bpf_attr__bindgen_ty_11, cookie), 16);
        same!(TestRunAttr, g::bpf_attr__bindgen_ty_7,
            prog_fd => prog_fd, retval => retval, data_size_in => data_size_in,
            data_size_out => data_size_out, data_in => data_in, data_out => data_out,
            repeat => repeat, duration => duration, ctx_size_in => ctx_size_in,
            ctx_size_out => ctx_size_out, ctx_in => ctx_in, ctx_out => ctx_out,
            flags => flags, cpu => cpu, batch_size => batch_size);
        assert_eq!(
            size_of::<TestRunAttr>(),
            size_of::<g::bpf_attr__bindgen_ty_7>()
        );
        same!(BtfInfo, g::bpf_btf_info,
            btf => btf, btf_size => btf_size, id => id, name => name,
            name_len => name_len, kernel_btf => kernel_btf);
        assert_eq!(size_of::<BtfInfo>(), size_of::<g::bpf_btf_info>());
        same!(ProgInfo, g::bpf_prog_info,
            run_time_ns => run_time_ns, run_cnt => run_cnt,
            recursion_misses => recursion_misses);
    }

    #[test]
    fn command_numbers_are_the_kernels() {
        use g::bpf_cmd as k;
        for (ours, theirs) in [
            (Cmd::ProgLoad, k::BPF_PROG_LOAD),
            (Cmd::ProgTestRun, k::BPF_PROG_TEST_RUN),
            (Cmd::ObjGetInfoByFd, k::BPF_OBJ_GET_INFO_BY_FD),
            (Cmd::RawTracepointOpen, k::BPF_RAW_TRACEPOINT_OPEN),
            (Cmd::BtfGetFdById, k::BPF_BTF_GET_FD_BY_ID),
            (Cmd::BtfGetNextId, k::BPF_BTF_GET_NEXT_ID),
        ] {
            assert_eq!(ours as u32, theirs as u32, "{ours:?}");
        }
    }

    /// The kernel's errno comes back as an `io::Error`, absence as None:
    /// no BTF object has id u32::MAX (ENOENT; EPERM where bpf() is refused
    /// to this user).
    #[test]
    fn errors_are_io_errors_with_the_errno() {
        match btf_fd_by_id(u32::MAX) {
            Ok(None) => {}
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}"),
            Ok(Some(_)) => panic!("a BTF object with id u32::MAX"),
        }
    }
}
