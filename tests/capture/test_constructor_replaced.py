"""Constructor values and the tensors they belong to (issue 37): a constructor that sets
``param.data = tensor`` (a transformers vision-language model and a peft tuner do) gets
eager's parameter, of eager's shape, instead of torch's "a leaf Variable that requires
grad" crash; a parameter or buffer that init code puts in place of a recorded one after
the constructor never takes the recorded value (item 9: a new (6,) parameter got
``[1, 2, 3, 4, nan, nan]``), it gets its own init or is refused as any parameter
without one."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import shardinit

SEED = 37


class DataSetter(nn.Module):
    """``.data =`` in a constructor, on a Parameter that requires grad, outside no_grad."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 3)
        self.proj.weight.data = torch.arange(12.0).reshape(3, 4) / 8
        self.proj.bias.data = torch.zeros(3)
        self.grown = nn.Parameter(torch.empty(4))
        self.grown.data = torch.arange(6.0) - 2  # another shape: the Parameter becomes it
        self.wide = nn.Parameter(torch.ones(2))
        self.wide.data = self.wide.data.to(torch.float64) * 3  # another dtype


def _built_on_meta(cls: type[nn.Module]) -> nn.Module:
    with shardinit.record_constructors(), torch.device("meta"):
        return cls()


def test_data_assignment_in_a_constructor_gives_eager_parameters() -> None:
    model = _built_on_meta(DataSetter)
    shardinit.materialize(model, seed=SEED)
    eager = DataSetter()
    for name, param in eager.named_parameters():
        got = model.get_parameter(name)
        assert (got.shape, got.dtype, got.requires_grad) == (param.shape, param.dtype, True)
        assert torch.equal(got, param), name
    assert torch.equal(model.grown, torch.tensor([-2.0, -1, 0, 1, 2, 3]))


class Recorded(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor([1.0, 2.0, 3.0, 4.0]))
        self.register_buffer("table", torch.arange(4.0))


@pytest.mark.parametrize("shape", [(6,), (4,)], ids=["another_shape", "same_shape"])
def test_a_parameter_replaced_after_the_constructor_takes_its_own_init(
    shape: tuple[int, ...],
) -> None:
    model = _built_on_meta(Recorded)
    model.w = nn.Parameter(torch.empty(shape, device="meta"))
    with pytest.raises(shardinit.ShardInitError, match=r"no rule and no torch.nn default.*: w "):
        shardinit.materialize(model, seed=SEED)
    assert model.w.is_meta  # refused before allocation
    shardinit.materialize(model, seed=SEED, rules={"w": shardinit.init.constant(0.5)})
    assert torch.equal(model.w.detach(), torch.full(shape, 0.5))


def test_the_recorded_parameter_keeps_its_constructor_value() -> None:
    model = _built_on_meta(Recorded)
    shardinit.materialize(model, seed=SEED)
    assert torch.equal(model.w.detach(), torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert torch.equal(model.table, torch.arange(4.0))


def test_a_buffer_replaced_after_the_constructor_takes_buffer_init() -> None:
    model = _built_on_meta(Recorded)
    model.register_buffer("table", torch.empty(6, device="meta"))
    with pytest.raises(shardinit.ShardInitError, match=r"no known default: table"):
        shardinit.materialize(model, seed=SEED)

    def buffer_init(module: nn.Module, name: str, tensor: torch.Tensor) -> None:
        tensor.fill_(-1.0)

    shardinit.materialize(model, seed=SEED, buffer_init=buffer_init)
    assert torch.equal(model.table, torch.full((6,), -1.0))
