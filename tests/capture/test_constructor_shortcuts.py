"""The recorded build's shortcuts give what the long way gives: a tensor whose last
write is a fill of all of it, random or constant, takes the engine's value without a
fold (``constructors._filled_whole``); a call let through as it is skips only a lone
``torch.device`` mode (another mode below still sees it); the parent registry knows
the holder of a module whose class has no ``__hash__``."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

import shardinit
from shardinit._integration import parents
from shardinit._integration.capture.session import constructors


class _Convs(nn.Module):
    """Layouts whose reindex is no identity (dims of size one) and one that is, written
    again by init code through ``.data`` as timm's ``_init_weight_goog`` does."""

    def __init__(self) -> None:
        super().__init__()
        self.pointwise = nn.Conv2d(8, 16, 1, bias=False)
        self.depthwise = nn.Conv2d(16, 16, 3, groups=16)
        self.head = nn.Linear(16, 4)
        self.norm = nn.BatchNorm2d(16)
        for conv in (self.pointwise, self.depthwise):
            fan_out = conv.kernel_size[0] * conv.kernel_size[1] * conv.out_channels
            conv.weight.data.normal_(0.0, math.sqrt(2.0 / fan_out))
        self.head.weight.data.uniform_(-0.1, 0.1)


def test_a_tensor_filled_whole_takes_the_engines_value(monkeypatch: pytest.MonkeyPatch) -> None:
    shortcut = constructors._filled_whole
    taken: list[tuple[int, ...]] = []
    kept: list[constructors._Values] = []
    values_init = constructors._Values.__init__

    def noting(self: constructors._Values, mode: Any) -> None:
        values_init(self, mode)
        kept.append(self)

    def checked(tensor: torch.Tensor, track: Any) -> Any:
        fast = shortcut(tensor, track)
        if fast is not None:
            assert fast == kept[-1].mode.engine.value_of(tensor, "the long way")
            taken.append(tuple(tensor.shape))
        return fast

    monkeypatch.setattr(constructors._Values, "__init__", noting)
    monkeypatch.setattr(constructors, "_filled_whole", checked)
    with torch.device("meta"), shardinit.record_constructors():
        model = _Convs()
    # Every random weight and bias drawn whole, and the norm's five constants.
    assert sorted(taken) == [
        (), (4,), (4, 16), (16,), (16,), (16,), (16,), (16,), (16, 1, 3, 3), (16, 8, 1, 1),
    ]  # fmt: skip
    shardinit.materialize(model, seed=0)
    std = float(model.pointwise.weight.detach().std())
    assert std == pytest.approx(math.sqrt(2.0 / 16), rel=0.3)  # the init code's normal_
    assert 0.05 < float(model.head.weight.detach().abs().max()) <= 0.1  # and uniform_


class _Noting(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int, tuple[Any, ...]]] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        first = id(args[0]) if args else 0
        self.calls.append((getattr(func, "__name__", ""), first, tuple(args[1:])))
        return func(*args, **(kwargs or {}))


def test_a_call_let_through_still_reaches_another_mode_below() -> None:
    noting = _Noting()
    with torch.device("meta"), noting, shardinit.record_constructors():
        table = torch.empty(5, 7)
        assert table.size(1) == 7 and table.dim() == 2  # let through as they are
    assert ("size", id(table), (1,)) in noting.calls
    assert ("dim", id(table), ()) in noting.calls


class _Unhashable(nn.Linear):
    def __eq__(self, other: object) -> bool:
        return self is other

    __hash__ = None  # type: ignore[assignment]


def test_the_holder_of_a_module_without_hash_is_known() -> None:
    parent = nn.Sequential(nn.ReLU(), _Unhashable(2, 2))
    assert parents.holder_of(parent[1]) == (parent, "1")
    assert parents.holder_of(parent) is None
