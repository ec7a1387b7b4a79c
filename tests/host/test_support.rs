//! The test-support object (gpudirect-trace-ebpf/src/test_support.rs, never
//! part of the tool): programs the host tests and benchmarks load next to
//! the tool's own.

use aya::{programs::RawTracePoint, Ebpf};

static TEST_SUPPORT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gdt-test-support"));

/// The object with the raw tracepoint programs `programs` loaded.
pub fn load(programs: &[&str]) -> Ebpf {
    let mut obj = Ebpf::load(TEST_SUPPORT).expect("load the test-support object");
    for p in programs {
        let prog: &mut RawTracePoint = obj
            .program_mut(p)
            .unwrap_or_else(|| panic!("{p}"))
            .try_into()
            .expect("raw tracepoint");
        prog.load()
            .unwrap_or_else(|e| panic!("{p} passes the verifier: {e}"));
    }
    obj
}

/// `obj`'s raw tracepoint program `name`.
pub fn program<'a>(obj: &'a Ebpf, name: &str) -> &'a RawTracePoint {
    obj.program(name)
        .unwrap_or_else(|| panic!("{name}"))
        .try_into()
        .expect("raw tracepoint")
}
