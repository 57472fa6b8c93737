"""materialize allocates each meta tensor as ``torch.empty_like`` does (its own strides,
memory format and dtype), by a cheaper route where that is the same tensor."""

from __future__ import annotations

import pytest
import torch

from shardinit._integration.targets import empty_like_on

CPU = torch.device("cpu")


def _layouts() -> list[torch.Tensor]:
    meta = torch.device("meta")
    return [
        torch.empty(3, 4, device=meta),
        torch.empty((), device=meta, dtype=torch.float64),
        torch.empty(0, 5, device=meta),
        torch.empty(4, 1, 4, 4, device=meta).to(memory_format=torch.channels_last),
        torch.empty(4, 1, 1, 1, device=meta).to(memory_format=torch.channels_last),
        torch.empty(2, 3, 5, 5, device=meta).to(memory_format=torch.channels_last),
        torch.empty(1, 7, device=meta, dtype=torch.bfloat16),
        torch.empty(6, 4, device=meta).t(),  # not contiguous: empty_like's own rules
        torch.empty(6, 4, device=meta)[:, ::2],  # not dense
    ]


@pytest.mark.parametrize("tensor", _layouts(), ids=lambda t: f"{tuple(t.shape)}-{t.stride()}")
def test_allocation_is_empty_likes(tensor: torch.Tensor) -> None:
    made, eager = empty_like_on(tensor, CPU), torch.empty_like(tensor, device=CPU)
    assert (made.shape, made.stride(), made.dtype) == (eager.shape, eager.stride(), eager.dtype)
    assert made.device == CPU and not made.requires_grad
