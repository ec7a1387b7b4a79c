//! Driving the loaded programs with BPF_PROG_TEST_RUN and collecting what
//! comes out, exactly as a live session would.

use std::sync::Arc;

use gpudirect_trace::{
    aggregate::DeviceSnapshot,
    analysis::Analysis,
    decode::decode,
    ebpf::{testrun::run_raw_tracepoint, Tracer, TracerOptions},
    kernel,
    model::{misuse::CheckSetup, TraceClock},
    session::Session,
};

pub fn load_unattached(ring_bytes: u32) -> Tracer {
    Tracer::load(&TracerOptions {
        attach: false,
        ring_bytes,
        ..Default::default()
    })
    .expect("load the eBPF object")
}

/// A streaming session of `--check --stacks` (every map takes its stack),
/// unattached, with a ring of `ring_bytes`.
pub fn stacks_session(ring_bytes: u32) -> Session {
    let tracer = Tracer::load(&TracerOptions {
        attach: false,
        ring_bytes,
        stacks: true,
        ..Default::default()
    })
    .expect("load the eBPF object");
    let mut session = Session::from_tracer(tracer, true);
    session.check = Some(CheckSetup {
        stacks: true,
        ..Default::default()
    });
    session
}

/// Aggregate-only (`--aggregate-only`: counted in the kernel, nothing
/// streamed), unattached.
pub fn load_aggregate_only() -> Tracer {
    Tracer::load(&TracerOptions {
        attach: false,
        stream: false,
        ..Default::default()
    })
    .expect("load the eBPF object")
}

/// A real kernel object standing in for a `struct device`: a location in
/// kernel memory whose first word points at a string we know.
///
/// `dev_name(dev)` is `dev->kobj.name`, a `const char *` at offset 0 of
/// struct device on every supported kernel (the loader checks this in BTF).
/// Kernels without CONFIG_KALLSYMS_ALL (the CI host's) list no data symbols
/// such as `platform_bus`, but they do list `__start___tracepoint_str`: an
/// array of `const char *`, whose strings tracefs prints in `printk_formats`
/// in section order, after the (possibly empty) trace_bprintk formats.
pub struct KnownObject {
    pub addr: u64,
    pub name: String,
    /// Address of the string itself (a `const char *` argument).
    pub string_addr: u64,
}

pub fn known_kernel_object() -> KnownObject {
    let sym =
        |s| kernel::kallsyms_lookup(s).unwrap_or_else(|| panic!("{s} in /proc/kallsyms (root)"));
    let start = sym("__start___tracepoint_str");
    let stop = sym("__stop___tracepoint_str");
    let bprintk = sym("__stop___trace_bprintk_fmt") - sym("__start___trace_bprintk_fmt");
    let tracefs = kernel::ensure_tracefs().expect("tracefs");
    let formats = std::fs::read_to_string(tracefs.join("printk_formats")).expect("printk_formats");
    let lines: Vec<&str> = formats.lines().collect();
    let skip = (bprintk / 8) as usize;
    let entries = ((stop - start) / 8) as usize;
    for i in 0..entries {
        let Some(line) = lines.get(skip + i) else {
            break;
        };
        let Some((addr, text)) = line.split_once(" : ") else {
            continue;
        };
        let text = text.trim_matches('"');
        // printk_formats escapes control characters: pick a plain one that
        // fits DEV_NAME_LEN so the comparison is exact.
        if text.is_empty() || text.len() >= 31 || text.contains('\\') {
            continue;
        }
        let string_addr =
            u64::from_str_radix(addr.trim_start_matches("0x"), 16).expect("hex address");
        return KnownObject {
            addr: start + 8 * i as u64,
            name: text.to_owned(),
            string_addr,
        };
    }
    panic!("no usable __tracepoint_str entry in printk_formats");
}

/// Runs `tracer`'s `program` once with `args` as its raw tracepoint
/// arguments (BPF_PROG_TEST_RUN); it must return 0.
pub fn run_program(tracer: &Tracer, program: &str, args: &[u64]) {
    let fd = tracer
        .program_fd(program)
        .unwrap_or_else(|e| panic!("program {program}: {e:#}"));
    let ret = run_raw_tracepoint(fd, args, None)
        .unwrap_or_else(|e| panic!("BPF_PROG_TEST_RUN {program}: {e}"));
    assert_eq!(ret, 0, "{program} returned {ret}");
}

pub struct Injector {
    pub tracer: Tracer,
    /// The tables and the ledger, as a session keeps them.
    pub analysis: Analysis,
    /// The stand-in device (see `known_kernel_object`).
    pub device: KnownObject,
}

impl Injector {
    /// The common start of a program-driven test: root, the object loaded
    /// unattached with a 1 MiB ring, the stand-in device.
    pub fn as_root() -> Self {
        crate::require_root();
        Self::new(load_unattached(1 << 20))
    }

    pub fn new(tracer: Tracer) -> Self {
        assert_eq!(
            tracer.offsets.device_name, 0,
            "the stand-in device relies on kobj.name at offset 0 of struct device"
        );
        Self {
            tracer,
            analysis: Analysis::new(TraceClock::now()),
            device: known_kernel_object(),
        }
    }

    /// Runs `program` once with `args` as its raw tracepoint arguments.
    pub fn run(&self, program: &str, args: &[u64]) {
        run_program(&self.tracer, program, args);
    }

    /// Drains the ring buffer into the analysis; returns records received.
    pub fn drain_all(&mut self) -> usize {
        let mut records = Vec::new();
        self.tracer
            .drain(|b| records.push(decode(b).expect("decodable record")));
        for r in &records {
            let name: Arc<str> = self.tracer.device_name(r.event().dev);
            self.analysis.record(r, &name);
        }
        records.len()
    }

    pub fn snapshot(&mut self) -> Vec<DeviceSnapshot> {
        let counters = self.tracer.kernel_counters();
        self.analysis.agg.apply_kernel_counters(&counters);
        self.analysis.agg.snapshot(1.0, &[])
    }

    /// The stand-in device's row of `snapshot()` (a failure showing every
    /// row when it has none).
    pub fn device_row(&mut self) -> DeviceSnapshot {
        let mut snap = self.snapshot();
        match snap.iter().position(|d| d.device == self.device.name) {
            Some(i) => snap.swap_remove(i),
            None => panic!("no row for {:?}; got {snap:?}", self.device.name),
        }
    }
}
