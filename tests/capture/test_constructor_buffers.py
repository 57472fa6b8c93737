"""Buffers a constructor computes (issue 29, item 3): built on meta inside
``shardinit.record_constructors()``, ``materialize`` gives each meta buffer the value its
constructor computed, equal (``torch.equal``) to the same module built on the CPU:
``register_buffer("pos", torch.arange(8))``, HF's ``position_ids``
(``arange(n).expand((1, -1))``), rotary frequencies, a causal mask
(``empty(n, n).fill_(-inf).triu_(1)``, open_clip's pattern), diffusers' 2-D sin-cos table
(``meshgrid``, ``outer``, ``sin``/``cos`` in float64, then ``float()``), bool and integer
buffers. A value that cannot be computed is refused naming the buffer and the line that
registered it, unless ``buffer_init`` fills it; ``init_fn``'s value wins.

Operations capture does not follow as programs (``sum``, ``repeat_interleave``,
``cumsum``, ``sort``, indexing by computed integers, ``item``) on known values run as
eager torch runs them, on the CPU, their results tables (timm's relative position
indices, EVA's rotary tables): equal to the CPU construction too."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import nn

import shardinit


class Tables(nn.Module):
    def __init__(self, n: int = 8) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.norm = nn.BatchNorm1d(4)
        self.register_buffer("pos", torch.arange(8))
        self.register_buffer("position_ids", torch.arange(n).expand((1, -1)), persistent=False)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, 8, 2, dtype=torch.int64).float() / 8))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("flags", torch.arange(5) > 1)
        self.register_buffer("offsets", torch.arange(6, dtype=torch.int32) * 3 - 4)
        self.register_buffer("scale", torch.tensor(0.125))


class CausalMask(nn.Module):
    """open_clip's ``TextTransformer.build_causal_mask``."""

    def __init__(self, n: int = 7) -> None:
        super().__init__()
        mask = torch.empty(n, n)
        mask.fill_(float("-inf"))
        mask.triu_(1)
        self.register_buffer("attn_mask", mask, persistent=False)
        self.register_buffer("lower", torch.ones(n, n, dtype=torch.bool).tril())


def _sincos_1d(dim: int, pos: torch.Tensor) -> torch.Tensor:
    omega = torch.arange(dim // 2, device=pos.device, dtype=torch.float64)
    omega /= dim / 2.0
    omega = 1.0 / 10000**omega
    out = torch.outer(pos.reshape(-1), omega)
    return torch.concat([torch.sin(out), torch.cos(out)], dim=1)


class SinCos2d(nn.Module):
    """diffusers' ``get_2d_sincos_pos_embed(..., output_type="pt")`` in ``PatchEmbed``."""

    def __init__(self, dim: int = 16, grid: int = 4, base_size: int = 2) -> None:
        super().__init__()
        steps = torch.arange(grid, dtype=torch.float32) / (grid / base_size)
        mesh = torch.stack(torch.meshgrid(steps, steps * 0.5, indexing="xy"), dim=0)
        mesh = mesh.reshape([2, 1, grid, grid])
        table = torch.concat([_sincos_1d(dim // 2, mesh[0]), _sincos_1d(dim // 2, mesh[1])], 1)
        self.register_buffer("pos_embed", table.float().unsqueeze(0))


class NumpyTable(nn.Module):
    """A table computed with numpy is a real CPU buffer even on meta: it stays as it is."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)
        table = torch.from_numpy(np.sin(np.linspace(0.0, 1.0, 5))).float().unsqueeze(0)
        self.register_buffer("table", table)


def _relative_position_index(win_h: int, win_w: int) -> torch.Tensor:
    """timm's ``get_relative_position_index`` (Swin): a sum of coordinate tables."""
    grid = torch.meshgrid(torch.arange(win_h), torch.arange(win_w), indexing="ij")
    coords = torch.flatten(torch.stack(grid), 1)
    relative = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous()
    relative[:, :, 0] += win_h - 1
    relative[:, :, 1] += win_w - 1
    relative[:, :, 0] *= 2 * win_w - 1
    return relative.sum(-1)


class Computed(nn.Module):
    """Constructor tables by operations that are not elementwise, on known values."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("index", _relative_position_index(3, 2))
        bands = 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8))  # float32 steps
        angles = torch.arange(5).float()[:, None] * bands
        rope = torch.cat([angles.sin(), angles.cos()], -1).repeat_interleave(2, -1)
        self.register_buffer("rope", rope, persistent=False)
        self.register_buffer("running", torch.arange(1.0, 7.0).cumsum(0).flip(0))
        order = (torch.arange(6.0) * -0.4 + 1.0).sort()
        self.register_buffer("sorted", order.values)
        self.register_buffer("order", order.indices)
        table = torch.arange(10.0) * 0.5
        self.register_buffer("picked", table[torch.tensor([3, 1, 4, 1])])
        scores = torch.zeros(4).scatter_(0, torch.tensor([2, 0]), torch.tensor([1.5, -2.0]))
        self.register_buffer("scattered", scores)
        depth = int(torch.arange(4).sum().item())  # Python control flow on a known value
        self.register_buffer("depth", torch.full((depth,), 2.0))
        self.register_buffer("mix", torch.einsum("i,j->ij", torch.arange(3.0), bands))
        values = torch.arange(-2.0, 3.0) / 2
        self.register_buffer("positive", values[values > 0])
        permutation = torch.arange(4).flip(0)
        scattered = torch.zeros(4, 4)
        for row in range(4):
            scattered[row, permutation[row]] = 1  # a 0-d tensor index (peft BOFT's perm2mat)
        self.register_buffer("permutation", scattered)


@pytest.mark.parametrize("make", [Tables, CausalMask, SinCos2d, NumpyTable, Computed])
def test_constructor_buffers_equal_the_cpu_construction(make: Callable[[], nn.Module]) -> None:
    with torch.device("meta"), shardinit.record_constructors():
        model = make()
    shardinit.materialize(model, seed=0)
    reference = dict(make().named_buffers())
    ours = dict(model.named_buffers())
    assert sorted(ours) == sorted(reference)
    for name, value in reference.items():
        assert ours[name].dtype == value.dtype and ours[name].device.type == "cpu", name
        assert torch.equal(ours[name], value), name


def test_without_record_constructors_buffers_need_buffer_init() -> None:
    with torch.device("meta"):
        model = CausalMask()
    with pytest.raises(shardinit.ShardInitError, match="no known default: attn_mask, lower"):
        shardinit.materialize(model, seed=0)


def test_init_fn_value_wins_over_the_constructor() -> None:
    with torch.device("meta"), shardinit.record_constructors():
        model = Tables()

    def init_fn() -> None:
        with torch.device(model.inv_freq.device):
            model.inv_freq = torch.full((4,), 2.0)

    shardinit.materialize(model, seed=0, init_fn=init_fn)
    assert torch.equal(model.inv_freq, torch.full((4,), 2.0))
    assert torch.equal(model.pos, torch.arange(8))


class Unfollowed(nn.Module):
    """A cumsum of random values: no table of them exists at capture."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)
        self.register_buffer("cumulative", torch.rand(6).cumsum(0))


class FromTorchsGenerator(nn.Module):
    """Known probabilities, but torch's generator draws the samples."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("picked", torch.multinomial(torch.ones(6), 3).float())


class Drawn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("noise", torch.randn(4))


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (Unfollowed, "cumsum at .* is not an elementwise operation .* holds random values"),
        (Drawn, "random values"),
        (FromTorchsGenerator, "multinomial at .* draws from torch's random generator"),
    ],
)
def test_uncomputable_buffer_is_refused_naming_it_and_its_line(
    make: Callable[[], nn.Module], why: str
) -> None:
    with torch.device("meta"), shardinit.record_constructors():
        model = make()
    with pytest.raises(shardinit.ShardInitError) as raised:
        shardinit.materialize(model, seed=0)
    message = str(raised.value)
    assert message.startswith(f"buffer {next(iter(dict(model.named_buffers())))}: ")
    assert f"registered at {__file__}:" in message and "in __init__" in message
    assert re.search(why, message), message
    shardinit.materialize(
        model, seed=0, buffer_init=lambda module, name, tensor: tensor.fill_(1.0)
    )  # the documented way out
    assert all(bool((b == 1).all()) for b in model.buffers())


def test_integer_buffer_value_must_be_exact() -> None:
    class Halves(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            values = torch.arange(4)
            values.mul_(3)  # integer arithmetic: exact
            self.register_buffer("values", values)
            self.register_buffer("halves", torch.arange(4, dtype=torch.float64) / 2)

    with torch.device("meta"), shardinit.record_constructors():
        model = Halves()
    shardinit.materialize(model, seed=0)
    assert torch.equal(model.values, torch.arange(4) * 3)
    assert torch.equal(model.halves, torch.arange(4, dtype=torch.float64) / 2)


class ComputedParameter(nn.Module):
    def __init__(self, n: int = 6) -> None:
        super().__init__()
        self.steps = nn.Parameter(torch.arange(1.0, n + 1.0).cumsum(0))
        self.linear = nn.Linear(2, 2)


def test_a_parameter_computed_by_an_unfollowed_op_takes_its_table() -> None:
    with torch.device("meta"), shardinit.record_constructors():
        model = ComputedParameter()
    shardinit.materialize(model, seed=0)
    assert torch.equal(model.steps.detach(), torch.arange(1.0, 7.0).cumsum(0))


class Wrapped(nn.Module):
    """A layer wrapped after its construction and moved to its weight's device, as peft's
    ``_replace_module`` does (``module.to(weight.device)``); the stand-in answers the
    run-time device, and the move must leave the meta tensors for materialize."""

    def __init__(self) -> None:
        super().__init__()
        self.base = nn.LayerNorm(8)
        nn.init.constant_(self.base.weight, 0.5)
        self.copy = copy.deepcopy(self.base)
        self.copy.to(self.base.weight.device)


def test_a_device_move_inside_a_constructor_keeps_meta_and_values() -> None:
    with torch.device("meta"), shardinit.record_constructors():
        model = Wrapped()
    assert model.copy.weight.is_meta
    shardinit.materialize(model, seed=0)
    assert torch.equal(model.copy.weight.detach(), torch.full((8,), 0.5))
    assert torch.equal(model.base.weight.detach(), torch.full((8,), 0.5))
    # outside record_constructors, torch's own move again: meta cannot be copied out of
    with torch.device("meta"):
        plain = nn.LayerNorm(8)
    with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor"):
        plain.to("cpu")


def test_a_table_beyond_the_cap_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from shardinit._program import tables as program

    monkeypatch.setattr(program, "TABLE_CAP", 4)
    with torch.device("meta"), shardinit.record_constructors():
        model = ComputedParameter()
    with pytest.raises(shardinit.ShardInitError, match=r"beyond the cap of 4 elements"):
        shardinit.materialize(model, seed=0)


def test_init_code_on_meta_temporaries_of_known_values() -> None:
    """capture_init: a meta temporary's known values run through ``cumsum`` too."""
    with torch.device("meta"):
        lin = nn.Linear(3, 4)

    def init_fn() -> None:
        steps = torch.arange(12.0, device="meta").cumsum(0).view(4, 3)
        lin.weight.data.copy_(steps / 10)
        lin.bias.data.copy_(torch.rand(4, device="meta").sort().values)

    with pytest.raises(shardinit.UnsupportedInitOpError, match=r"sort at .* random values"):
        shardinit.capture_init(lin, init_fn)

    def known_only() -> None:
        lin.weight.data.copy_(torch.arange(12.0, device="meta").cumsum(0).view(4, 3) / 10)
        lin.bias.data.zero_()

    shardinit.materialize(lin, seed=0, init_fn=known_only)
    expected = torch.arange(12.0).cumsum(0).view(4, 3) / 10
    assert torch.equal(lin.weight.detach(), expected)
