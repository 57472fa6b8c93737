"""is_dtensor asks the DTensor class of torch.distributed.tensor where that module is
loaded, and answers False without importing it where it is not: faked here through
sys.modules, so no process group is needed."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch

from shardinit._integration.placements import is_dtensor


class _Sub(torch.Tensor):
    """A tensor subclass: not one of the plain types answered at once."""


def test_is_dtensor_is_the_loaded_modules_class_and_false_when_not_loaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sub = torch.zeros(2).as_subclass(_Sub)
    monkeypatch.setitem(sys.modules, "torch.distributed.tensor", SimpleNamespace(DTensor=_Sub))
    assert is_dtensor(sub)
    assert not is_dtensor(torch.zeros(2))
    monkeypatch.delitem(sys.modules, "torch.distributed.tensor")
    assert not is_dtensor(sub)
