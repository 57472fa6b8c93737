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


def llama_config(tied: bool) -> Any:
    import transformers as tf

    return tf.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=1000, max_position_embeddings=64, pad_token_id=0,
        tie_word_embeddings=tied,
    )  # fmt: skip


def titan_config(tied: bool) -> Any:
    """torchtitan 0.3.0's Llama3 config, tiny (as tests/clients builds it)."""
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
    from torchtitan.models.llama3 import (
        _EMBEDDING_INIT,
        _EMBEDDING_SKIP_INIT,
        _NORM_INIT,
        Llama3Model,
        _build_llama3_layers,
        _output_linear_init,
    )

    hidden, vocab = 64, 1000
    return Llama3Model.Config(
        dim=hidden,
        vocab_size=vocab,
        enable_weight_tying=tied,
        tok_embeddings=Embedding.Config(
            num_embeddings=vocab,
            embedding_dim=hidden,
            param_init=_EMBEDDING_SKIP_INIT if tied else _EMBEDDING_INIT,
        ),
        norm=RMSNorm.Config(normalized_shape=hidden, param_init=_NORM_INIT),
        lm_head=Linear.Config(
            in_features=hidden, out_features=vocab, param_init=_output_linear_init(hidden)
        ),
        layers=_build_llama3_layers(
            fuse_qkv=False,
            n_layers=2,
            dim=hidden,
            n_heads=4,
            n_kv_heads=2,
            hidden_dim=128,
            attn_backend="flex",
            rope=ComplexRoPE.Config(dim=16, max_seq_len=64, theta=500000),
        ),
    )
