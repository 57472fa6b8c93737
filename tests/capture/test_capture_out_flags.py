"""A factory's ``out=`` gives the out tensor the factory's ``requires_grad`` (False unless
passed), as torch's Python factories do (issue 37, item 3): the flag after ``materialize``
is eager's, and so are the values where they do not come from the stream."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import shardinit

Init = Callable[[torch.Tensor], object]

CASES: dict[str, tuple[Init, bool]] = {
    # name: (init code on the weight, whether its values are eager's bit for bit)
    "zeros": (lambda w: torch.zeros(32, 16, out=w), True),
    "ones": (lambda w: torch.ones(32, 16, out=w), True),
    "full": (lambda w: torch.full((32, 16), 2.5, out=w), True),
    "eye": (lambda w: torch.eye(32, 16, out=w), True),
    "rand": (lambda w: torch.rand(32, 16, out=w), False),  # the stream's draw
    "zeros, requires_grad=True": (lambda w: torch.zeros(32, 16, out=w, requires_grad=True), True),
    # out= a view: the view takes the flag, the parameter keeps its own
    "arange into a view": (lambda w: torch.arange(512.0, out=w.view(-1)), True),
    # not a factory: out= keeps the flag
    "add": (lambda w: torch.add(torch.ones(32, 16), 1, out=w), True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_out_of_a_factory_takes_eagers_requires_grad(name: str) -> None:
    init, same_values = CASES[name]
    eager = nn.Linear(16, 32)
    with torch.no_grad():
        init(eager.weight)
    with torch.device("meta"):
        model = nn.Linear(16, 32)
    shardinit.materialize(model, seed=0, init_fn=lambda: init(model.weight))
    assert model.weight.requires_grad == eager.weight.requires_grad
    assert model.bias.requires_grad  # untouched
    if same_values:
        assert torch.equal(model.weight, eager.weight)


def test_the_flags_differ_between_cases() -> None:
    """The table holds both answers, so the test above can fail either way."""
    flags = set()
    for init, _ in CASES.values():
        eager = nn.Linear(16, 32)
        with torch.no_grad():
            init(eager.weight)
        flags.add(eager.weight.requires_grad)
    assert flags == {True, False}
