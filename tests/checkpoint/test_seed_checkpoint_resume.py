"""A killed seed-checkpoint run leaves nothing that looks complete, and the same call
resumes it to the same bytes, keeping the files it finished (checked, not trusted);
bad input is refused in one line before anything is written."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from seed_models import BUFFER, SEED, SHARD, file_digests, meta_tiny
from torch import nn

import shardinit
from shardinit import ShardInitError


class Killed(Exception):
    """Stands for the process dying at that point."""


def _save(path: Path, **kwargs: object) -> Path:
    return shardinit.save_seed_checkpoint(
        meta_tiny(), path, seed=SEED, max_shard_size=SHARD, buffer_bytes=BUFFER, **kwargs
    )


def _killed_after(limit: int) -> object:
    def progress(done: int, total: int) -> None:
        if done > limit:
            raise Killed

    return progress


#: A writer process SIGKILLed by its own progress hook in the second file, after the
#: 1.25 MiB first one: what a kill leaves on disk, fsync included.
_KILLED_WRITER = """
import os, signal, sys
sys.path.insert(0, {helpers!r})
import shardinit
from seed_models import BUFFER, SEED, SHARD, meta_tiny

def progress(done, total):
    if done > 1_320_000:
        os.kill(os.getpid(), signal.SIGKILL)

shardinit.save_seed_checkpoint(meta_tiny(), {path!r}, seed=SEED, max_shard_size=SHARD,
                               buffer_bytes=BUFFER, progress=progress)
"""


@pytest.mark.processes
def test_killed_run_resumes_to_the_same_bytes(tmp_path: Path) -> None:
    fresh = file_digests(_save(tmp_path / "fresh"))
    path = tmp_path / "killed"
    script = _KILLED_WRITER.format(helpers=str(Path(__file__).parent), path=str(path))
    killed = subprocess.run([sys.executable, "-c", script], timeout=300, check=False)
    assert killed.returncode == -signal.SIGKILL
    names = sorted(p.name for p in path.iterdir() if p.is_file())
    finished, partial = "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors"
    # The dead run's lock stays behind (the kernel released it): the rerun takes it.
    assert names == [".shardinit-lock", finished, f"{partial}.partial"]
    kept = (path / finished).stat().st_ino
    _save(path)
    assert file_digests(path) == fresh
    assert (path / finished).stat().st_ino == kept  # checked and kept, not written again
    assert not (path / ".shardinit-lock").exists()


def test_a_damaged_finished_file_is_written_again(tmp_path: Path) -> None:
    path = _save(tmp_path / "ckpt")
    fresh = file_digests(path)
    damaged = path / "model-00001-of-00003.safetensors"
    data = bytearray(damaged.read_bytes())
    data[-5] ^= 0x40  # a value's bit: size and header stay as they were
    damaged.write_bytes(bytes(data))
    # A byte of another file's header on disk (its size and values stay as they were).
    header = path / "model-00002-of-00003.safetensors"
    data = bytearray(header.read_bytes())
    data[12] ^= 0x01
    header.write_bytes(bytes(data))
    _save(path)
    assert file_digests(path) == fresh


def test_dcp_killed_run_is_written_again_whole(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    with pytest.raises(Killed):  # what the writer raised, not dcp's wrapper of it
        _save(path, format="dcp", progress=_killed_after(100_000))
    assert not (path / ".metadata").exists()  # dcp.load refuses it
    _save(path, format="dcp")
    manifest = json.loads((path / "shardinit-manifest.json").read_text())
    model = shardinit.materialize(meta_tiny(), seed=SEED)
    for key, tensor in model.state_dict().items():
        assert manifest["tensors"][key]["fingerprint"] == shardinit.fingerprint(tensor), key


def _one_line(error: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    return message


def test_refuses_a_directory_holding_another_seed_checkpoint(tmp_path: Path) -> None:
    _save(tmp_path / "ckpt")
    before = file_digests(tmp_path / "ckpt")
    with pytest.raises(ShardInitError) as error:
        shardinit.save_seed_checkpoint(meta_tiny(), tmp_path / "ckpt", seed=SEED + 1)
    assert "holds another seed checkpoint" in _one_line(error)
    assert file_digests(tmp_path / "ckpt") == before


def test_refuses_a_directory_holding_another_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"not ours")
    with pytest.raises(ShardInitError) as error:
        _save(tmp_path)
    assert "holds another checkpoint (model.safetensors)" in _one_line(error)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]


def test_refuses_a_path_that_cannot_be_created(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ShardInitError) as error:
        _save(tmp_path / "file" / "ckpt")
    assert "cannot be created" in _one_line(error)


def test_refuses_a_model_that_is_not_on_meta(tmp_path: Path) -> None:
    with pytest.raises(ShardInitError) as error:
        shardinit.save_seed_checkpoint(nn.Linear(2, 2), tmp_path, seed=0)
    assert "must be built on the meta device" in _one_line(error)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"format": "npz"}, "format must be 'safetensors' or 'dcp', got 'npz'"),
        ({"buffer_bytes": 4096}, "buffer_bytes must be an int >= 1 MiB (1048576), got 4096"),
        ({"seed": -1}, "seed"),
    ],
)
def test_refuses_bad_arguments(tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"seed": 0, **kwargs}
    with pytest.raises((ValueError, TypeError), match=re.escape(message)):
        shardinit.save_seed_checkpoint(meta_tiny(), tmp_path / "ckpt", **arguments)  # type: ignore[arg-type]
    assert not (tmp_path / "ckpt").exists()


def test_progress_bar_shows_bytes_rate_and_eta() -> None:
    import io

    from shardinit._integration.progress import ProgressBar

    stream = io.StringIO()
    bar = ProgressBar("seed checkpoint", 4 * 2**30, stream)
    bar.update(2**30)
    assert bar.line(2.0).startswith(
        "seed checkpoint  1.00 GiB / 4.00 GiB  25%  512.00 MiB/s  ETA 0:00:06"
    )
    bar.close()
    assert stream.getvalue().endswith("\n") and "\r" in stream.getvalue()
