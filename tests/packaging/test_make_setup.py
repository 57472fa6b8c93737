"""Every README entry point sets itself up on a fresh clone, with only the layers of
requirements it needs (issue 22: `make test` installed Megatron-core and built DeepSpeed,
which only `make test-zoo` uses; an earlier issue: `make test` alone failed because a
step ran before anything created the venv it needed).

`make -n TARGET` in a directory holding only the set-up files (no `.venv`, no stamps)
prints the commands a fresh clone would run, in order. The real proof is CI, whose first
command is the README's `make test` on a fresh clone; this test fails earlier, at the
Makefile edit.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETUP_FILES = ("Makefile", "Cargo.toml", "pyproject.toml")
#: Commands that need every layer of their target (cargo clippy and cargo bench: pyo3's
#: build script runs the venv's Python; the others run its tools or import its packages).
#: The build (`maturin develop`, `maturin build`) needs the core layer only.
USES_VENV = (
    "pytest",
    "ruff ",
    "mypy",
    "-m shardinit",
    "benches/",
    "cargo clippy",
    "cargo bench",
)
#: The requirement layers (requirements-<layer>.txt, and its -nodeps file) each target
#: installs.
LAYERS = {
    "test": {"core", "clients"},
    "test-rust": set(),
    "demo": {"core"},
    "lint": {"core", "lint"},
    "bench": {"core", "bench"},
    "wheel": {"core"},
    "test-slow": {"core", "clients"},
    "test-wheel": {"core"},
    "test-zoo": {"core", "clients", "zoo"},
    "test-ecosystem": {"core", "clients"},
    "msrv": set(),
}


def _dry_run(target: str, tmp_path: Path) -> list[str]:
    for path in [*(ROOT / name for name in SETUP_FILES), *ROOT.glob("requirements-*.txt")]:
        shutil.copy(path, tmp_path / path.name)
    for source_dir in ("rust", "python", "benches"):  # the Makefile lists sources with find
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


def _installed_layers(line: str) -> set[str]:
    """The layers a `uv pip install -r requirements-<layer>[-nodeps].txt` line installs."""
    if "pip install" not in line:
        return set()
    return set(re.findall(r"-r requirements-([a-z]+?)(?:-nodeps)?\.txt", line))


@pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")
@pytest.mark.parametrize("target", sorted(LAYERS))
def test_target_installs_its_layers_before_first_use(target: str, tmp_path: Path) -> None:
    lines = _dry_run(target, tmp_path)
    text = "\n".join(lines)
    installs = [i for i, line in enumerate(lines) if _installed_layers(line)]
    layers = set().union(*(_installed_layers(lines[i]) for i in installs))
    assert layers == LAYERS[target], text
    uses = [i for i, line in enumerate(lines) if any(c in line for c in USES_VENV)]
    if not installs:
        assert not uses and " -m venv " not in text, text
        return
    creates_venv = next(i for i, line in enumerate(lines) if " -m venv " in line)
    assert creates_venv < installs[0], text
    assert not uses or installs[-1] < uses[0], text
    core = next(i for i in installs if "-r requirements-core.txt" in lines[i])
    builds = [i for i, line in enumerate(lines) if "/maturin " in line]
    assert all(core < i for i in builds), text
    # A -nodeps file goes in after its layer's own file, without dependencies.
    for i in installs:
        if "-nodeps.txt" in lines[i]:
            assert "--no-deps" in lines[i], lines[i]
            layer = _installed_layers(lines[i]).pop()
            assert any(f"-r requirements-{layer}.txt" in lines[j] for j in installs if j < i)


def test_rust_tests_need_no_python_and_build_no_benchmarks(tmp_path: Path) -> None:
    """`make test`'s cargo step runs before the venv exists (pyo3's build script would
    need its Python) and builds the default members only; none of them pulls criterion."""
    lines = _dry_run("test-rust", tmp_path)
    assert [line for line in lines if line.startswith("cargo")] == ["cargo test"], lines
    workspace = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]
    defaults = workspace["default-members"]
    assert set(defaults) < set(workspace["members"]), "the benchmarks' crate is a default member"
    for member in defaults:
        manifest = tomllib.loads((ROOT / member / "Cargo.toml").read_text())
        assert "criterion" not in str(manifest), member
        if "pyo3" in manifest.get("dependencies", {}):
            # the glue's lib is the only target of its crate: `cargo test` skips it
            assert manifest["lib"]["test"] is False and manifest["lib"]["doctest"] is False
            assert not (ROOT / member / "tests").exists(), member
