//! The programs' debug messages (aya-log) through the real verifier and
//! aya-log's real reader: every program loads with them on, and a
//! scatterlist walk that `--sg-walk-max` cuts short says so.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use gpudirect_trace::ebpf::{ProgramLog, Tracer, TracerOptions};

use crate::{
    inject::Injector,
    sg_walk::{lengths, Arena},
};

/// Every record aya-log hands over, as "target: message".
#[derive(Default)]
struct Capture(Mutex<Vec<String>>);

impl Capture {
    fn lines(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, r: &log::Record<'_>) {
        let line = format!("{}: {}", r.target(), r.args());
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(line);
    }

    fn flush(&self) {}
}

#[test]
fn every_program_loads_with_debug_messages_and_a_cut_walk_says_so() {
    crate::require_root();
    let capture = Arc::new(Capture::default());
    let tracer = Tracer::load(&TracerOptions {
        attach: false,
        ring_bytes: 1 << 20,
        sg_walk_max: 4,
        program_log: ProgramLog::To(capture.clone()),
        ..Default::default()
    })
    .expect("load the eBPF object");
    assert_eq!(tracer.failed(), Vec::<String>::new(), "no program refused");
    assert!(
        tracer.program_log_on(),
        "the messages are read (the loader did not fall back to programs without them)"
    );
    let mut inj = Injector::new(tracer);
    let dev = inj.device.addr;
    let mut arena = Arena::new(inj.tracer.offsets);
    let lens = lengths(16);
    let (sgl, _) = arena.chained(&lens, 128, 0);
    inj.run("dma_map_sg", &[dev, sgl, 16, 16, 2, 0]);
    let walked: u64 = lens[..4].iter().map(|&l| u64::from(l)).sum();
    let want = format!("ebpf: dma_map_sg/dma_unmap_sg: scatterlist walk cut short: 16 entries, {walked} bytes walked");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !capture.lines().iter().any(|l| l.starts_with(&want)) {
        assert!(
            Instant::now() < deadline,
            "no message starting {want:?} within 5 s: {:?}",
            capture.lines()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    inj.tracer.drain(|_| {});
}
