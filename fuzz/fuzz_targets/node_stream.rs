#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| discovm_fuzz::node_stream(data));
