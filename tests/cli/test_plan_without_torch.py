"""``shardinit plan`` answers without importing torch (issue 24): a fresh interpreter runs
the command, or just ``import shardinit``, and torch stays out of ``sys.modules``; the
one dtype table agrees with torch's; bad input still ends in its one-line error.

Whether torch was imported is read from ``-X importtime`` (every module the process
imports, one line each), so the command runs exactly as a user types it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from shardinit import SUPPORTED_DTYPES
from shardinit._dtypes import DTYPE_SIZES

SHARDINIT = Path(sys.executable).with_name("shardinit")  # the console script


def _imported(command: list[str]) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Runs ``command`` under ``-X importtime``: the process, and the top-level
    packages it imported."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    modules = {
        line.rpartition("|")[2].strip().split(".")[0]
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and not line.endswith("| imported package")
    }
    return proc, modules


@pytest.mark.processes
def test_the_import_time_reader_sees_torch_when_it_is_imported() -> None:
    """The negative control: the first access to a name that needs torch imports it."""
    proc, modules = _imported(["-c", "import shardinit; shardinit.ParamSpec"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {"shardinit", "torch"} <= modules


def test_import_shardinit_does_not_import_torch() -> None:
    proc, modules = _imported(["-c", "import shardinit; print(shardinit.__version__)"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "shardinit" in modules and "torch" not in modules, sorted(modules)
    assert proc.stdout.strip() == "0.1.0"


def test_plan_405b_on_16384_ranks_does_not_import_torch() -> None:
    command = ["-m", "shardinit", "plan", "--model", "llama-405b", "--world", "16384"]
    proc, modules = _imported([*command, "--tp", "8"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "torch" not in modules and "numpy" not in modules, sorted(modules)
    assert "on 16384 rank(s), mesh 2048x8" in proc.stdout
    assert "(16378 more ranks; --all-ranks lists them)" in proc.stdout


def test_the_console_script_plans_without_torch() -> None:
    argv = [str(SHARDINIT), "plan", "--model", "tiny-moe", "--world", "64", "--ep", "8"]
    proc, modules = _imported(argv)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "torch" not in modules, sorted(modules)
    assert proc.stdout.startswith("shardinit plan: tiny-moe: ")
    assert "+ 8-way EP" in proc.stdout


BAD = [
    (["--world", "6", "--tp", "4"], "--tp 4 must divide --world 6 (divisors of 6: 1, 2, 3, 6)"),
    (
        ["--world", "128", "--tp", "64"],
        "--tp 64 is larger than the dim tensor parallelism splits in "
        "layers.0.attention.wk.weight (shape (32, 64)); allowed: 1 <= --tp <= 32",
    ),
    (
        ["--world", "4", "--generate", "4"],
        "--generate 4 is out of range: ranks are 0 .. 3 for --world 4",
    ),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_clear_without_torch(argv: list[str], message: str) -> None:
    proc, modules = _imported(["-m", "shardinit", "plan", "--model", "tiny", *argv])
    assert proc.returncode == 2
    assert "torch" not in modules, sorted(modules)
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"shardinit plan: error: {message}"


def test_the_dtype_table_is_torchs() -> None:
    assert {name: getattr(torch, name).itemsize for name in DTYPE_SIZES} == DTYPE_SIZES
    assert list(SUPPORTED_DTYPES.values()) == list(DTYPE_SIZES)
    assert list(SUPPORTED_DTYPES) == [torch.float32, torch.float64, torch.bfloat16, torch.float16]
