"""After ``materialize`` no tensor the model holds is on meta (issue 37): a meta tensor
held as a plain attribute, or in a list, tuple or dict attribute, is refused before
anything is allocated, naming each; an attribute that is one of the model's parameters or
buffers ends as that very tensor, as in eager torch. A table a constructor computed
inside record_constructors is computed, as eager torch computes it: two diffusers models
keep their rotary tables this way (Lumina2: a list attribute; QwenImage: two plain
attributes, complex both)."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest
import torch
from torch import nn

import shardinit


def _held_tensors(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor ``model`` holds: parameters, buffers, and those in plain attributes
    and in lists, tuples and dicts of them (two levels)."""
    yield from model.named_parameters()
    yield from model.named_buffers()
    for path, module in model.named_modules():
        for attr, value in vars(module).items():
            if attr in ("_parameters", "_buffers", "_modules"):
                continue
            values = value.values() if isinstance(value, dict) else value
            items = [value] if isinstance(value, torch.Tensor) else values
            if isinstance(value, (torch.Tensor, list, tuple, dict)):
                for item in items:
                    if isinstance(item, torch.Tensor):
                        yield f"{path}.{attr}", item


class Pair(NamedTuple):
    table: torch.Tensor
    scale: float


class Rope(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.freqs_cis = [torch.arange(4.0), torch.ones(2)]
        self.pos_freqs = torch.linspace(0, 1, 3)
        self.tables = {"neg": (torch.zeros(2),)}
        self.named = Pair(torch.ones(2), 0.5)


def test_meta_tensors_in_plain_attributes_are_refused_naming_each() -> None:
    with torch.device("meta"):
        model = nn.Sequential(Rope())
    with pytest.raises(shardinit.ShardInitError) as refused:
        shardinit.materialize(model, seed=0)
    held = (
        "0.freqs_cis[0] (Rope), 0.freqs_cis[1] (Rope), 0.pos_freqs (Rope), "
        "0.tables['neg'][0] (Rope), 0.named[0] (Rope)"
    )
    assert str(refused.value).startswith(
        f"materialize: {held} hold tensors on the meta device that are neither parameters "
        "nor buffers; materialize fills parameters and buffers only"
    )
    assert all(p.is_meta for p in model.parameters())  # refused before allocation


class Aliases(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 3)
        self.norm = nn.BatchNorm1d(3)
        self.running = self.norm.running_mean  # a plain attribute: the buffer itself
        self.pair = (self.proj.bias, 3)
        self.by_name = {"w": [self.proj.weight]}
        self.named = Pair(self.norm.running_var, 2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.proj(x)) + self.running


def test_aliases_of_parameters_and_buffers_end_as_those_tensors() -> None:
    with torch.device("meta"):
        model = Aliases()
    shardinit.materialize(model, seed=0)
    assert model.running is model.norm.running_mean
    assert model.pair[0] is model.proj.bias and model.pair[1] == 3
    assert model.by_name["w"][0] is model.proj.weight
    assert isinstance(model.named, Pair) and model.named.table is model.norm.running_var
    assert not [name for name, tensor in _held_tensors(model) if tensor.is_meta]
    # As in eager torch: the attribute follows the buffer's in-place updates.
    model.train()
    model(torch.randn(5, 4))
    assert torch.equal(model.running, model.norm.running_mean)
    assert not torch.equal(model.running, torch.zeros(3))


def _diffusers_model(class_name: str, config: dict[str, Any]) -> nn.Module:
    import diffusers  # a test dependency (requirements-clients.txt), installed by make test

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # diffusers' own deprecation notices
        with torch.device("meta"), shardinit.record_constructors():
            model: nn.Module = getattr(diffusers, class_name).from_config(config)
    return model


LUMINA2 = {
    "sample_size": 8, "patch_size": 2, "in_channels": 4, "hidden_size": 32, "num_layers": 1,
    "num_refiner_layers": 1, "num_attention_heads": 2, "num_kv_heads": 1, "multiple_of": 16,
    "cap_feat_dim": 16, "axes_dim_rope": (4, 6, 6), "axes_lens": (16, 8, 8),
}  # fmt: skip
QWEN_IMAGE = {
    "patch_size": 2, "in_channels": 16, "out_channels": 4, "num_layers": 1,
    "attention_head_dim": 16, "num_attention_heads": 2, "joint_attention_dim": 16,
    "axes_dims_rope": (4, 6, 6),
}  # fmt: skip


ROTARY_TABLES = {
    "lumina2": (
        "Lumina2Transformer2DModel",
        LUMINA2,
        lambda m: list(m.rope_embedder.freqs_cis),  # complex128, in a list
    ),
    "qwen_image": (
        "QwenImageTransformer2DModel",
        QWEN_IMAGE,
        lambda m: [m.pos_embed.pos_freqs, m.pos_embed.neg_freqs],  # complex64, cat of polars
    ),
}


@pytest.mark.parametrize("name", sorted(ROTARY_TABLES))
def test_diffusers_rotary_tables_held_as_attributes_are_eagers(name: str) -> None:
    """Built inside record_constructors, the rotary tables diffusers holds as plain
    attributes (complex: ``torch.polar`` of position tables, then ``cat``) are computed
    as eager torch computes them, bit for bit, on the device materialize allocates on."""
    class_name, config, tables = ROTARY_TABLES[name]
    model = _diffusers_model(class_name, config)
    shardinit.materialize(model, seed=0)
    assert not [held for held, tensor in _held_tensors(model) if tensor.is_meta]
    import diffusers  # a test dependency (requirements-clients.txt), installed by make test

    eager = getattr(diffusers, class_name).from_config(config)
    ours, theirs = tables(model), tables(eager)
    assert [t.dtype for t in ours] == [t.dtype for t in theirs]
    assert all(t.is_complex() for t in ours)
    for got, want in zip(ours, theirs, strict=True):
        assert got.device == torch.device("cpu")
        assert torch.equal(got, want)


@pytest.mark.parametrize(
    ("class_name", "config", "held"),
    [
        (
            "Lumina2Transformer2DModel",
            LUMINA2,
            "rope_embedder.freqs_cis[0] (Lumina2RotaryPosEmbed), rope_embedder.freqs_cis[1] "
            "(Lumina2RotaryPosEmbed), rope_embedder.freqs_cis[2] (Lumina2RotaryPosEmbed)",
        ),
        (
            "QwenImageTransformer2DModel",
            QWEN_IMAGE,
            "pos_embed.pos_freqs (QwenEmbedRope), pos_embed.neg_freqs (QwenEmbedRope)",
        ),
    ],
    ids=["lumina2", "qwen_image"],
)
def test_rotary_tables_built_without_record_constructors_are_refused(
    class_name: str, config: dict[str, Any], held: str
) -> None:
    """Without record_constructors nothing recorded their values: refused, named."""
    import diffusers  # a test dependency (requirements-clients.txt), installed by make test

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # diffusers' own deprecation notices
        with torch.device("meta"):
            model = getattr(diffusers, class_name).from_config(config)
    with pytest.raises(shardinit.ShardInitError, match=rf"^materialize: {re.escape(held)} hold"):
        shardinit.materialize(model, seed=0)
    assert all(p.is_meta for p in model.parameters())


class Tables(nn.Module):
    """Tables a constructor holds as plain attributes, real and complex."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        position = torch.arange(6.0)[:, None] / 10000 ** (torch.arange(0, 4, 2.0) / 4)
        self.freqs_cis = [torch.polar(torch.ones_like(position), position), torch.ones(2)]
        self.pos_freqs = torch.sin(position)  # float32, eager's own sin
        self.named = Pair(torch.linspace(0, 1, 5), 0.5)
        self.tables = {"neg": (torch.arange(4).flip(0) * -1 - 1,)}


def test_tables_a_constructor_holds_as_attributes_are_eagers() -> None:
    with torch.device("meta"), shardinit.record_constructors():
        model = nn.Sequential(Tables())
    shardinit.materialize(model, seed=0)
    eager = nn.Sequential(Tables())
    assert not [name for name, tensor in _held_tensors(model) if tensor.is_meta]
    ours: Any = model[0]
    theirs: Any = eager[0]
    pairs = [
        *zip(ours.freqs_cis, theirs.freqs_cis, strict=True),
        (ours.pos_freqs, theirs.pos_freqs),
        (ours.named.table, theirs.named.table),
        (ours.tables["neg"][0], theirs.tables["neg"][0]),
    ]
    for mine, eagers in pairs:
        assert mine.dtype == eagers.dtype and torch.equal(mine, eagers)
    assert isinstance(ours.named, Pair) and ours.named.scale == 0.5


class Drawn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.noise = torch.rand(4)
        table = torch.polar(torch.ones(3), torch.arange(3.0))
        table[0] = 0  # written after the CPU run: no longer its values
        self.rotated = table


def test_attribute_tables_that_cannot_be_computed_are_refused_naming_why() -> None:
    with torch.device("meta"), shardinit.record_constructors():
        model = nn.Sequential(Drawn())
    with pytest.raises(shardinit.ShardInitError) as refused:
        shardinit.materialize(model, seed=0)
    message = str(refused.value)
    assert message.startswith("materialize: 0.noise (Drawn), whose constructor's value")
    assert "random values" in message
    assert "0.rotated (Drawn), whose constructor's value cannot be computed (" in message
    assert "complex" in message
    assert all(p.is_meta for p in model.parameters())


def test_lumina2_with_its_rotary_module_built_on_the_cpu_has_nothing_on_meta() -> None:
    """The way out the refusal names: the rotary module has no parameters, so it is
    built again on the CPU; its tables then equal the eager model's."""
    model = _diffusers_model("Lumina2Transformer2DModel", LUMINA2)
    rope = model.rope_embedder
    model.rope_embedder = type(rope)(
        theta=rope.theta, axes_dim=rope.axes_dim, axes_lens=rope.axes_lens
    )
    shardinit.materialize(model, seed=0)
    assert not [name for name, tensor in _held_tensors(model) if tensor.is_meta]
    import diffusers  # a test dependency (requirements-clients.txt), installed by make test

    eager = diffusers.Lumina2Transformer2DModel.from_config(LUMINA2)
    for ours, theirs in zip(
        model.rope_embedder.freqs_cis, eager.rope_embedder.freqs_cis, strict=True
    ):
        assert torch.equal(ours, theirs)
