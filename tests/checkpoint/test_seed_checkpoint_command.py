"""``shardinit checkpoint --model NAME``: a built-in model's seed checkpoint, whose
manifest digest is the digest ``shardinit fingerprint`` gives the materialized model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import shardinit
from shardinit.cli import run
from shardinit.cli.transformer import build_model


@pytest.mark.parametrize("format", ["safetensors", "dcp"])
def test_builtin_model_manifest_digest_is_the_fingerprint_digest(
    tmp_path: Path, format: str
) -> None:
    argv = ["checkpoint", "--model", "tiny", "--out", str(tmp_path), "--seed", "5"]
    assert run([*argv, "--format", format, "--no-progress"]) == 0
    manifest = json.loads((tmp_path / "shardinit-manifest.json").read_text())
    model = shardinit.materialize(build_model("tiny"), seed=5)
    assert manifest["model_digest"] == shardinit.model_digest(shardinit.fingerprint_model(model))
    assert manifest["checkpoint_format"] == format and manifest["seed"] == 5


def test_an_unwritable_out_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["checkpoint", "--model", "tiny", "--out", "/dev/null/ckpt"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "shardinit checkpoint: save_seed_checkpoint: path /dev/null/ckpt cannot be created: "
        "Not a directory (ENOTDIR)\n"
    )
