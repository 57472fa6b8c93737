"""The device kernel gives the core's bits, checked in Triton's interpreter on the CPU
(no GPU needed): every dtype and initializer, trunc_normal in each region of its
sampler, random N-d boxes, the 2^32-block carry, keys >= 2^63, 2^40-element shapes,
block sizes, the golden values, PhiInv against the core and the 16-bit roundings
against torch. The cases live in ``interpreter_cases.py``, run in one subprocess per
test session because ``TRITON_INTERPRET=1`` must be set before triton is imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

CASES_SCRIPT = Path(__file__).with_name("interpreter_cases.py")
CASE_NAMES = [
    "dtypes_and_initializers",
    "golden_values",
    "block_carry_and_huge_shapes",
    "keys_at_or_above_2_63",
    "random_boxes",
    "special_boxes",
    "box_far_out_in_a_huge_shape",
    "block_sizes",
    "self_check",
    "phi_inv_against_core",
    "bf16_f16_rounding_against_torch",
]


def run_cases(*flags: str) -> dict[str, str]:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run(
        [sys.executable, str(CASES_SCRIPT), *flags],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    results: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(results) == sorted(CASE_NAMES), "the case list is out of date"
    return results


@pytest.fixture(scope="module")
def results() -> dict[str, str]:
    return run_cases()


@pytest.mark.parametrize("case", CASE_NAMES)
def test_kernel_equals_core_in_the_interpreter(results: dict[str, str], case: str) -> None:
    assert results[case] == "ok", results[case]


@pytest.mark.slow
def test_kernel_equals_core_in_the_interpreter_at_volume() -> None:
    """The same cases with 65536 elements per dtype x initializer, 40 random boxes of up
    to 40 rows and more keys >= 2^63."""
    failures = {name: text for name, text in run_cases("--slow").items() if text != "ok"}
    assert not failures, failures
