"""The one Llama-style model of the project as torch.nn modules, shaped by the configs of
:mod:`shardinit.cli.models` (kept apart so that ``shardinit plan`` imports no torch).

Not a public library module: it serves ``shardinit demo``/``fingerprint``, the
benchmarks and the tests (the examples use only the public API). No weights are
downloaded or allocated: :func:`build_model` returns a module whose parameters live on
``torch.device("meta")``, ready for ``fully_shard`` and shard-local materialization.
:meth:`Transformer.init_weights` is torchtitan's Llama init, for
``shardinit.materialize(model, seed=..., init_fn=model.init_weights)``; the demo does not
use it (it shows torch.nn's defaults).

Example:
    >>> from shardinit.cli.models import MODELS
    >>> from shardinit.cli.transformer import build_model
    >>> model = build_model("tiny")
    >>> next(model.parameters()).is_meta
    True
    >>> MODELS["tiny"].num_params() == sum(p.numel() for p in model.parameters())
    True
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .models import LlamaConfig, llama_config

__all__ = ["Attention", "FeedForward", "Transformer", "TransformerBlock", "build_model"]


class Attention(nn.Module):
    """Grouped-query causal self-attention (no rotary embedding: shapes are what matter)."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.n_kv_heads = config.n_kv_heads
        self.head_dim = config.head_dim
        kv = config.n_kv_heads * config.head_dim
        self.wq = nn.Linear(config.dim, config.dim, bias=False)
        self.wk = nn.Linear(config.dim, kv, bias=False)
        self.wv = nn.Linear(config.dim, kv, bias=False)
        self.wo = nn.Linear(config.dim, config.dim, bias=False)

    def init_weights(self, init_std: float) -> None:
        """torchtitan: q, k, v with std 0.02, the output projection with ``init_std``."""
        for linear in (self.wq, self.wk, self.wv):
            nn.init.trunc_normal_(linear.weight, mean=0.0, std=0.02)
        nn.init.trunc_normal_(self.wo.weight, mean=0.0, std=init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Causal attention over ``x`` of shape (batch, seq, dim)."""
        batch, seq, _ = x.shape
        q = self.wq(x).view(batch, seq, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(batch, seq, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(batch, seq, self.n_kv_heads, self.head_dim).transpose(1, 2)
        repeat = self.n_heads // self.n_kv_heads
        k = k.repeat_interleave(repeat, dim=1)
        v = v.repeat_interleave(repeat, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        result: torch.Tensor = self.wo(out.transpose(1, 2).reshape(batch, seq, -1))
        return result


class FeedForward(nn.Module):
    """SwiGLU: ``w2(silu(w1 x) * w3 x)``."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(config.dim, config.ffn_hidden, bias=False)
        self.w2 = nn.Linear(config.ffn_hidden, config.dim, bias=False)
        self.w3 = nn.Linear(config.dim, config.ffn_hidden, bias=False)

    def init_weights(self, init_std: float) -> None:
        """torchtitan: ``w1`` with std 0.02, ``w2`` and ``w3`` with ``init_std``."""
        nn.init.trunc_normal_(self.w1.weight, mean=0.0, std=0.02)
        for linear in (self.w2, self.w3):
            nn.init.trunc_normal_(linear.weight, mean=0.0, std=init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The feed-forward block."""
        result: torch.Tensor = self.w2(F.silu(self.w1(x)) * self.w3(x))
        return result


class TransformerBlock(nn.Module):
    """Pre-norm attention and feed-forward with residual connections.

    Args:
        config: the model's shape.
        layer_id: position in the stack; torchtitan scales the init std by it.
    """

    def __init__(self, config: LlamaConfig, layer_id: int = 0) -> None:
        super().__init__()
        self.attention = Attention(config)
        self.feed_forward = FeedForward(config)
        self.attention_norm = nn.RMSNorm(config.dim, eps=1e-5)
        self.ffn_norm = nn.RMSNorm(config.dim, eps=1e-5)
        self.weight_init_std = 0.02 / (2 * (layer_id + 1)) ** 0.5

    def init_weights(self) -> None:
        """torchtitan: norms reset, projections with the depth-scaled std."""
        for norm in (self.attention_norm, self.ffn_norm):
            norm.reset_parameters()
        self.attention.init_weights(self.weight_init_std)
        self.feed_forward.init_weights(self.weight_init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One block."""
        h = x + self.attention(self.attention_norm(x))
        result: torch.Tensor = h + self.feed_forward(self.ffn_norm(h))
        return result


class Transformer(nn.Module):
    """A Llama-style decoder-only transformer."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.dim)
        self.layers = nn.ModuleList(
            TransformerBlock(config, layer_id) for layer_id in range(config.n_layers)
        )
        self.norm = nn.RMSNorm(config.dim, eps=1e-5)
        self.output = nn.Linear(config.dim, config.vocab_size, bias=False)

    def init_weights(self) -> None:
        """torchtitan's Llama init: a standard normal embedding, depth-scaled truncated
        normals in the blocks, and an output head cut off at 3 std."""
        nn.init.normal_(self.tok_embeddings.weight)
        for layer in self.layers:
            assert isinstance(layer, TransformerBlock)
            layer.init_weights()
        self.norm.reset_parameters()
        final_out_std = self.config.dim**-0.5
        cutoff_factor = 3
        nn.init.trunc_normal_(
            self.output.weight,
            mean=0.0,
            std=final_out_std,
            a=-cutoff_factor * final_out_std,
            b=cutoff_factor * final_out_std,
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits of shape (batch, seq, vocab) for token ids of shape (batch, seq)."""
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        result: torch.Tensor = self.output(self.norm(h))
        return result


def build_model(name: str, *, device: torch.device | str = "meta") -> Transformer:
    """Builds the built-in model ``name`` (on the meta device by default: no memory).

    Args:
        name: a key of :data:`shardinit.cli.models.BUILDABLE_MODELS`.
        device: where to build; ``"cpu"`` allocates and runs torch's default init.

    Returns:
        The model.

    Raises:
        ShardInitError: an unknown name.
    """
    config = llama_config(name)
    with torch.device(device):
        return Transformer(config)
