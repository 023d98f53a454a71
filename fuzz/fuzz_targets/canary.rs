//! The canary: a target that must crash. It hides a panic behind four
//! byte-by-byte comparisons, which libFuzzer only gets through with working
//! coverage and comparison feedback (blind luck needs about 2^32 tries).
//! `ci/fuzz` fails when this target does *not* crash within its time: the
//! fuzzing setup is broken (no instrumentation, a target that is not run,
//! a panic that does not abort), and a quiet run of the other targets
//! would prove nothing.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() >= 4 && data[0] == b'F' && data[1] == b'U' && data[2] == b'Z' && data[3] == b'Z' {
        panic!("canary: the planted crash was found, the fuzzer works");
    }
});
