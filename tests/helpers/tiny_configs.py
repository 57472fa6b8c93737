"""Tiny configs of real client models, shared by the client tests and the seed-checkpoint
tests (one home: both compare against the same library's own init)."""

from __future__ import annotations

from typing import Any

HIDDEN, LAYERS, VOCAB, HEADS = 64, 2, 1000, 4


def hf_llama_config(tied: bool) -> Any:
    """transformers' Llama, two layers of width 64."""
    import transformers as tf

    return tf.LlamaConfig(
        hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=2, vocab_size=VOCAB,
        max_position_embeddings=64, pad_token_id=0, tie_word_embeddings=tied,
    )  # fmt: skip


def titan_llama3_config(fuse_qkv: bool = False, tied: bool = False) -> Any:
    """torchtitan 0.3.0's Llama3 config, two layers of width 64."""
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
    from torchtitan.models.llama3 import (
        _EMBEDDING_INIT,
        _EMBEDDING_SKIP_INIT,
        _NORM_INIT,
        Llama3Model,
        _build_llama3_layers,
        _output_linear_init,
    )

    return Llama3Model.Config(
        dim=HIDDEN,
        vocab_size=VOCAB,
        # As torchtitan's 1B/3B flavors: tied, the embedding's own init skipped.
        enable_weight_tying=tied,
        tok_embeddings=Embedding.Config(
            num_embeddings=VOCAB,
            embedding_dim=HIDDEN,
            param_init=_EMBEDDING_SKIP_INIT if tied else _EMBEDDING_INIT,
        ),
        norm=RMSNorm.Config(normalized_shape=HIDDEN, param_init=_NORM_INIT),
        lm_head=Linear.Config(
            in_features=HIDDEN, out_features=VOCAB, param_init=_output_linear_init(HIDDEN)
        ),
        layers=_build_llama3_layers(
            fuse_qkv=fuse_qkv,
            n_layers=LAYERS,
            dim=HIDDEN,
            n_heads=HEADS,
            n_kv_heads=2,
            hidden_dim=128,
            attn_backend="flex",
            rope=ComplexRoPE.Config(dim=HIDDEN // HEADS, max_seq_len=64, theta=500000),
        ),
    )
