//! Any bytes read as a recording: entries, then the end, truncation or an error; never a
//! panic, never an allocation the input sizes. Seeds in corpus/reader (a regular test in
//! tracer/src/recording/tests.rs reads them all).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (entries, end) = tracer::recording::reader::read_all(data);
    if let Ok(None) = end {
        // A recording that ended cleanly starts with its header.
        assert!(matches!(entries.first(), Some(tracer::recording::Entry::Header(_))));
    }
});
