"""Which float dtype holds fewer values than another (a cast through it rounds): only
two floating dtypes compare; an integer or bool dtype is narrower than none."""

from __future__ import annotations

import torch

from shardinit._integration.capture.trace.engine import narrower


def test_only_a_float_of_fewer_values_is_narrower() -> None:
    assert narrower(torch.float16, torch.float32) and narrower(torch.bfloat16, torch.float64)
    assert not narrower(torch.float32, torch.float32)
    assert not narrower(torch.float64, torch.float32)
    assert not narrower(torch.int64, torch.float32) and not narrower(torch.float16, torch.int8)
    assert not narrower(torch.bool, torch.float16)
