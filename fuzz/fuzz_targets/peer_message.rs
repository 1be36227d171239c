#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| diskless_coordinator::fuzz_targets::peer_message(data));
