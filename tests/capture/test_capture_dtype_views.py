"""A write through a view of another dtype of the same width (issue 37, item 2):
``m.weight.data.view(torch.int32).fill_(0x3f800000)`` stored 1065353216.0 where eager
has 1.0 (the bits of 1.0f). Programs hold values, not bits, so such a view of a
parameter or a temporary is refused, naming the parameter, the operation and the line;
a view in the tensor's own dtype stays a view."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from capture_models import linear_pair
from torch import nn

import shardinit

CASES: dict[str, tuple[torch.dtype, Callable[[nn.Module], object]]] = {
    "int32_fill": (torch.float32, lambda m: m.weight.data.view(torch.int32).fill_(0x3F800000)),
    "int32_mul": (torch.float32, lambda m: m.weight.view(torch.int32).mul_(2)),
    "int64_of_float64": (torch.float64, lambda m: m.weight.data.view(torch.int64).zero_()),
    "int16_of_bfloat16": (torch.bfloat16, lambda m: m.weight.data.view(torch.int16).fill_(16256)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_write_through_a_dtype_view_is_refused(name: str) -> None:
    dtype, init = CASES[name]
    with torch.device("meta"):
        model = nn.Linear(16, 32, dtype=dtype)
    with pytest.raises(shardinit.UnsupportedInitOpError) as raised:
        shardinit.materialize(model, seed=0, init_fn=lambda: init(model))
    message = str(raised.value)
    assert "'weight'" in message and "view at" in message and "reinterprets" in message
    assert "test_capture_dtype_views.py" in message


def test_a_view_in_its_own_dtype_is_eagers() -> None:
    def init(m: nn.Linear) -> None:
        with torch.no_grad():
            m.weight.view(torch.float32).fill_(1.5)

    model, eager = linear_pair(init)
    assert torch.equal(model.weight, eager.weight)
