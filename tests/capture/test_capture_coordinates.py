"""Constant writes at positions computable from coordinates (issue 29, item 7):
``fill_diagonal_``, ``w.diagonal().fill_``, ``masked_fill_`` with a mask from ``tril`` /
``arange`` / ``eye``, ``index_fill_`` with a constant index list, ``w[[1, 5]] = v``,
``triu_`` / ``tril_``, each against the same code run eagerly: the positions written and
their constants exact; every other element keeps what the parameter holds without the
write (an earlier fill, or its torch.nn default). Random masks follow the stream; masks
from another parameter's values are refused."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import torch
from torch import nn

import shardinit

HERE = os.path.basename(__file__)
Write = Callable[[torch.Tensor], object]

WRITES: dict[str, Write] = {
    "fill_diagonal_": lambda w: w.fill_diagonal_(0.5),
    "fill_diagonal_ wrap": lambda w: w.fill_diagonal_(2.0, wrap=True),
    "diagonal().fill_": lambda w: w.diagonal().fill_(3.0),
    "diagonal(1).zero_": lambda w: w.diagonal(1).zero_(),
    "masked_fill_ tril": lambda w: w.masked_fill_(
        torch.ones(w.shape, dtype=torch.bool).tril(), 0.0
    ),
    "masked_fill_ arange": lambda w: w.masked_fill_(torch.arange(w.shape[1]) % 3 == 0, -1.0),
    "masked_fill_ eye": lambda w: w.masked_fill_(torch.eye(*w.shape) == 1, 0.25),
    "index_fill_ rows": lambda w: w.index_fill_(0, torch.tensor([1, 5]), 0.0),
    "index_fill_ cols": lambda w: w.index_fill_(1, torch.tensor([0, -1]), 7.0),
    "aten index_fill_": lambda w: torch.ops.aten.index_fill_(w, 0, torch.tensor([2]), 1.5),
    "w[[1, 5]] = 0": lambda w: w.__setitem__([1, 5], 0.0),
    "w[:, [0, 2]] = 1": lambda w: w.__setitem__((slice(None), [0, 2]), 1.0),
    "w[eye mask] = 4": lambda w: w.__setitem__(torch.eye(*w.shape, dtype=torch.bool), 4.0),
    "triu_(1)": lambda w: w.triu_(1),
    "tril_(-1)": lambda w: w.tril_(-1),
    "part: w[2:].fill_diagonal_": lambda w: w[2:].fill_diagonal_(5.0),
    "copy_ of tril": lambda w: w.copy_(torch.tril(torch.ones(w.shape)) * 2),
    "copy_ of masked_fill": lambda w: w.copy_(
        torch.ones(w.shape).masked_fill(torch.eye(*w.shape) == 1, 0.0)
    ),
}


def _materialized(shape: tuple[int, int], init_fn: Callable[[nn.Linear], object]) -> torch.Tensor:
    with torch.device("meta"):
        model = nn.Linear(shape[1], shape[0], bias=False)
    shardinit.materialize(model, seed=5, init_fn=lambda: init_fn(model))
    return model.weight.detach()


def _eager(shape: tuple[int, int], write: Callable[[torch.Tensor], object]) -> torch.Tensor:
    weight = torch.full(shape, 9.0)
    with torch.no_grad():
        write(weight)
    return weight


@pytest.mark.parametrize("shape", [(7, 3), (6, 6)])
@pytest.mark.parametrize("name", list(WRITES))
@pytest.mark.parametrize("before", ["constant", "default"])
def test_coordinate_write_equals_eager(name: str, shape: tuple[int, int], before: str) -> None:
    write = WRITES[name]
    first: Callable[[nn.Linear], object] = (
        (lambda m: nn.init.constant_(m.weight, 9.0)) if before == "constant" else lambda m: None
    )
    ours = _materialized(shape, lambda m: (first(m), write(m.weight)))
    without = _materialized(shape, first)
    eager = _eager(shape, write)
    written = eager != 9.0
    assert bool(written.any())
    assert torch.equal(ours[written], eager[written])
    assert torch.equal(ours[~written], without[~written])
    if before == "default":
        assert not bool((without[~written] == 9.0).any())  # the torch.nn default, not a fill


def test_random_mask_follows_the_stream() -> None:
    def init_fn(m: nn.Linear) -> None:
        m.weight.data.zero_()
        m.weight.data.masked_fill_(torch.rand(m.weight.shape) < 0.3, 1.0)

    ours = _materialized((200, 100), init_fn)
    assert set(ours.unique().tolist()) == {0.0, 1.0}
    assert abs(float(ours.mean()) - 0.3) < 0.02  # 6 sigma for 20000 Bernoulli(0.3)
    assert torch.equal(ours, _materialized((200, 100), init_fn))


def test_mask_from_another_parameter_is_refused() -> None:
    with torch.device("meta"):
        model = nn.Bilinear(4, 4, 4)

    def init_fn() -> None:
        model.weight.data.masked_fill_(model.weight.data.transpose(1, 2) > 0, 0.0)
        model.bias.data.masked_fill_(model.weight.data[0, 0] > 0, 0.0)

    with pytest.raises(shardinit.UnsupportedInitOpError) as raised:
        shardinit.capture_init(model, init_fn)
    message = str(raised.value)
    assert "parameter 'weight'" in message and "masked_fill_" in message
    assert "it reads the values of parameter 'weight'" in message and HERE in message


@pytest.mark.parametrize(
    "write",
    [
        lambda w: w.__setitem__(([0, 1], [2, 0]), 0.0),
        lambda w: w.__setitem__([0, 3], torch.arange(6.0).view(2, 3)),
    ],
    ids=["point pairs", "tensor value"],
)
def test_advanced_writes_of_values_known_at_capture_are_eagers(write: Write) -> None:
    """Values known at capture at positions known at capture (issue 51: torch's own
    kernel run on the CPU, dispatch/scattered.py), over a fill: eager's bytes."""
    eager = nn.Linear(3, 5, bias=False)
    with torch.no_grad():
        eager.weight.fill_(0.5)
        write(eager.weight)
    with torch.device("meta"):
        model = nn.Linear(3, 5, bias=False)

    def init_fn() -> None:
        with torch.no_grad():
            model.weight.fill_(0.5)
            write(model.weight)

    shardinit.materialize(model, seed=0, init_fn=init_fn)
    assert torch.equal(model.weight.detach(), eager.weight.detach())


@pytest.mark.parametrize(
    "write",
    [lambda w: w.index_fill_(0, torch.randint(0, 5, (2,)), 0.0)],
    ids=["random index"],
)
def test_other_advanced_writes_stay_refused(write: Write) -> None:
    with torch.device("meta"):
        model = nn.Linear(3, 5, bias=False)
    with pytest.raises(shardinit.UnsupportedInitOpError) as raised:
        shardinit.capture_init(model, lambda: write(model.weight))
    assert "parameter 'weight'" in str(raised.value) and HERE in str(raised.value)
