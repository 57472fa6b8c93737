"""The wheel users install: built with maturin, installed into a fresh virtual env that
sees only torch, numpy and their dependencies (not this source tree, not the dev tools),
and exercised by a smoke script run from an unrelated directory."""

from __future__ import annotations

import importlib.metadata as metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SMOKE = textwrap.dedent(
    """
    import pathlib, sys
    import torch, shardinit
    from shardinit import init

    # Imported from the installed wheel, not from the source tree.
    location = pathlib.Path(shardinit.__file__).resolve()
    assert "site-packages" in location.parts, location
    assert not str(location).startswith(sys.argv[1]), location
    assert (location.parent / "py.typed").exists()
    assert (location.parent / "_core.pyi").exists()

    spec = shardinit.ParamSpec("w", (7, 5), torch.bfloat16, init.trunc_normal(std=0.02), seed=1)
    whole = shardinit.full(spec)
    shards = [shardinit.init_shard(spec, r, 3) for r in range(3)]
    assert torch.equal(torch.cat(shards), whole)
    assert hex(shardinit.key(0, "w")) == "0x47a94443d83ccf19"

    with torch.device("meta"):
        meta_model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.LayerNorm(4))
    shardinit.materialize(meta_model, seed=3)
    weight = meta_model[0].weight
    assert weight.device.type == "cpu" and weight.abs().max() <= 6 ** -0.5
    assert torch.equal(meta_model[1].weight, torch.ones(4))
    print("smoke ok", shardinit.__version__)
    """
)


def requirement_closure(roots: list[str]) -> set[str]:
    """Distribution names of ``roots`` and everything they require (no extras)."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional or platform-specific requirement that is not installed
        seen.add(key)
        for requirement in dist.requires or []:
            if "extra ==" in requirement:
                continue
            match = re.match(r"[A-Za-z0-9_.\-]+", requirement)
            if match:
                todo.append(match.group(0))
    return seen


def link_distributions(names: set[str], target: Path) -> None:
    """Symlinks the top-level files and folders of each distribution into ``target``."""
    target.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for name in names:
        for file in metadata.distribution(name).files or []:
            top = file.parts[0]
            if top.endswith(".pth") or top == ".." or top.startswith("__"):
                continue
            source = site / top
            link = target / top
            if source.exists() and not link.exists():
                link.symlink_to(source)


@pytest.mark.wheel
@pytest.mark.skipif(shutil.which("cargo") is None, reason="building the wheel needs cargo")
def test_wheel_installs_and_runs_in_a_clean_env(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    maturin = Path(sys.executable).with_name("maturin")
    subprocess.run(
        [str(maturin), "build", "--release", "--out", str(dist), "--quiet"],
        cwd=REPO,
        check=True,
        env={**os.environ, "CARGO_TERM_COLOR": "never"},
    )
    wheels = list(dist.glob("*.whl"))
    assert len(wheels) == 1, wheels
    wheel = wheels[0]
    # One stable-ABI wheel for every CPython >= 3.11, manylinux-tagged.
    assert re.search(r"-cp311-abi3-manylinux_\d+_\d+_x86_64", wheel.name), wheel.name
    # What users need ships (the demo's launcher); the tests' tools do not (issue 21).
    files = set(zipfile.ZipFile(wheel).namelist())
    assert {"shardinit/cli/_launch.py", "shardinit/_cuda/kernel.py"} <= files
    assert not [name for name in files if name.endswith("ptx.py")]

    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    # torch and numpy (with their own dependencies) from this environment, by symlink:
    # a plain path entry, so the dev env's .pth files (our editable install) are ignored.
    deps = tmp_path / "deps"
    link_distributions(requirement_closure(["torch", "numpy"]), deps)
    env_site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(env_site) / "zz_torch_numpy.pth").write_text(f"{deps}\n")
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-index", "--no-deps", "-q", str(wheel)],
        check=True,
    )
    assert subprocess.run([str(python), "-c", "import pytest"], capture_output=True).returncode != 0

    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    script = workdir / "smoke.py"
    script.write_text(SMOKE)
    result = subprocess.run(
        [str(python), str(script), str(REPO)],
        cwd=workdir,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "smoke ok 0.1.0" in result.stdout

    metadata_text = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.metadata('shardinit'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for field in ("Requires-Python: >=3.11", "Requires-Dist: torch", "License", "Project-URL"):
        assert field in metadata_text, field
