#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| diskless_broker_shim::fuzz_targets::records_in_batch(data));
