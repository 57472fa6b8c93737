"""Writes to the whole parameter through a contiguous view that splits or merges dims
(issue 37, "Refused, but ordinary"): ``kaiming_uniform_(m.weight.view(4, 8, 16))``,
``m.weight.data.view(4, 8, 16).fill_(1.0)``, ``w.reshape(2, 256).normal_()`` were
refused as "not a box". The view's elements are the parameter's, one to one in
row-major order, so the write is a write of the whole parameter (a random fill, drawn
by flat element index, has the same values; fans come from the view's shape, as in
eager). ``resize_`` to the tensor's own shape is a no-op, as in eager. A part of a split
view that is no box of the parameter stays refused."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import nn

import shardinit

Init = Callable[[nn.Linear], object]


def _materialized(init: Init) -> nn.Linear:
    with torch.device("meta"):
        model = nn.Linear(16, 32)
    shardinit.materialize(model, seed=0, init_fn=lambda: init(model))
    return model


DETERMINISTIC: dict[str, Init] = {
    "data_view_fill": lambda m: m.weight.data.view(4, 8, 16).fill_(1.0),
    "view_copy_arange": lambda m: m.weight.view(4, 8, 16).copy_(
        torch.arange(512.0).reshape(4, 8, 16) * 0.5
    ),
    "reshape_then_step": lambda m: (
        m.weight.fill_(2.0),
        m.weight.reshape(2, 256).mul_(torch.arange(256.0)),
    ),
    "unflatten_setitem": lambda m: m.weight.unflatten(0, (2, 16)).__setitem__(
        slice(None), torch.arange(512.0).reshape(2, 16, 16) * 0.25 - 3
    ),
    "view_then_box_of_it": lambda m: (
        m.weight.zero_(),
        m.weight.view(4, 8, 16)[1].fill_(3.0),
    ),
    "resize_same_shape": lambda m: (m.weight.fill_(0.5), m.weight.data.resize_(32, 16)),
    "resize_as_same": lambda m: (
        m.weight.fill_(0.5),
        m.weight.data.resize_as_(torch.empty(32, 16)),
    ),
}


@pytest.mark.parametrize("name", sorted(DETERMINISTIC))
def test_whole_parameter_writes_through_split_views_are_eagers(name: str) -> None:
    init = DETERMINISTIC[name]
    model = _materialized(init)
    eager = nn.Linear(16, 32)
    with torch.no_grad():
        init(eager)
    assert torch.equal(model.weight, eager.weight)


RANDOM: dict[str, tuple[Init, Init]] = {
    "view_minus_one_normal": (
        lambda m: m.weight.view(-1).normal_(),
        lambda m: m.weight.normal_(),
    ),
    "reshape_normal": (
        lambda m: m.weight.reshape(2, 256).normal_(0.0, 0.02),
        lambda m: m.weight.normal_(0.0, 0.02),
    ),
    "data_view_uniform": (
        lambda m: m.weight.data.view(4, 8, 16).uniform_(-1, 1),
        lambda m: m.weight.uniform_(-1, 1),
    ),
    # Fans from the view's shape (fan_in = 8 * 16), as eager torch computes them.
    "kaiming_of_a_view": (
        lambda m: nn.init.kaiming_uniform_(m.weight.view(4, 8, 16)),
        lambda m: nn.init.uniform_(m.weight, -math.sqrt(6 / 128), math.sqrt(6 / 128)),
    ),
    "xavier_of_a_view": (
        lambda m: nn.init.xavier_normal_(m.weight.view(8, 64)),
        lambda m: nn.init.normal_(m.weight, 0.0, math.sqrt(2 / (64 + 8))),
    ),
}


@pytest.mark.parametrize("name", sorted(RANDOM))
def test_random_fills_through_split_views_are_the_whole_parameters(name: str) -> None:
    through_view, direct = RANDOM[name]
    model, want = _materialized(through_view), _materialized(direct)
    assert torch.equal(model.weight, want.weight)
    assert model.weight.unique().numel() > 500  # a fill of every element, not a constant


def test_kaiming_of_a_view_takes_the_views_fans_as_eager() -> None:
    eager = nn.Linear(16, 32)
    with torch.no_grad():
        nn.init.kaiming_uniform_(eager.weight.view(4, 8, 16))
    model = _materialized(lambda m: nn.init.kaiming_uniform_(m.weight.view(4, 8, 16)))
    bound = math.sqrt(6 / 128)
    assert float(model.weight.detach().abs().max()) <= bound
    assert float(model.weight.detach().abs().max()) > 0.9 * bound  # not the (16,) fan bound
    assert float(eager.weight.detach().abs().max()) <= bound


@pytest.mark.parametrize(
    ("init", "why"),
    [
        (lambda m: m.weight.view(4, 8, 16)[:, :4].fill_(1.0), "not a box"),
        (lambda m: m.weight.data.resize_(16, 32), "resize_"),
        (lambda m: m.weight.data.resize_(8, 8), "resize_"),
    ],
    ids=["part_of_split_view", "resize_transposed_shape", "resize_smaller"],
)
def test_parts_that_are_no_box_and_real_resizes_stay_refused(init: Init, why: str) -> None:
    with pytest.raises(shardinit.UnsupportedInitOpError) as raised:
        _materialized(init)
    message = str(raised.value)
    assert "parameter 'weight'" in message and why in message
    assert "test_capture_whole_views.py" in message
