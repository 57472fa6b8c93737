//! Stable-Rust stand-in for the fuzzer: `check` on pseudo-random byte strings
//! (deterministic xorshift; FUZZ_CASES cases, default 3000), so the invariants run
//! without nightly or libFuzzer: `cargo test --release --manifest-path fuzz/Cargo.toml`.

use arbitrary::{Arbitrary, Unstructured};
use shardinit_fuzz::{check, Input};

#[test]
fn random_inputs_keep_every_invariant() {
    let cases: u64 = std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for case in 0..cases {
        let len = (next() % 512) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let Ok(input) = Input::arbitrary(&mut Unstructured::new(&bytes)) else {
            continue;
        };
        let outcome = std::panic::catch_unwind(|| check(&input));
        assert!(outcome.is_ok(), "case {case}: {input:?}");
    }
}
