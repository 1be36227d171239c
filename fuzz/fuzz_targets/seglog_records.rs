#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| diskless_coordinator::fuzz_targets::seglog_records(data));
