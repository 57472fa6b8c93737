#!/usr/bin/env bash
# Fuzzes shardinit-core's geometry and fill functions (fuzz/fuzz_targets/geometry_fill.rs,
# invariants in fuzz/src/lib.rs) with libFuzzer for a bounded time.
#
# Usage: tools/fuzz.sh [SECONDS]        (default 120)
#
# Needs a nightly toolchain and cargo-fuzz (installed with `cargo install cargo-fuzz` if
# missing). Without nightly it falls back to the stable random-input test of the same
# invariants (`cargo test --release --manifest-path fuzz/Cargo.toml`, FUZZ_CASES cases).
# Findings land in fuzz/artifacts/geometry_fill/; the corpus in fuzz/corpus/ (both
# ignored by git; rerun one with `cargo +nightly fuzz run geometry_fill --features
# fuzzing <file>`).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_BUDGET="${1:-120}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target/fuzz}"
cd "$ROOT/fuzz"

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    echo "no nightly toolchain: running the stable random-input test instead" >&2
    FUZZ_CASES="${FUZZ_CASES:-200000}" exec cargo test --release
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz not found: installing it" >&2
    cargo install cargo-fuzz --locked
fi
mkdir -p corpus/geometry_fill
# -rss_limit_mb: the largest small-shape case is 8^5 float64 elements (256 KiB).
exec cargo +nightly fuzz run geometry_fill --features fuzzing -- \
    -max_total_time="$SECONDS_BUDGET" -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1
