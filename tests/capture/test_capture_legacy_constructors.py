"""A parameter made in a constructor by the legacy ``torch.Tensor(n)`` (transformers'
``masked_spec_embed = nn.Parameter(torch.Tensor(h).uniform_())``, ``level_embed``): the
legacy constructor ignores ``torch.device("meta")``, so the parameter sits in CPU
memory in a model built on meta, and ``materialize`` refused it as "already
materialized" (issue 37, "Refused, but ordinary"). Where init_fn writes all of it,
eager's value is init_fn's: it is filled so. Where init_fn does not, eager's value is
the constructor's (uninitialized memory, or torch's draw): refused, naming it and
saying why."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import shardinit


class _Embedded(nn.Module):
    def __init__(self, legacy: bool) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 16)
        if legacy:
            self.masked_spec_embed = nn.Parameter(torch.Tensor(16).uniform_())
            self.gamma = nn.Parameter(torch.Tensor(16))
        else:
            self.masked_spec_embed = nn.Parameter(torch.empty(16))
            self.gamma = nn.Parameter(torch.empty(16))

    def init_weights(self) -> None:
        nn.init.uniform_(self.masked_spec_embed)
        nn.init.constant_(self.gamma, 1e-4)


def _materialized(legacy: bool, init: Callable[[_Embedded], object]) -> _Embedded:
    with torch.device("meta"):
        model = _Embedded(legacy)
    assert model.proj.weight.is_meta
    assert model.gamma.device.type == ("cpu" if legacy else "meta")
    shardinit.materialize(model, seed=0, init_fn=lambda: init(model))
    return model


def test_a_legacy_parameter_init_fn_writes_is_filled_as_eager() -> None:
    legacy = _materialized(True, _Embedded.init_weights)
    on_meta = _materialized(False, _Embedded.init_weights)
    for name, value in on_meta.named_parameters():
        assert torch.equal(dict(legacy.named_parameters())[name], value), name
    assert torch.equal(legacy.gamma, torch.full((16,), 1e-4))
    assert float(legacy.masked_spec_embed.detach().min()) >= 0.0
    assert float(legacy.masked_spec_embed.detach().max()) < 1.0
    assert legacy.masked_spec_embed.unique().numel() == 16


def test_a_legacy_parameter_init_fn_leaves_is_refused_naming_it() -> None:
    with torch.device("meta"):
        model = _Embedded(legacy=True)
    with pytest.raises(shardinit.ShardInitError) as raised:
        shardinit.materialize(
            model,
            seed=0,
            rules={"gamma": shardinit.init.zeros()},
            init_fn=lambda: nn.init.uniform_(model.masked_spec_embed),
        )
    message = str(raised.value)
    assert "already materialized: gamma." in message
    assert "legacy constructors ignore torch.device('meta')" in message
    assert "masked_spec_embed" not in message
    with pytest.raises(shardinit.ShardInitError, match=r"no rule .* for 1 parameter\(s\): gamma"):
        shardinit.materialize(model, seed=0, init_fn=lambda: nn.init.ones_(model.masked_spec_embed))
    assert model.proj.weight.is_meta  # refused before anything was allocated


def test_a_model_off_meta_is_still_already_materialized() -> None:
    model = _Embedded(legacy=True)  # every parameter real: nothing to fill
    with pytest.raises(shardinit.ShardInitError) as raised:
        shardinit.materialize(model, seed=0, init_fn=model.init_weights)
    message = str(raised.value)
    assert "already materialized" in message and "legacy constructors" not in message


def test_transformers_lw_detr_gammas_are_eagers() -> None:
    # LwDetrViTLayer: gamma_1 = nn.Parameter(torch.Tensor(dim)); _init_weights: constant_.
    from transformers.models.lw_detr.configuration_lw_detr import LwDetrViTConfig
    from transformers.models.lw_detr.modeling_lw_detr import LwDetrViTBackbone

    config = LwDetrViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2,
        image_size=64, patch_size=16, window_block_indices=[0], out_indices=[2],
        pretrain_image_size=64,
    )  # fmt: skip
    with torch.device("meta"):
        model = LwDetrViTBackbone(config)
    legacy = [n for n, p in model.named_parameters() if not p.is_meta]
    assert legacy == [f"encoder.layer.{i}.gamma_{j}" for i in (0, 1) for j in (1, 2)]
    shardinit.materialize(model, seed=0, init_fn=model.init_weights)
    eager = LwDetrViTBackbone(config)
    values = dict(eager.named_parameters())
    for name in legacy:
        assert torch.equal(dict(model.named_parameters())[name], values[name]), name
    assert not any(p.is_meta for p in model.parameters())
    assert model(torch.randn(1, 3, 64, 64)).feature_maps[0].shape == (1, 32, 4, 4)
