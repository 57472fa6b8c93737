"""The one registry of the CLI's built-in models, as configs and parameter tables: the
project's one Llama-style model (tiny to 405B-shaped) and a DeepSeek-V3-shaped mixture of
experts, and the tensor-parallel plan.

Not a public library module: it serves ``shardinit demo``/``plan``/``fingerprint``, the
benchmarks and the tests. It imports no torch, so that ``shardinit plan`` does not either:
the model as torch.nn modules (``Transformer``, built on meta by ``build_model``) lives
in :mod:`shardinit.cli.transformer`. Parameter names follow the Llama reference
implementation (``tok_embeddings.weight``, ``layers.0.attention.wq.weight``, ...).
:data:`TP_PLAN` is the tensor-parallel plan the demo applies and ``shardinit plan``
predicts.

Example:
    >>> from shardinit.cli.models import MODELS, param_table
    >>> param_table("tiny")[1].name, param_table("tiny")[1].shape
    ('layers.0.attention.wq.weight', (64, 64))
    >>> MODELS["tiny"].num_params()
    164160
    >>> "deepseek-v3" in MODELS, "deepseek-v3" in BUILDABLE_MODELS
    (True, False)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

from ..errors import ShardInitError

__all__ = [
    "BUILDABLE_MODELS",
    "DEFAULT_MODEL",
    "MLA_TP_PLAN",
    "MODELS",
    "TP_PLAN",
    "LlamaConfig",
    "MoEConfig",
    "ModelConfig",
    "ParamEntry",
    "ParamKind",
    "TPStyle",
    "describe",
    "llama_config",
    "param_table",
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

    def summary(self) -> str:
        """The shape in a few words, for :func:`describe`."""
        return (
            f"dim {self.dim}, {self.n_layers} layers, ffn {self.ffn_hidden}, "
            f"vocab {self.vocab_size}"
        )

    def param_table(self) -> list[ParamEntry]:
        """Every parameter of :class:`shardinit.cli.transformer.Transformer` in
        ``named_parameters()`` order, without building a module (a 405B meta model takes
        seconds to build)."""
        dim, kv = self.dim, self.n_kv_heads * self.head_dim
        block: _BlockSpec = [
            ("attention.wq.weight", (dim, dim), "linear"),
            ("attention.wk.weight", (kv, dim), "linear"),
            ("attention.wv.weight", (kv, dim), "linear"),
            ("attention.wo.weight", (dim, dim), "linear"),
            ("feed_forward.w1.weight", (self.ffn_hidden, dim), "linear"),
            ("feed_forward.w2.weight", (dim, self.ffn_hidden), "linear"),
            ("feed_forward.w3.weight", (self.ffn_hidden, dim), "linear"),
            ("attention_norm.weight", (dim,), "norm"),
            ("ffn_norm.weight", (dim,), "norm"),
        ]
        return [
            ParamEntry("tok_embeddings.weight", (self.vocab_size, dim), "embedding"),
            *_blocks(self.n_layers, lambda _: block),
            ParamEntry("norm.weight", (dim,), "norm"),
            ParamEntry("output.weight", (self.vocab_size, dim), "linear"),
        ]


#: What a parameter is, which decides its initializer under ``shardinit plan
#: --generate``: torch.nn's default for the module type (Linear, Embedding, RMSNorm), as
#: ``shardinit.materialize`` chooses it; routed-expert stacks (3-D, no torch.nn module)
#: torchtitan's ``trunc_normal_(std=0.02)``.
ParamKind = Literal["embedding", "linear", "norm", "experts"]


@dataclass(frozen=True)
class ParamEntry:
    """One parameter of a built-in model: name, global shape and kind."""

    name: str
    shape: tuple[int, ...]
    kind: ParamKind


_BlockSpec = list[tuple[str, tuple[int, ...], ParamKind]]


def _blocks(n_layers: int, block: Callable[[int], _BlockSpec]) -> list[ParamEntry]:
    return [
        ParamEntry(f"layers.{layer}.{name}", shape, kind)
        for layer in range(n_layers)
        for name, shape, kind in block(layer)
    ]


# torchtitan 0.3's GroupedExperts: (experts, hidden, dim) for w1/w3, (experts, dim,
# hidden) for w2, named by their dims.
_EXPERTS = "moe.routed_experts.inner_experts"


@dataclass(frozen=True)
class MoEConfig:
    """Shape of a DeepSeek-V3-style decoder: multi-head latent attention (MLA), the first
    ``n_dense_layers`` blocks with a dense SwiGLU, the others with a mixture of routed
    experts (stacked, torchtitan's ``GroupedExperts``), shared experts and a router.
    Names, shapes and order are those of torchtitan 0.3's DeepSeek-V3 model
    (``named_parameters()``; tests/cli compares the 671B flavor). For ``shardinit plan``
    only: there is no module to build.

    Args:
        dim: model width (``hidden_size``).
        n_layers: transformer blocks (``num_hidden_layers``).
        n_dense_layers: leading blocks with a dense FFN (``first_k_dense_replace``).
        n_heads: attention heads.
        q_lora_rank: rank of the query down-projection.
        kv_lora_rank: rank of the key/value down-projection.
        qk_nope_head_dim: per-head query/key width without rotary embedding.
        qk_rope_head_dim: per-head query/key width with rotary embedding.
        v_head_dim: per-head value width.
        dense_hidden: dense FFN width (``intermediate_size``).
        moe_hidden: one expert's FFN width (``moe_intermediate_size``).
        n_routed_experts: routed experts per MoE block.
        n_shared_experts: shared experts per MoE block (one SwiGLU of their joint width).
        vocab_size: vocabulary size (untied embedding and output head).
    """

    dim: int
    n_layers: int
    n_dense_layers: int
    n_heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    dense_hidden: int
    moe_hidden: int
    n_routed_experts: int
    n_shared_experts: int
    vocab_size: int

    def _attention(self) -> _BlockSpec:
        dim, heads = self.dim, self.n_heads
        qk_head = self.qk_nope_head_dim + self.qk_rope_head_dim
        return [
            ("attention.wq_a.weight", (self.q_lora_rank, dim), "linear"),
            ("attention.q_norm.weight", (self.q_lora_rank,), "norm"),
            ("attention.wq_b.weight", (heads * qk_head, self.q_lora_rank), "linear"),
            ("attention.wkv_a.weight", (self.kv_lora_rank + self.qk_rope_head_dim, dim), "linear"),
            ("attention.kv_norm.weight", (self.kv_lora_rank,), "norm"),
            (
                "attention.wkv_b.weight",
                (heads * (self.qk_nope_head_dim + self.v_head_dim), self.kv_lora_rank),
                "linear",
            ),
            ("attention.wo.weight", (dim, heads * self.v_head_dim), "linear"),
            ("attention_norm.weight", (dim,), "norm"),
            ("ffn_norm.weight", (dim,), "norm"),
        ]

    def _ffn(self, prefix: str, hidden: int) -> _BlockSpec:
        return [
            (f"{prefix}.w1.weight", (hidden, self.dim), "linear"),
            (f"{prefix}.w2.weight", (self.dim, hidden), "linear"),
            (f"{prefix}.w3.weight", (hidden, self.dim), "linear"),
        ]

    def _block(self, layer: int) -> _BlockSpec:
        if layer < self.n_dense_layers:
            return self._attention() + self._ffn("feed_forward", self.dense_hidden)
        experts, dim, hidden = self.n_routed_experts, self.dim, self.moe_hidden
        return [
            *self._attention(),
            (f"{_EXPERTS}.w1_EFD", (experts, hidden, dim), "experts"),
            (f"{_EXPERTS}.w2_EDF", (experts, dim, hidden), "experts"),
            (f"{_EXPERTS}.w3_EFD", (experts, hidden, dim), "experts"),
            ("moe.router.gate.weight", (experts, dim), "linear"),
            *self._ffn("moe.shared_experts", hidden * self.n_shared_experts),
        ]

    def param_table(self) -> list[ParamEntry]:
        """Every parameter, in module order (embedding, blocks, norm, output head)."""
        return [
            ParamEntry("tok_embeddings.weight", (self.vocab_size, self.dim), "embedding"),
            *_blocks(self.n_layers, self._block),
            ParamEntry("norm.weight", (self.dim,), "norm"),
            ParamEntry("lm_head.weight", (self.vocab_size, self.dim), "linear"),
        ]

    def num_params(self) -> int:
        """Number of parameters (the multi-token-prediction module not included)."""
        return sum(math.prod(entry.shape) for entry in self.param_table())

    def summary(self) -> str:
        """The shape in a few words, for :func:`describe`."""
        return (
            f"dim {self.dim}, {self.n_layers} layers of which {self.n_dense_layers} dense, "
            f"{self.n_routed_experts} routed + {self.n_shared_experts} shared experts of "
            f"{self.moe_hidden}, vocab {self.vocab_size}"
        )


#: A built-in model's config.
ModelConfig = LlamaConfig | MoEConfig
_Config = TypeVar("_Config", LlamaConfig, ModelConfig)


#: Every built-in model by name, the dense Llamas smallest first, then the mixtures of
#: experts; ``shardinit plan`` knows them all.
MODELS: dict[str, ModelConfig] = {
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
    # Meta's Llama 3.1 70B, original/params.json: dim 8192, n_layers 80, n_heads 64,
    # n_kv_heads 8, ffn_dim_multiplier 1.3, multiple_of 4096, vocab_size 128256; the
    # resulting SwiGLU width is config.json's intermediate_size 28672. 70.55B parameters.
    "llama-70b": LlamaConfig(
        dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, ffn_hidden=28672, vocab_size=128256
    ),
    # Meta's Llama 3.1 405B, params.json: dim 16384, n_layers 126, n_heads 128,
    # n_kv_heads 8, ffn_dim_multiplier 1.2, multiple_of 4096, vocab_size 128256
    # (config.json: intermediate_size 53248). 405.85B parameters.
    "llama-405b": LlamaConfig(
        dim=16384, n_layers=126, n_heads=128, n_kv_heads=8, ffn_hidden=53248, vocab_size=128256
    ),
    "tiny-moe": MoEConfig(
        dim=64,
        n_layers=3,
        n_dense_layers=1,
        n_heads=4,
        q_lora_rank=32,
        kv_lora_rank=16,
        qk_nope_head_dim=8,
        qk_rope_head_dim=4,
        v_head_dim=8,
        dense_hidden=192,
        moe_hidden=32,
        n_routed_experts=8,
        n_shared_experts=1,
        vocab_size=512,
    ),
    # DeepSeek-V3, deepseek-ai/DeepSeek-V3 config.json: hidden_size 7168,
    # num_hidden_layers 61, first_k_dense_replace 3, num_attention_heads 128,
    # q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64,
    # v_head_dim 128, intermediate_size 18432, moe_intermediate_size 2048,
    # n_routed_experts 256, n_shared_experts 1, vocab_size 129280, untied. 671.0B
    # parameters: the published total without the multi-token-prediction layer.
    "deepseek-v3": MoEConfig(
        dim=7168,
        n_layers=61,
        n_dense_layers=3,
        n_heads=128,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
        dense_hidden=18432,
        moe_hidden=2048,
        n_routed_experts=256,
        n_shared_experts=1,
        vocab_size=129280,
    ),
}

#: The models that have a module (``shardinit demo``/``fingerprint`` build them).
BUILDABLE_MODELS: dict[str, LlamaConfig] = {
    name: config for name, config in MODELS.items() if isinstance(config, LlamaConfig)
}

#: The config ``shardinit demo`` uses unless told otherwise.
DEFAULT_MODEL = "demo"

#: How tensor parallelism splits a Linear: its weight's rows ("colwise", output features)
#: or columns ("rowwise", input features).
TPStyle = Literal["colwise", "rowwise"]

#: The tensor-parallel plan of a :class:`shardinit.cli.transformer.TransformerBlock`, by
#: module path inside the block (Megatron's pairing: q/k/v and w1/w3 column-wise, the
#: projections back to ``dim`` row-wise). ``shardinit demo`` applies it with
#: ``parallelize_module``; ``shardinit plan`` predicts the placements it leads to
#: (:func:`tp_style`).
TP_PLAN: dict[str, TPStyle] = {
    "attention.wq": "colwise",
    "attention.wk": "colwise",
    "attention.wv": "colwise",
    "attention.wo": "rowwise",
    "feed_forward.w1": "colwise",
    "feed_forward.w2": "rowwise",
    "feed_forward.w3": "colwise",
}

#: The extra TP styles of :class:`MoEConfig`'s multi-head latent attention, as
#: torchtitan's DeepSeek-V3 sharding: the up-projections column-wise; the
#: down-projections (``wq_a``, ``wkv_a``), their norms and the router stay whole. Its
#: FFNs (dense and shared experts) follow :data:`TP_PLAN`'s ``w1``/``w2``/``w3``.
MLA_TP_PLAN: dict[str, TPStyle] = {"attention.wq_b": "colwise", "attention.wkv_b": "colwise"}

# A parameter is matched by its module's own name, so a shapes file with another prefix
# (``model.layers.0.attention.wq.weight``) gets the same plan.
_TP_STYLE_BY_MODULE: dict[str, TPStyle] = {
    path.rsplit(".", 1)[-1]: style for path, style in (TP_PLAN | MLA_TP_PLAN).items()
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


def llama_config(name: str) -> LlamaConfig:
    """The :data:`BUILDABLE_MODELS` config ``name``.

    Raises:
        ShardInitError: an unknown name.
    """
    return _lookup(BUILDABLE_MODELS, name)


def param_table(name: str) -> list[ParamEntry]:
    """Every parameter of the built-in model ``name`` (a key of :data:`MODELS`), in
    module order, built from the config alone.

    Raises:
        ShardInitError: an unknown name.
    """
    return _lookup(MODELS, name).param_table()


def describe(name: str) -> str:
    """One line: ``name: N parameters (dim, layers, ...)``.

    Raises:
        ShardInitError: an unknown name.
    """
    config = _lookup(MODELS, name)
    return f"{name}: {_count(config.num_params())} parameters ({config.summary()})"


def _lookup(registry: dict[str, _Config], name: str) -> _Config:
    if name not in registry:
        raise ShardInitError(f"unknown model {name!r}; choose one of {', '.join(registry)}")
    return registry[name]


def _count(params: int) -> str:
    millions = params / 1e6
    return f"{millions / 1000:.2f}B" if millions >= 1000 else f"{millions:.1f}M"
