#!/usr/bin/env bash
# Builds the workspace's library crates with the Rust release named by `rust-version` in
# Cargo.toml, so that the declared minimum stays true (issue: rust-version must be a
# version the code builds with). The toolchain is Debian's rustc-web/cargo-web for that
# release, unpacked into target/msrv-toolchain (no system change; rustup cannot fetch
# other toolchains here). Only `--lib` is built: the dev-dependencies of the test suite
# (proptest, criterion) need newer compilers, which is what the workspace's own toolchain
# is for. Usage: tools/check_msrv.sh   (needs apt-get and dpkg, as on Debian)
set -euo pipefail
cd "$(dirname "$0")/.."
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
# Debian bookworm ships exactly one rustc-web build per release; map the one we check.
declare -A debian_version=([1.85]="1.85.0+dfsg3-1~deb12u3")
deb=${debian_version[$msrv]:-}
if [[ -z $deb ]]; then
    echo "check_msrv: no Debian rustc-web build known for rust-version $msrv" >&2
    exit 2
fi
root=$PWD/target/msrv-toolchain/$msrv
if [[ ! -x $root/usr/bin/cargo ]]; then
    dl=$(mktemp -d)
    packages=("rustc-web=$deb" "cargo-web=$deb" "libstd-rust-web-dev=$deb"
        "libstd-rust-web-${msrv}=$deb" libllvm19 libpcre3 libhttp-parser2.9)
    # A machine whose package lists were never fetched knows no versions: fetch them once.
    (cd "$dl" && { apt-get download -q "${packages[@]}" 2>/dev/null ||
        { apt-get update -qq && apt-get download -q "${packages[@]}"; }; })
    mkdir -p "$root"
    for f in "$dl"/*.deb; do dpkg -x "$f" "$root"; done
    rm -rf "$dl"
fi
export LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu
version=$("$root/usr/bin/rustc" --version)
[[ $version == "rustc $msrv."* ]] || { echo "check_msrv: got $version" >&2; exit 2; }
echo "check_msrv: building the library crates with $version"
# -D warnings: code that only an old compiler sees as unused (imports behind a cfg) fails.
RUSTFLAGS="-D warnings" RUSTC=$root/usr/bin/rustc PYO3_PYTHON=${PYO3_PYTHON:-$PWD/.venv/bin/python} \
    CARGO_TARGET_DIR=target/msrv "$root/usr/bin/cargo" build --locked --workspace --lib
echo "check_msrv: rust-version $msrv holds"
