#!/usr/bin/env bash
# Runs Debian's dieharder on raw stream-v1 words (tools/stream_to_stdout.py | dieharder
# -g 200) for several keys, including streams of adjacent names and adjacent seeds
# interleaved word by word, and prints a Markdown summary (pasted into docs/quality.md).
#
# Usage: tools/run_dieharder.sh [OUTDIR]      (default target/dieharder; about 10-12 min
#        on 2 cores). DIEHARDER_TESTS / DIEHARDER_CORE_TESTS override the test subsets
#        (dieharder -d numbers, space-separated); DIEHARDER_ALL=1 runs `dieharder -a` on
#        every stream instead (hours).
#
# Installs dieharder with apt-get if it is missing (Debian/Ubuntu, as root or via sudo).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/target/dieharder}"
PY="$ROOT/.venv/bin/python"
[[ -x "$PY" ]] || PY="$(command -v python3)"
mkdir -p "$OUT"

if ! command -v dieharder >/dev/null 2>&1; then
    echo "dieharder not found: installing it with apt-get" >&2
    SUDO=""
    [[ "$(id -u)" == 0 ]] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq dieharder >/dev/null
fi

# Test subsets (dieharder -d numbers). The first stream gets the wider set; every other
# stream gets the core set. Chosen to finish in about 10 minutes in total on 2 cores.
#   0 birthdays  1 operm5  3 rank_6x8  4 bitstream  8 count_1s_str  9 count_1s_byt
#   10 parking_lot  15 runs  16 craps  100 sts_monobit  101 sts_runs  205 dab_bytedistrib
#   206 dab_dct  207 dab_filltree  209 dab_monobit2
WIDE="${DIEHARDER_TESTS:-0 1 3 4 8 9 10 15 16 100 205 206 207 209}"
CORE="${DIEHARDER_CORE_TESTS:-0 3 4 8 15 100 205 209}"

# label | stream_to_stdout.py arguments
STREAMS=(
    "seed 0, name w (stream-format.md §6 golden key), from word 0|--key 0:w"
    "seed 2^64-1, layers.0.attention.wq.weight, from word 2^34 - 2^20 (across the 2^32-block carry)|--key 18446744073709551615:layers.0.attention.wq.weight --start 0x3FFF00000"
    "8 adjacent names layers.0..7.mlp.w1.weight (seed 0), interleaved word by word|--key 0:layers.0.mlp.w1.weight --key 0:layers.1.mlp.w1.weight --key 0:layers.2.mlp.w1.weight --key 0:layers.3.mlp.w1.weight --key 0:layers.4.mlp.w1.weight --key 0:layers.5.mlp.w1.weight --key 0:layers.6.mlp.w1.weight --key 0:layers.7.mlp.w1.weight"
    "8 adjacent seeds 0..7, name w, interleaved word by word|--key 0:w --key 1:w --key 2:w --key 3:w --key 4:w --key 5:w --key 6:w --key 7:w"
    "seed 1234, name emb.weight, from word 2^62|--key 1234:emb.weight --start 0x4000000000000000"
)

SUMMARY="$OUT/summary.md"
: >"$SUMMARY"
total_pass=0; total_weak=0; total_fail=0
started=$(date +%s)
for index in "${!STREAMS[@]}"; do
    label="${STREAMS[$index]%%|*}"
    args="${STREAMS[$index]#*|}"
    tests="$CORE"
    [[ "$index" == 0 ]] && tests="$WIDE"
    log="$OUT/stream$index.log"
    : >"$log"
    echo "== stream $index: $label" >&2
    if [[ "${DIEHARDER_ALL:-0}" == 1 ]]; then
        # shellcheck disable=SC2086  # args is a word list on purpose
        "$PY" "$ROOT/tools/stream_to_stdout.py" $args | dieharder -g 200 -a >>"$log" 2>&1 || true
    else
        for test in $tests; do
            # shellcheck disable=SC2086
            "$PY" "$ROOT/tools/stream_to_stdout.py" $args \
                | dieharder -g 200 -d "$test" >>"$log" 2>&1 || true
        done
    fi
    # Result lines look like: "   diehard_birthdays|   0|  100|  100|0.08954562|  PASSED"
    results=$(grep -E '\|(  PASSED|   WEAK|  FAILED)' "$log" || true)
    pass=$(grep -c 'PASSED' <<<"$results" || true)
    weak=$(grep -c 'WEAK' <<<"$results" || true)
    fail=$(grep -c 'FAILED' <<<"$results" || true)
    total_pass=$((total_pass + pass)); total_weak=$((total_weak + weak)); total_fail=$((total_fail + fail))
    {
        echo "### Stream $index: $label"
        echo
        echo "\`tools/stream_to_stdout.py $args\` — $pass passed, $weak weak, $fail failed"
        echo
        echo '| test | ntup | tsamples | psamples | p-value | assessment |'
        echo '|---|---|---|---|---|---|'
        awk -F'|' '{for (i = 1; i <= NF; i++) gsub(/^ +| +$/, "", $i);
                    printf "| %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6}' <<<"$results"
        echo
    } >>"$SUMMARY"
done
elapsed=$(( $(date +%s) - started ))
{
    echo "Total: $total_pass passed, $total_weak weak, $total_fail failed (${elapsed} s, dieharder $(dieharder -h 2>/dev/null | grep -o 'version [0-9.]*' | head -1 || true))."
} >>"$SUMMARY"
cat "$SUMMARY"
# WEAK (p < 0.005 or p > 0.995) is expected by chance in about 1 test in 100; a FAILED
# (p < 1e-6) is not.
[[ "$total_fail" == 0 ]]
