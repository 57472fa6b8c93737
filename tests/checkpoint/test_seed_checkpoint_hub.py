"""The files of a transformers model's seed checkpoint are what ``save_pretrained``
writes by default for the materialized model, byte for byte: the weights (MoE experts
per expert, as transformers 5 reverts its in-memory fusion), the split and index, the
config with ``dtype`` and ``architectures``, and ``generation_config.json``; the
default ``max_shard_size`` is the installed transformers' own."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
from seed_models import SEED, file_digests, hub_configs

import shardinit
from shardinit._integration.checkpoint_files import default_max_shard_size
from shardinit._integration.checkpoint_hub import _box_of
from shardinit.cli import run

pytestmark = [
    pytest.mark.clients,
    pytest.mark.filterwarnings("ignore:capture_init. 1 write.s. to tied parameter"),
]


def _meta(name: str) -> torch.nn.Module:
    import transformers

    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(hub_configs()[name])


def _save_pretrained(name: str, path: Path, **kwargs: object) -> dict[str, str]:
    model = _meta(name)
    model = shardinit.materialize(model, seed=SEED, init_fn=model.init_weights)
    model.save_pretrained(path, **kwargs)
    return file_digests(path)


@pytest.mark.parametrize("name", list(hub_configs()))
@pytest.mark.parametrize("shard", [None, "20KB"], ids=["default", "split"])
def test_files_are_save_pretrained_default_output(
    tmp_path: Path, name: str, shard: str | None
) -> None:
    sizes = {} if shard is None else {"max_shard_size": shard}
    expected = _save_pretrained(name, tmp_path / "hf", **sizes)
    model = _meta(name)
    shardinit.save_seed_checkpoint(
        model, tmp_path / "seed", seed=SEED, init_fn=model.init_weights, **sizes
    )
    written = file_digests(tmp_path / "seed")
    assert written.pop("shardinit-manifest.json")
    assert written == expected
    weights = [n for n in expected if n.endswith(".safetensors")]
    assert (len(weights) > 2) == (shard is not None), weights


def test_moe_experts_are_saved_per_expert(tmp_path: Path) -> None:
    from safetensors import safe_open

    model = _meta("olmoe")
    shardinit.save_seed_checkpoint(model, tmp_path, seed=SEED, init_fn=model.init_weights)
    with safe_open(tmp_path / "model.safetensors", "pt") as file:
        keys = set(file.keys())
    assert "model.layers.0.mlp.experts.3.gate_proj.weight" in keys
    assert not any("gate_up_proj" in key for key in keys)


def test_command_writes_save_pretrained_files(tmp_path: Path) -> None:
    config = hub_configs()["mixtral"]
    config.save_pretrained(tmp_path / "config")
    expected = _save_pretrained("mixtral", tmp_path / "hf")
    argv = ["checkpoint", "--hf-config", str(tmp_path / "config" / "config.json")]
    assert run([*argv, "--out", str(tmp_path / "cli"), "--seed", str(SEED), "--no-progress"]) == 0
    written = file_digests(tmp_path / "cli")
    assert written.pop("shardinit-manifest.json")
    assert written == expected


def test_default_max_shard_size_is_save_pretrained_default() -> None:
    from transformers import PreTrainedModel

    signature = inspect.signature(PreTrainedModel.save_pretrained)
    assert default_max_shard_size() == signature.parameters["max_shard_size"].default


def test_a_view_of_a_model_tensor_is_placed_as_its_box_and_dim_order() -> None:
    """Where a saved tensor (a view the reverse conversion made) lies in its model
    tensor: a run per dim (dims of length 1 and 2 alike) and the dims' order."""
    source = torch.empty(4, 6)
    pair = torch.empty(2, 6)  # a dim of two: its stride names it as well as any
    for whole, view, box, order in [
        (source, source[1:3, 2:5], ((1, 3), (2, 5)), None),
        (source, source[1:2, 2:5], ((1, 2), (2, 5)), None),
        (source, source[1:3, 2:5].T, ((1, 3), (2, 5)), (1, 0)),
        (source, source[2:4, 3], ((2, 4), (3, 4)), None),
        (pair, pair[:, 1:4], ((0, 2), (1, 4)), None),
    ]:
        shape = tuple(whole.shape)
        found = _box_of("w", shape, view.storage_offset(), view.stride(), view.shape)
        assert found == (box, order), (shape, view.shape)
