"""The flows docs/seed-checkpoints.md quotes (tests/checkpoint/test_seed_checkpoint_docs.py
checks the quotes), each run by a test of this folder."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

import shardinit


def hf_seed_checkpoint(config: Any, path: str, seed: int) -> None:
    import transformers

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    # Also writes config.json and generation_config.json, as save_pretrained does.
    shardinit.save_seed_checkpoint(model, path, seed=seed, init_fn=model.init_weights)


def hf_load(path: str) -> nn.Module:
    import transformers

    # Any loader of transformers' safetensors reads it: the same files, names, dtypes.
    return transformers.AutoModelForCausalLM.from_pretrained(path)


def titan_seed_checkpoint(model_config: Any, path: str, seed: int) -> None:
    with torch.device("meta"):
        model = model_config.build()
    shardinit.save_seed_checkpoint(model, path, seed=seed, init_fn=model.init_weights, format="dcp")


def titan_initial_load(model: nn.Module, path: str) -> None:
    # What torchtitan does at step 0 with --checkpoint.initial_load_path=PATH
    # (model only, the default): load the model's flattened state dict with DCP.
    import torch.distributed.checkpoint as dcp
    from torchtitan.components.checkpointer.base import ModelWrapper

    wrapper = ModelWrapper(model)
    state_dict = wrapper.state_dict()
    dcp.load(state_dict, checkpoint_id=path)
    wrapper.load_state_dict(state_dict)


def dcp_seed_checkpoint(model: nn.Module, path: str, seed: int) -> None:
    # In every process of the group (or in one): each writes its share.
    shardinit.save_seed_checkpoint(model, path, seed=seed, format="dcp")


def dcp_load_sharded(model: nn.Module, path: str) -> None:
    # model: sharded (FSDP2, TP) and allocated, e.g. fully_shard(...); to_empty(...).
    import torch.distributed.checkpoint as dcp

    state_dict = model.state_dict()
    dcp.load(state_dict, checkpoint_id=path)
    model.load_state_dict(state_dict)
