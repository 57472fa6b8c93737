//! libFuzzer target: see `shardinit_fuzz::check` for what is checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: shardinit_fuzz::Input| {
    shardinit_fuzz::check(&input);
});
