"""tools/gpu_check.py, the script prepared for GPU sessions, works where it can be
checked without a GPU: its arguments, the golden table it parses from the Rust test,
the restated golden cases (their host digests must equal the committed ones), the
ratio arithmetic and the files it writes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module
    spec.loader.exec_module(module)
    return module


def test_arguments(gpu_check: ModuleType, tmp_path: Path) -> None:
    args = gpu_check.parse_args(["--dry-run", "--out", str(tmp_path), "--elements", "1024"])
    assert args.dry_run and args.out == tmp_path and args.elements == 1024 and args.wheel is None
    assert gpu_check.parse_args([]).elements == 2**28


def test_golden_table_and_cases_match_the_rust_test(gpu_check: ModuleType) -> None:
    table = gpu_check.golden_table()
    assert len(table) == 20 and table[(0, "f32")] == "de9324a2a169b6f0"
    assert len(gpu_check.golden_cases()) == 5
    assert gpu_check.golden_digests("cpu") == []  # the restated cases give the committed bits


def test_ratios_and_result_files(gpu_check: ModuleType, tmp_path: Path) -> None:
    rows = []
    for dtype in ("float32", "bfloat16"):
        for case, rate in (
            ("fill_", 1000.0),
            ("torch uniform_", 800.0),
            ("torch normal_", 600.0),
            ("shardinit uniform", 400.0),
            ("shardinit normal", 60.0),
            ("shardinit trunc_normal", 50.0),
        ):
            rows.append(
                {
                    "case": case,
                    "dtype": dtype,
                    "elements": 8,
                    "ms": 1.0,
                    "G elem/s": rate,
                    "GB/s": 1.0,
                }
            )
    rows.append(
        {
            "case": "host path normal",
            "dtype": "bfloat16",
            "elements": 8,
            "ms": 1.0,
            "G elem/s": 2.0,
            "GB/s": 1.0,
        }
    )
    ratios = gpu_check.ratios(rows)
    assert ratios["uniform float32 / torch uniform_"] == 0.5
    assert ratios["normal bfloat16 / host path"] == 30.0
    assert ratios["normal bfloat16 / normal float32"] == 1.0
    gpu_check.write_results(tmp_path, {"speed": rows, "ratios": ratios})
    assert json.loads((tmp_path / "gpu_check.json").read_text())["ratios"] == ratios
    table = (tmp_path / "gpu_check.md").read_text().splitlines()
    assert table[0].startswith("| case | dtype") and len(table) == 2 + len(rows)
