"""fsdp1_param_init_fn's allocation and the ties it sees, asked without FSDP1 itself:
modules of a stand-in unit class count as FSDP1 units (``is_fsdp1``), so no process
group is needed. FSDP1 wrapping a model is tests/materialize/test_materialize_fsdp1.py's
(multi-rank)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from shardinit._integration import fsdp1
from shardinit._integration.fsdp1 import (
    fsdp1_param_init_fn,
    managed_params,
    ties_split_across_units,
    unset_buffers,
)


class _Unit(nn.Module):
    """Stands for an FSDP1 unit: its modules are one unit."""

    def __init__(self) -> None:
        super().__init__()
        with torch.device("meta"):
            self.lin = nn.Linear(2, 2)


@pytest.fixture(autouse=True)
def _units_by_class(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fsdp1, "is_fsdp1", lambda module: isinstance(module, _Unit))


def _tied_across_units() -> nn.Module:
    root = nn.Module()
    root.a, root.b = _Unit(), _Unit()
    root.b.lin.weight = root.a.lin.weight
    return root


def test_a_tie_across_two_units_is_reported_and_stays_one_parameter() -> None:
    root = _tied_across_units()
    fsdp1_param_init_fn(root.a.lin, device="cpu")
    fsdp1_param_init_fn(root.b.lin, device="cpu")
    assert root.a.lin.weight is root.b.lin.weight and not root.a.lin.weight.is_meta
    assert ties_split_across_units(root) == ["a.lin.weight = b.lin.weight (units a, b)"]


def test_a_holder_outside_the_root_is_left_out_of_the_tie() -> None:
    root = _tied_across_units()
    elsewhere = nn.Linear(2, 2)
    elsewhere.weight = root.a.lin.weight  # a third holder, not under root
    fsdp1_param_init_fn(root.a.lin, device="cpu")
    fsdp1_param_init_fn(elsewhere, device="cpu")
    fsdp1_param_init_fn(root.b.lin, device="cpu")
    assert ties_split_across_units(root) == ["a.lin.weight = b.lin.weight (units a, b)"]


def test_only_meta_buffers_are_allocated_and_left_unset() -> None:
    module = _Unit().lin
    module.register_buffer("table", torch.ones(3))
    module.register_buffer("scale", torch.empty(2, device="meta"))
    module.register_buffer("absent", None)
    fsdp1_param_init_fn(module, device="cpu")
    assert torch.equal(module.table, torch.ones(3))
    assert unset_buffers(module) == {"scale"} and module.scale.device.type == "cpu"


def test_a_model_without_units_has_no_managed_parameters() -> None:
    assert managed_params(nn.Sequential(nn.Linear(2, 2))) == set()
