//! Any bytes as an EVENTS block payload (after the checksum, so crafted
//! rather than damaged input): decoding fails cleanly or yields records.
#![no_main]

use gpudirect_trace::tracefile::columns::decode_events;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = decode_events(data);
});
