//! Any bytes given to the trace reader: it must report what it can read and
//! never panic, loop forever or allocate without bound.
#![no_main]

use gpudirect_trace::tracefile::TraceReader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(mut reader) = TraceReader::new(data) {
        while let Ok(Some(_)) = reader.next_item() {}
        let stats = reader.stats();
        assert!(stats.truncated_at.is_none_or(|at| at <= data.len() as u64));
    }
});
