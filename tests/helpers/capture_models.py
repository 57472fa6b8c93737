"""Models whose init code is written in the style of real projects, for the capture tests.

* ``llama``: the project's one Llama (``shardinit.cli.transformer.Transformer``) at a test
  size; its ``init_weights`` is torchtitan's Llama init (trunc_normal_ with a per-layer
  std, ``nn.init.normal_`` on the embedding, ``reset_parameters`` on the norms, a
  cut-off output projection). ``llama_expected`` writes that init out by hand.
* ``RotaryStack``: no Llama, the other things torchtitan-style init code does: a fused
  qkv weight whose row blocks get different stds (``FusedQKV``), blocks in a ModuleDict,
  and rotary frequencies recomputed into a buffer by ``init_weights``.
* ``HFModel``: Hugging Face ``_init_weights`` through ``model.apply`` (``.data.normal_``,
  zeroed bias, ``weight.data[padding_idx].zero_()``, LayerNorm ``fill_(1.0)``), with
  GPT-2's scaled residual projections (``p.data.normal_(0, 0.02 / sqrt(2 * n_layer))`` on
  ``c_proj.weight``) and a tied lm head (whose Linear init runs last and so overwrites
  the tied embedding's zeroed padding row, as in eager torch; ``wpe`` keeps its zero row).
* ``TorchDefaults``: torch's own ``reset_parameters`` of Linear, Conv2d, Embedding,
  LayerNorm and MultiheadAttention.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from shardinit.cli.models import LlamaConfig
from shardinit.cli.transformer import Transformer

# --------------------------------------------------------------------------- torchtitan

#: The project's one Llama (``shardinit.cli.transformer``, whose ``init_weights`` is
#: torchtitan's Llama init) at a test size: grouped-query attention, and every q/k/v
#: weight of at least 200 elements, enough to compare its std with torch's.
TINY_LLAMA = LlamaConfig(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_hidden=48, vocab_size=37)


def llama(config: LlamaConfig = TINY_LLAMA) -> Transformer:
    """The project's Llama, built on the current default device."""
    return Transformer(config)


def llama_expected(model: Transformer) -> dict[str, tuple[str, float, float]]:
    """Per parameter name: (kind, std or value, cut-off) of torchtitan's Llama init,
    written out by hand."""
    dim = model.config.dim
    expected: dict[str, tuple[str, float, float]] = {
        "tok_embeddings.weight": ("normal", 1.0, math.inf),
        "norm.weight": ("const", 1.0, 0.0),
        "output.weight": ("trunc", dim**-0.5, 3 * dim**-0.5),
    }
    for i in range(model.config.n_layers):
        depth_std = 0.02 / (2 * (i + 1)) ** 0.5
        p = f"layers.{i}."
        expected[p + "attention_norm.weight"] = ("const", 1.0, 0.0)
        expected[p + "ffn_norm.weight"] = ("const", 1.0, 0.0)
        for linear in ("attention.wq", "attention.wk", "attention.wv", "feed_forward.w1"):
            expected[p + linear + ".weight"] = ("trunc", 0.02, 2.0)
        for linear in ("attention.wo", "feed_forward.w2", "feed_forward.w3"):
            expected[p + linear + ".weight"] = ("trunc", depth_std, 2.0)
    return expected


# --------------------------------------------------------------------------- fused, computed


class FusedQKV(nn.Module):
    """A fused q/k/v projection whose q rows and k/v rows get different stds (0.02 and
    0.04): two captured sub-regions of one parameter."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim
        self.wqkv = nn.Linear(dim, 3 * dim, bias=False)

    def init_weights(self) -> None:
        nn.init.trunc_normal_(self.wqkv.weight[: self.dim], mean=0.0, std=0.02)
        nn.init.trunc_normal_(self.wqkv.weight[self.dim :], mean=0.0, std=0.04)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.wqkv(x)).unflatten(-1, (3, self.dim)).sum(-2)


class RotaryStack(nn.Module):
    """``FusedQKV`` blocks kept in a ModuleDict (as torchtitan keeps its layers), then a
    rotation by rotary frequencies held in a non-persistent buffer that ``init_weights``
    recomputes: on a meta model only the init code can give that buffer its values."""

    def __init__(self, dim: int = 16, layers: int = 2, max_seq: int = 8) -> None:
        super().__init__()
        self.dim = dim
        self.max_seq = max_seq
        self.layers = nn.ModuleDict({str(i): FusedQKV(dim) for i in range(layers)})
        self.register_buffer("freqs_cis", self.rotary_frequencies(), persistent=False)

    def rotary_frequencies(self) -> torch.Tensor:
        """(max_seq, dim / 2) unit complex numbers, on the current default device."""
        freqs = 1.0 / (10000.0 ** (torch.arange(0, self.dim, 2).float() / self.dim))
        positions = torch.arange(self.max_seq).float()
        angles = torch.outer(positions, freqs)
        return torch.polar(torch.ones(self.max_seq, self.dim // 2), angles)

    def init_weights(self, buffer_device: torch.device | None = None) -> None:
        buffer_device = buffer_device or self.freqs_cis.device
        with torch.device(buffer_device):
            self.freqs_cis = self.rotary_frequencies()
        for layer in self.layers.values():
            assert isinstance(layer, FusedQKV)
            layer.init_weights()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` of shape (batch, seq, dim), seq at most max_seq."""
        for layer in self.layers.values():
            x = layer(x)
        pairs = torch.view_as_complex(x.unflatten(-1, (-1, 2)))
        return torch.view_as_real(pairs * self.freqs_cis[: x.shape[-2]]).flatten(-2)

    def example_input(self) -> torch.Tensor:
        """A fixed (1, 6, dim) input."""
        return torch.linspace(-1.0, 1.0, 6 * self.dim).reshape(1, 6, self.dim)


# --------------------------------------------------------------------------- Hugging Face


class HFBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.c_fc = nn.Linear(dim, 2 * dim)
        self.mlp_c_proj = nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.c_proj(self.c_attn(self.ln_1(x))[..., : x.shape[-1]])
        return x + self.mlp_c_proj(torch.relu(self.c_fc(self.ln_2(x))))


class HFModel(nn.Module):
    def __init__(
        self, vocab: int = 29, dim: int = 12, n_layer: int = 2, initializer_range: float = 0.02
    ) -> None:
        super().__init__()
        self.n_layer = n_layer
        self.initializer_range = initializer_range
        self.wte = nn.Embedding(vocab, dim, padding_idx=3)
        self.wpe = nn.Embedding(16, dim, padding_idx=0)
        self.h = nn.ModuleList(HFBlock(dim) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            module.weight.data.normal_(mean=0.0, std=self.initializer_range)
            if module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.data.normal_(mean=0.0, std=self.initializer_range)
            if module.padding_idx is not None:
                module.weight.data[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            module.bias.data.zero_()
            module.weight.data.fill_(1.0)
        # GPT-2: scaled residual projections.
        for name, p in module.named_parameters():
            if name == "c_proj.weight":
                p.data.normal_(mean=0.0, std=(self.initializer_range / math.sqrt(2 * self.n_layer)))

    def init(self) -> None:
        self.apply(self._init_weights)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[-1]))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


# --------------------------------------------------------------------------- torch defaults


class TorchDefaults(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(11, 6, padding_idx=2)
        self.linear = nn.Linear(6, 5)
        self.conv = nn.Conv2d(3, 4, 3)
        self.norm = nn.LayerNorm(5)
        self.attention = nn.MultiheadAttention(6, 2)

    def reset(self) -> None:
        for module in self.modules():
            if module is not self and hasattr(module, "reset_parameters"):
                module.reset_parameters()
        self.attention._reset_parameters()


def eager(
    factory: Callable[[], nn.Module], init: Callable[[nn.Module], None], seed: int
) -> nn.Module:
    """The model built on CPU and initialized by its own code, with torch's RNG."""
    torch.manual_seed(seed)
    model = factory()
    init(model)
    return model


def linear_pair(init: Callable[[nn.Linear], object]) -> tuple[nn.Linear, nn.Linear]:
    """A meta ``nn.Linear(16, 32)`` materialized (seed 0) with ``init`` as its init code,
    and a CPU one that ``init`` ran on eagerly: the pair the capture tests compare."""
    import shardinit

    with torch.device("meta"):
        model = nn.Linear(16, 32)
    shardinit.materialize(model, seed=0, init_fn=lambda: init(model))
    eager = nn.Linear(16, 32)
    init(eager)
    return model, eager
