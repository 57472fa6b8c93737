"""Every README entry point sets itself up on a fresh clone (issue: `make test` alone failed
because `cargo test` ran before anything created the venv its build script needs).

`make -n TARGET` in a directory holding only the set-up files (no `.venv`, no stamps) prints
the commands a fresh clone would run, in order. The real proof is CI, whose first command is
the README's `make test` on a fresh clone; this test fails earlier, at the Makefile edit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETUP_FILES = (
    "Makefile",
    "Cargo.toml",
    "pyproject.toml",
    "requirements-dev.txt",
    "requirements-nodeps.txt",
)
#: Commands that need the installed venv (or, for cargo, its Python for pyo3's build script).
USES_VENV = ("cargo ", "pytest", "maturin ", "ruff ", "mypy", "-m shardinit", "benches/")


def _dry_run(target: str, tmp_path: Path) -> list[str]:
    for name in SETUP_FILES:
        shutil.copy(ROOT / name, tmp_path / name)
    for source_dir in ("rust", "python"):  # the Makefile lists their sources with find
        (tmp_path / source_dir).mkdir()
    # Run as a top-level make even inside `make test`: a parent's MAKEFLAGS/MAKELEVEL
    # would add "Entering directory" lines naming this pytest temporary folder.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", target],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return result.stdout.splitlines()


@pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")
@pytest.mark.parametrize(
    "target", ["test", "demo", "lint", "bench", "wheel", "test-slow", "test-wheel", "test-zoo"]
)
def test_target_installs_before_first_use(target: str, tmp_path: Path) -> None:
    lines = _dry_run(target, tmp_path)
    first_use = next(i for i, line in enumerate(lines) if any(c in line for c in USES_VENV))
    creates_venv = next(i for i, line in enumerate(lines) if " -m venv " in line)
    installs = [i for i, line in enumerate(lines) if "pip install" in line and " -r " in line]
    assert len(installs) == 2, lines  # requirements-dev.txt, then requirements-nodeps.txt
    assert creates_venv < installs[0] < installs[1] < first_use, "\n".join(lines)
