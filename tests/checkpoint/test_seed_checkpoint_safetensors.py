"""safetensors seed checkpoints: the bytes safetensors itself writes for materialize's
values, split into files by huggingface_hub as save_pretrained splits them, the same
bytes for 1, 2 and 3 writers, and a manifest whose fingerprints are the loaded model's."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from gloo_groups import gloo_scenario, rank_results
from safetensors.torch import save_file
from seed_models import BUFFER, SEED, SHARD, file_digests, meta_tiny

import shardinit


def _save(path: Path) -> Path:
    return shardinit.save_seed_checkpoint(
        meta_tiny(), path, seed=SEED, max_shard_size=SHARD, buffer_bytes=BUFFER
    )


@pytest.fixture(scope="module")
def one_writer() -> Path:
    path = Path(tempfile.mkdtemp(prefix="seed-ckpt-")) / "ckpt"
    return _save(path)


def test_files_are_what_safetensors_writes_for_materialize(one_writer: Path) -> None:
    expected = shardinit.materialize(meta_tiny(), seed=SEED).state_dict()
    index = json.loads((one_writer / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) == 3, files  # the split is the model's, by max_shard_size
    # A tied parameter is saved once, under its first key, as save_pretrained saves it.
    assert sorted(index["weight_map"]) == sorted(set(expected) - {"head.weight"})
    for name in files:
        keys = [key for key, file in index["weight_map"].items() if file == name]
        reference = one_writer.parent / f"reference-{name}"
        save_file({key: expected[key] for key in keys}, reference, metadata={"format": "pt"})
        assert (one_writer / name).read_bytes() == reference.read_bytes(), name
    assert index["metadata"]["total_size"] == sum(
        t.nbytes for k, t in expected.items() if k != "head.weight"
    )


def test_manifest_holds_each_tensors_fingerprint(one_writer: Path) -> None:
    model = shardinit.materialize(meta_tiny(), seed=SEED)
    manifest = json.loads((one_writer / "shardinit-manifest.json").read_text())
    state = model.state_dict()
    assert sorted(manifest["tensors"]) == sorted(state)
    for key, tensor in state.items():
        assert manifest["tensors"][key]["fingerprint"] == shardinit.fingerprint(tensor), key
    assert manifest["tensors"]["head.weight"]["alias_of"] == "embed.weight"
    expected = shardinit.model_digest(shardinit.fingerprint_model(model))
    assert manifest["model_digest"] == expected


@gloo_scenario(2, 3)
def writers_scenario(rank: int, world: int) -> dict[str, str]:
    """Every rank writes its share of one checkpoint; rank 0 returns the files' digests."""
    found = [tempfile.mkdtemp(prefix="seed-ckpt-") if rank == 0 else None]
    dist.broadcast_object_list(found, src=0)
    assert found[0] is not None
    path = _save(Path(found[0]) / "ckpt")
    return file_digests(path) if rank == 0 else {}


@pytest.mark.distributed
@pytest.mark.parametrize("world", [2, 3])
def test_same_bytes_for_every_number_of_writers(world: int, one_writer: Path) -> None:
    digests = rank_results(world, writers_scenario)[0]
    assert digests == file_digests(one_writer)
    assert len(digests) == 5  # 3 files, the index, the manifest


def test_bfloat16_and_buffers_are_stored_as_materialize_gives_them(one_writer: Path) -> None:
    from safetensors import safe_open

    index = json.loads((one_writer / "model.safetensors.index.json").read_text())
    with safe_open(one_writer / index["weight_map"]["proj.weight"], "pt") as file:
        assert file.get_tensor("proj.weight").dtype == torch.bfloat16
    with safe_open(one_writer / index["weight_map"]["norm.running_var"], "pt") as file:
        assert torch.equal(file.get_tensor("norm.running_var"), torch.ones(96))
