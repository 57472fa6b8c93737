"""The one Llama-style model of the project: built-in configs (tiny to 8B-shaped) for
the CLI, and the model ``examples/fsdp2_llama.py`` and the tests build.

Not a public library module: it serves ``shardinit demo``/``plan``/``fingerprint``, the
example and the tests. No weights are downloaded or allocated: :func:`build_model`
returns a module whose parameters live on ``torch.device("meta")``, ready for
``fully_shard`` and shard-local materialization. Parameter names follow the Llama
reference implementation (``tok_embeddings.weight``, ``layers.0.attention.wq.weight``,
...). :meth:`Transformer.init_weights` is torchtitan's Llama init, for
``shardinit.materialize(model, seed=..., init_fn=model.init_weights)``; the demo does not
use it (it shows torch.nn's defaults). :data:`TP_PLAN` is the tensor-parallel plan the
demo applies and ``shardinit plan`` predicts.

Example:
    >>> from shardinit.cli.models import build_model, MODELS
    >>> model = build_model("tiny")
    >>> next(model.parameters()).is_meta
    True
    >>> MODELS["tiny"].num_params() == sum(p.numel() for p in model.parameters())
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ShardInitError

__all__ = [
    "DEFAULT_MODEL",
    "MODELS",
    "TP_PLAN",
    "LlamaConfig",
    "TPStyle",
    "Transformer",
    "TransformerBlock",
    "build_model",
    "describe",
    "param_shapes",
    "tp_style",
]


@dataclass(frozen=True)
class LlamaConfig:
    """Shape of a Llama-style decoder (no weights).

    Args:
        dim: model width.
        n_layers: number of transformer blocks.
        n_heads: attention heads.
        n_kv_heads: key/value heads (grouped-query attention).
        ffn_hidden: SwiGLU hidden width.
        vocab_size: vocabulary size (embedding and output head rows).
    """

    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_hidden: int
    vocab_size: int

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.dim // self.n_heads

    def num_params(self) -> int:
        """Number of parameters (untied embedding and output head)."""
        kv = self.n_kv_heads * self.head_dim
        attention = 2 * self.dim * self.dim + 2 * self.dim * kv
        feed_forward = 3 * self.dim * self.ffn_hidden
        block = attention + feed_forward + 2 * self.dim
        return self.n_layers * block + 2 * self.vocab_size * self.dim + self.dim


#: Built-in configs by name, smallest first.
MODELS: dict[str, LlamaConfig] = {
    "tiny": LlamaConfig(
        dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_hidden=192, vocab_size=512
    ),
    "small": LlamaConfig(
        dim=256, n_layers=4, n_heads=8, n_kv_heads=4, ffn_hidden=768, vocab_size=8192
    ),
    "demo": LlamaConfig(
        dim=512, n_layers=8, n_heads=8, n_kv_heads=4, ffn_hidden=1536, vocab_size=32000
    ),
    "llama-1b": LlamaConfig(
        dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, ffn_hidden=8192, vocab_size=128256
    ),
    "llama-8b": LlamaConfig(
        dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_hidden=14336, vocab_size=128256
    ),
}

#: The config ``shardinit demo`` uses unless told otherwise.
DEFAULT_MODEL = "demo"

#: How tensor parallelism splits a Linear: its weight's rows ("colwise", output features)
#: or columns ("rowwise", input features).
TPStyle = Literal["colwise", "rowwise"]

#: The tensor-parallel plan of a :class:`TransformerBlock`, by module path inside the
#: block (Megatron's pairing: q/k/v and w1/w3 column-wise, the projections back to
#: ``dim`` row-wise). ``shardinit demo`` applies it with ``parallelize_module``;
#: ``shardinit plan`` predicts the placements it leads to (:func:`tp_style`).
TP_PLAN: dict[str, TPStyle] = {
    "attention.wq": "colwise",
    "attention.wk": "colwise",
    "attention.wv": "colwise",
    "attention.wo": "rowwise",
    "feed_forward.w1": "colwise",
    "feed_forward.w2": "rowwise",
    "feed_forward.w3": "colwise",
}

# A parameter is matched by its module's own name, so a shapes file with another prefix
# (``model.layers.0.attention.wq.weight``) gets the same plan.
_TP_STYLE_BY_MODULE: dict[str, TPStyle] = {
    path.rsplit(".", 1)[-1]: style for path, style in TP_PLAN.items()
}


def tp_style(param_name: str) -> TPStyle | None:
    """The :data:`TP_PLAN` style that splits parameter ``param_name``, or None.

    Only the ``weight`` of a module named in the plan is split (the plan's Linears have
    no bias); everything else stays whole under TP.

    Example:
        >>> tp_style("layers.3.attention.wo.weight"), tp_style("norm.weight")
        ('rowwise', None)
    """
    module, _, attr = param_name.rpartition(".")
    if attr != "weight":
        return None
    return _TP_STYLE_BY_MODULE.get(module.rpartition(".")[2])


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


def _config(name: str) -> LlamaConfig:
    if name not in MODELS:
        raise ShardInitError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    return MODELS[name]


def build_model(name: str, *, device: torch.device | str = "meta") -> Transformer:
    """Builds the built-in model ``name`` (on the meta device by default: no memory).

    Args:
        name: a key of :data:`MODELS`.
        device: where to build; ``"cpu"`` allocates and runs torch's default init.

    Returns:
        The model.

    Raises:
        ShardInitError: an unknown name.
    """
    config = _config(name)
    with torch.device(device):
        return Transformer(config)


def param_shapes(name: str) -> dict[str, tuple[int, ...]]:
    """Global parameter shapes of the built-in model ``name``, in ``named_parameters()``
    order, without building anything but meta tensors.

    Raises:
        ShardInitError: an unknown name.
    """
    model = build_model(name)
    return {key: tuple(param.shape) for key, param in model.named_parameters()}


def describe(name: str) -> str:
    """One line: ``name: N params (dim, layers, vocab)``."""
    config = _config(name)
    millions = config.num_params() / 1e6
    size = f"{millions / 1000:.2f}B" if millions >= 1000 else f"{millions:.1f}M"
    return (
        f"{name}: {size} parameters (dim {config.dim}, {config.n_layers} layers, "
        f"ffn {config.ffn_hidden}, vocab {config.vocab_size})"
    )
