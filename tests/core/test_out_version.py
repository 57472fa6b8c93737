"""A fill into ``out`` bumps autograd's version counter of ``out``, as torch's own
in-place ops do even under ``no_grad``: a graph that saved the tensor then refuses to
backward instead of silently using the new values (issue 28)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import shardinit
from shardinit import init

SPEC = shardinit.ParamSpec("w", (4, 3), torch.float32, init.normal(), seed=0)
INPLACE = "modified by an inplace operation"

FILLS: dict[str, Callable[[torch.Tensor], object]] = {
    "init_box": lambda out: shardinit.init_box(SPEC, [(0, 4), (0, 3)], out=out),
    "init_shard": lambda out: shardinit.init_shard(SPEC, 0, 1, out=out),
    "init_flat": lambda out: shardinit.init_flat(SPEC, 0, 12, out=out.view(-1)),
}


@pytest.mark.parametrize("fill", FILLS.values(), ids=FILLS.keys())
def test_a_fill_into_a_saved_tensor_makes_backward_refuse(
    fill: Callable[[torch.Tensor], object],
) -> None:
    x = torch.ones(4, 3, requires_grad=True)
    y = x * 1
    z = (y * y).sum()  # saves y
    before = y._version
    fill(y)
    assert y._version > before
    assert torch.equal(y.detach(), shardinit.full(SPEC))  # the values were written
    with pytest.raises(RuntimeError, match=INPLACE):
        z.backward()


def test_the_reference_torch_in_place_fill_under_no_grad_also_refuses() -> None:
    """What the test above matches: torch's own in-place fill, under no_grad."""
    x = torch.ones(4, 3, requires_grad=True)
    y = x * 1
    z = (y * y).sum()
    with torch.no_grad():
        y.normal_()
    with pytest.raises(RuntimeError, match=INPLACE):
        z.backward()


def test_an_untracked_out_is_filled_without_complaint() -> None:
    """Plain and inference-mode tensors (the latter have no version counter) are filled."""
    with torch.inference_mode():
        inference = torch.empty(4, 3)
    for out in (torch.empty(4, 3), inference):
        shardinit.init_box(SPEC, [(0, 4), (0, 3)], out=out)
        assert torch.equal(out, shardinit.full(SPEC))
