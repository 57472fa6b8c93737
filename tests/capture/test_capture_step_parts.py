"""An in-place step over parts that different random fills wrote last (``normal_(w)``,
``uniform_(w[0])``, then ``clamp_(w)``) is that step on each part: each part reads the
one fill that wrote it, as eager's element does."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import shardinit
from shardinit._program.regions import cut_by


class _One(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.empty(6, 8))


def _materialized(init: Callable[[nn.Module], None]) -> torch.Tensor:
    with torch.device("meta"):
        model = _One()
    shardinit.materialize(model, seed=5, init_fn=lambda: init(model))
    return model.w.detach().clone()


def _whole_step(m: nn.Module) -> None:
    m.w.normal_()
    m.w[0:2, 3:].uniform_(5.0, 6.0)
    m.w.clamp_(-0.5, 0.5)
    m.w.mul_(3.0).exp_()


def _step_per_part(m: nn.Module) -> None:
    m.w.normal_()
    m.w[0:2, 3:].uniform_(5.0, 6.0)
    for rows, cols in [
        (slice(0, 2), slice(0, 3)),
        (slice(0, 2), slice(3, 8)),
        (slice(2, 6), slice(0, 8)),
    ]:
        m.w[rows, cols].clamp_(-0.5, 0.5).mul_(3.0).exp_()


def test_a_step_over_two_fills_equals_the_step_on_each_part() -> None:
    whole = _materialized(_whole_step)
    assert torch.equal(whole, _materialized(_step_per_part))
    top = torch.exp(torch.tensor(0.5) * 3.0)
    assert torch.all(whole[0:2, 3:] == top)  # the uniform part: all above the clamp
    normal_part = torch.cat([whole[0:2, :3].flatten(), whole[2:].flatten()])
    assert (normal_part < top).sum() > normal_part.numel() // 4  # the normal one: not


def test_two_random_values_in_one_element_are_still_refused() -> None:
    def init(m: nn.Module) -> None:
        m.w.normal_()
        m.w.add_(torch.randn(6, 8))

    with pytest.raises(shardinit.UnsupportedInitOpError, match="meet in one element"):
        _materialized(init)


def test_cut_by_splits_along_every_inner_boundary() -> None:
    box = ((0, 6), (0, 8))
    assert cut_by(box, [((0, 2), (3, 8))]) == [
        ((0, 2), (0, 3)), ((0, 2), (3, 8)), ((2, 6), (0, 3)), ((2, 6), (3, 8)),
    ]  # fmt: skip
    assert cut_by(box, [box]) == [box]
    assert cut_by(((0, 64), (0, 64)), [((i, i + 1), (i, i + 1)) for i in range(64)], 100) is None
