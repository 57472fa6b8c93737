//! Sets `cfg(shardinit_avx512)` when the compiler can build the AVX-512 backend.
//!
//! The `avx512f` target feature is stable only since Rust 1.89, above the workspace's
//! `rust-version`. Older compilers build the crate without that backend, and
//! `Backend::detect` picks AVX2 instead (the same bits; only speed differs).

use std::env;
use std::process::Command;

/// The first stable release with `#[target_feature(enable = "avx512f")]`.
const AVX512_STABLE_MINOR: u32 = 89;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rustc-check-cfg=cfg(shardinit_avx512)");
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let version = Command::new(&rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .unwrap_or_default();
    if avx512_is_stable(&version) {
        println!("cargo::rustc-cfg=shardinit_avx512");
    } else {
        let version = version.trim();
        let needs = format!("Rust 1.{AVX512_STABLE_MINOR}");
        println!("cargo::warning=building without the AVX-512 backend ({needs}): {version}");
    }
}

/// Whether `rustc --version` output (`rustc 1.89.0 (hash date)`) names a compiler with
/// a stable `avx512f` target feature. A nightly or dev build of 1.89 may predate the
/// stabilization, so those count from 1.90; an unreadable version counts as too old.
fn avx512_is_stable(version: &str) -> bool {
    let Some(release) = version.split_whitespace().nth(1) else {
        return false;
    };
    let (number, channel) = release.split_once('-').unwrap_or((release, ""));
    let mut parts = number.split('.').map(str::parse::<u32>);
    let (Some(Ok(major)), Some(Ok(minor))) = (parts.next(), parts.next()) else {
        return false;
    };
    let first_minor = if channel.is_empty() || channel.starts_with("beta") {
        AVX512_STABLE_MINOR
    } else {
        AVX512_STABLE_MINOR + 1
    };
    major > 1 || minor >= first_minor
}
