"""Models whose init code is written in the style of real projects, for the capture tests.

* ``TitanLlama``: torchtitan's Llama ``init_weights`` (trunc_normal_ with a per-layer
  std, ``nn.init.normal_`` on the embedding, ``reset_parameters`` on the norms, a
  cut-off output projection, rotary frequencies recomputed into a buffer), plus a fused
  qkv weight whose slices get different stds.
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

# --------------------------------------------------------------------------- torchtitan


class TitanAttention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.dim = dim

    def init_weights(self, init_std: float) -> None:
        # q rows with one std, k/v rows with another: sub-regions of one parameter.
        nn.init.trunc_normal_(self.wqkv.weight[: self.dim], mean=0.0, std=0.02)
        nn.init.trunc_normal_(self.wqkv.weight[self.dim :], mean=0.0, std=0.04)
        nn.init.trunc_normal_(self.wo.weight, mean=0.0, std=init_std)


class TitanFeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def init_weights(self, init_std: float) -> None:
        nn.init.trunc_normal_(self.w1.weight, mean=0.0, std=0.02)
        for linear in (self.w2, self.w3):
            nn.init.trunc_normal_(linear.weight, mean=0.0, std=init_std)


class TitanBlock(nn.Module):
    def __init__(self, layer_id: int, dim: int, hidden: int) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(dim)
        self.attention = TitanAttention(dim)
        self.ffn_norm = nn.RMSNorm(dim)
        self.feed_forward = TitanFeedForward(dim, hidden)
        self.weight_init_std = 0.02 / (2 * (layer_id + 1)) ** 0.5

    def init_weights(self) -> None:
        for norm in (self.attention_norm, self.ffn_norm):
            norm.reset_parameters()
        self.attention.init_weights(self.weight_init_std)
        self.feed_forward.init_weights(self.weight_init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.attention.wqkv(self.attention_norm(x))[..., : self.attention.dim]
        x = x + self.attention.wo(torch.tanh(q))
        h = self.ffn_norm(x)
        return x + self.feed_forward.w2(
            torch.nn.functional.silu(self.feed_forward.w1(h)) * self.feed_forward.w3(h)
        )


class TitanLlama(nn.Module):
    def __init__(self, vocab: int = 37, dim: int = 16, hidden: int = 24, layers: int = 2) -> None:
        super().__init__()
        self.dim = dim
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleDict({str(i): TitanBlock(i, dim, hidden) for i in range(layers)})
        self.norm = nn.RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        self.register_buffer("freqs_cis", self._precompute_freqs_cis(), persistent=False)

    def _precompute_freqs_cis(self) -> torch.Tensor:
        freqs = 1.0 / (10000.0 ** (torch.arange(0, self.dim, 2).float() / self.dim))
        positions = torch.arange(8).float()
        return torch.polar(torch.ones(8, self.dim // 2), torch.outer(positions, freqs))

    def init_weights(self, buffer_device: torch.device | None = None) -> None:
        buffer_device = buffer_device or self.freqs_cis.device
        with torch.device(buffer_device):
            self.freqs_cis = self._precompute_freqs_cis()
        nn.init.normal_(self.tok_embeddings.weight)
        for layer in self.layers.values():
            assert isinstance(layer, TitanBlock)
            layer.init_weights()
        self.norm.reset_parameters()
        final_out_std = self.dim**-0.5
        cutoff_factor = 3
        nn.init.trunc_normal_(
            self.output.weight,
            mean=0.0,
            std=final_out_std,
            a=-cutoff_factor * final_out_std,
            b=cutoff_factor * final_out_std,
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            x = layer(x)
        return self.output(self.norm(x))


def titan_expected(model: TitanLlama) -> dict[str, tuple[str, float, float]]:
    """Per parameter name: (kind, std or value, cut-off) written out by hand."""
    dim = model.dim
    expected: dict[str, tuple[str, float, float]] = {
        "tok_embeddings.weight": ("normal", 1.0, math.inf),
        "norm.weight": ("const", 1.0, 0.0),
        "output.weight": ("trunc", dim**-0.5, 3 * dim**-0.5),
    }
    for i in range(len(model.layers)):
        std = 0.02 / (2 * (i + 1)) ** 0.5
        p = f"layers.{i}."
        expected[p + "attention_norm.weight"] = ("const", 1.0, 0.0)
        expected[p + "ffn_norm.weight"] = ("const", 1.0, 0.0)
        expected[p + "attention.wo.weight"] = ("trunc", std, 2.0)
        expected[p + "feed_forward.w1.weight"] = ("trunc", 0.02, 2.0)
        expected[p + "feed_forward.w2.weight"] = ("trunc", std, 2.0)
        expected[p + "feed_forward.w3.weight"] = ("trunc", std, 2.0)
        expected[p + "attention.wqkv.weight"] = ("qkv", 0.02, 0.04)
    return expected


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
