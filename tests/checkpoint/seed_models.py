"""Tiny models of the seed-checkpoint tests: a plain torch model with a tensor larger
than the smallest buffer (1 MiB: written in pieces), a bfloat16 tensor, a tie and a
persistent buffer; and transformers' Llama, tied and untied."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch
from torch import nn

SEED = 20260312
#: The smallest buffer save_seed_checkpoint takes: the embedding below is 1.25 MiB.
BUFFER = 2**20
#: Small enough that the model is split into several files.
SHARD = 40_000


class Tiny(nn.Module):
    """An embedding larger than the buffer, a tied head, a bfloat16 projection, a norm
    with a persistent buffer (BatchNorm's running statistics)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(1024, 320)
        self.proj = nn.Linear(320, 96).to(torch.bfloat16)
        self.norm = nn.BatchNorm1d(96)
        self.head = nn.Linear(320, 1024, bias=False)
        self.head.weight = self.embed.weight


def meta_tiny() -> Tiny:
    with torch.device("meta"):
        return Tiny()


def file_digests(directory: Path) -> dict[str, str]:
    """sha256 of every file of a checkpoint (the plan and records left out)."""
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.iterdir())
        if path.is_file()
    }


def hub_configs() -> dict[str, Any]:
    """transformers configs the other seed-checkpoint tests do not use: a tied one, an
    untied one, and two MoE models whose experts transformers 5 fuses in memory (and
    saves per expert, under the Hub's names: OLMoE's ``mlp.experts.{i}.gate_proj``,
    Mixtral's ``block_sparse_moe.experts.{i}.w1``)."""
    import transformers as tf

    shared = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=96,
                  max_position_embeddings=32, pad_token_id=0, bos_token_id=1,
                  eos_token_id=2)  # fmt: skip
    return {
        "qwen2-tied": tf.Qwen2Config(**shared, tie_word_embeddings=True),
        "olmo2-untied": tf.Olmo2Config(**shared, tie_word_embeddings=False),
        "olmoe": tf.OlmoeConfig(**shared, num_experts=4, num_experts_per_tok=2),
        "mixtral": tf.MixtralConfig(**shared, num_local_experts=3, num_experts_per_tok=2),
    }
