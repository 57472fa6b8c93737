"""Boolean masks computed from coordinates (issue 37, "Refused, but ordinary"):
``w[torch.arange(32) % 2 == 0] = 0`` and masks of ``arange`` by other operations it can
evaluate: the constant lands where the mask holds and the values before stay
elsewhere, as in eager. A mask of random values is a ``where`` of the values before,
also eager's where they are known."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from capture_models import linear_pair
from torch import nn

import shardinit

Init = Callable[[nn.Linear], object]


def _ramp(m: nn.Linear) -> None:
    m.weight.copy_(torch.arange(512.0).view(32, 16) * 0.5 - 100)
    m.bias.copy_(torch.arange(32.0) - 7)


def _then(step: Init) -> Init:
    def init(m: nn.Linear) -> None:
        with torch.no_grad():
            _ramp(m)
            step(m)

    return init


CASES: dict[str, Init] = {
    "even_rows": lambda m: m.bias.__setitem__(torch.arange(32) % 2 == 0, 0),
    "even_weight_rows": lambda m: m.weight.__setitem__(torch.arange(32) % 2 == 0, 1.5),
    "or_of_two_conditions": lambda m: m.bias.__setitem__(
        (torch.arange(32) % 3 == 1) | (torch.arange(32) > 20), -2.0
    ),
    "columns_by_mask": lambda m: m.weight.__setitem__((slice(None), torch.arange(16) >= 12), 0.0),
    "two_dim_mask": lambda m: m.weight.__setitem__(
        torch.arange(32)[:, None] < torch.arange(16)[None, :], 7.0
    ),
    "masked_fill_by_remainder": lambda m: m.weight.masked_fill_(
        (torch.arange(512).view(32, 16) % 5) == 0, 3.0
    ),
    "mask_of_a_linspace": lambda m: m.bias.__setitem__(torch.linspace(-1, 1, 32) > 0.25, 9.0),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_masks_of_coordinates_are_eagers(name: str) -> None:
    init = _then(CASES[name])
    model, eager = linear_pair(init)
    assert torch.equal(model.weight, eager.weight)
    assert torch.equal(model.bias, eager.bias)
    changed = ~torch.eq(model.weight, (torch.arange(512.0).view(32, 16) * 0.5 - 100))
    changed_bias = ~torch.eq(model.bias, torch.arange(32.0) - 7)
    assert bool(changed.any() or changed_bias.any())  # the mask wrote something


def test_a_mask_of_coordinates_on_default_values_keeps_the_default_elsewhere() -> None:
    with torch.device("meta"):
        model = nn.Linear(16, 32)
    shardinit.materialize(
        model, seed=0, init_fn=lambda: model.bias.data.__setitem__(torch.arange(32) % 2 == 0, 0)
    )
    with torch.device("meta"):
        plain = nn.Linear(16, 32)
    shardinit.materialize(plain, seed=0)
    even = torch.arange(32) % 2 == 0
    assert torch.equal(model.bias[even], torch.zeros(16))
    assert torch.equal(model.bias[~even], plain.bias[~even])


def test_a_random_row_mask_repeated_over_columns_is_refused() -> None:
    with torch.device("meta"):
        model = nn.Linear(16, 32)
    with pytest.raises(shardinit.UnsupportedInitOpError) as raised:
        shardinit.materialize(
            model,
            seed=0,
            init_fn=lambda: model.weight.data.__setitem__(torch.rand(32) < 0.5, 0.0),
        )
    message = str(raised.value)
    assert "parameter 'weight'" in message and "broadcast or expand" in message
    assert "test_capture_coordinate_masks.py" in message
