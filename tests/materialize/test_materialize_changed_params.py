"""materialize when init code adds a parameter (the plan is remade from the model as
init code leaves it, every parameter chosen): the values are those of the eager
init code's operations, from each parameter's stream."""

from __future__ import annotations

import torch
from torch import nn

import shardinit
from shardinit import init

SEED = 11


def _stream(name: str, shape: tuple[int, ...], initializer: init.Initializer) -> torch.Tensor:
    return shardinit.full(shardinit.ParamSpec(name, shape, torch.float32, initializer, seed=SEED))


def _add_gate(model: nn.Linear) -> None:
    model.register_parameter("gate", nn.Parameter(torch.empty(3)))
    nn.init.uniform_(model.get_parameter("gate"), -1, 1)


def test_a_parameter_init_code_adds_gets_its_operations_values() -> None:
    with torch.device("meta"):
        model = nn.Linear(2, 2)
    shardinit.materialize(model, seed=SEED, init_fn=lambda: _add_gate(model))
    assert torch.equal(
        model.get_parameter("gate").detach(), _stream("gate", (3,), init.uniform(-1, 1))
    )
    assert not any(p.is_meta for p in model.parameters())
