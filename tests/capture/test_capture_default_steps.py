"""Steps on values init_fn never wrote (issue 37): ``w.data.clamp_(-0.1, 0.1)``,
``add_(t)``, ``aten.add_.Tensor(w, t)``, ``p.data = p.float() * 2`` on a parameter that
still holds its torch.nn default read that default, as eager torch does, and as
``mul_`` by a scalar already did. The known answer is eager torch's step run on the
default ``materialize`` gives without init_fn (the stream's default fill), at worlds 1
and 2 of FSDP2 too. Where nothing gives a parameter its values before init_fn (no rule,
no default), ``materialize`` refuses it by name, before allocation; where a rule
matches, the step reads the rule's values, as ``mul_`` does (the order in
docs/capturing-init.md); values before init_fn moved to other positions, or meeting
another random value, are refused naming the parameter, the operation and the line."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import pytest
import torch
from materialize_workers import Checks, check, gloo_scenario, scenario_tests
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import shardinit
from shardinit.errors import ShardInitError, UnsupportedInitOpError

SEED = 23
Init = Callable[[nn.Module], object]


def _linear() -> nn.Linear:
    with torch.device("meta"):
        return nn.Linear(16, 32)


def _eager_on_default(init: Init, rules: Mapping[str, object] | None = None) -> nn.Linear:
    """``init`` run eagerly on the values materialize gives without init_fn."""
    model = _linear()
    shardinit.materialize(model, seed=SEED, rules=rules)  # type: ignore[arg-type]
    with torch.no_grad():
        init(model)
    return model


STEPS: dict[str, Init] = {
    "clamp_": lambda m: m.weight.data.clamp_(-0.1, 0.1),
    "add_tensor": lambda m: m.weight.data.add_(torch.ones(32, 16)),
    "aten_add_": lambda m: torch.ops.aten.add_.Tensor(m.weight, torch.ones(32, 16)),
    "cast_times_two": lambda m: setattr(m.weight, "data", m.weight.float() * 2),
    "part_clamp": lambda m: m.weight.data[:4].clamp_(-0.01, 0.01),
    "fill_then_step": lambda m: (
        m.weight.data[:8].fill_(1.0),
        m.weight.data.mul_(2).clamp_(-0.05, 1.5),
    ),
    "bias_abs_then_neg": lambda m: m.bias.data.abs_().neg_(),
    "masked_then_clamp": lambda m: (
        m.weight.data.triu_(1),
        m.weight.data.clamp_(-0.2, 0.2),
    ),
    # Steps per row on rows never written, some rows stepped twice: each step reads
    # the values before it (a second step on a row is recorded on its own Prior).
    "row_steps_then_steps_on_some": lambda m: (
        [m.weight.data[row].mul_(0.5) for row in range(0, 32, 3)],
        [m.weight.data[row].add_(torch.ones(16)) for row in range(0, 32, 2)],
    ),
}


@pytest.mark.parametrize("name", sorted(STEPS))
def test_a_step_on_the_default_is_eagers_step_on_it(name: str) -> None:
    model = _linear()
    shardinit.materialize(model, seed=SEED, init_fn=lambda: STEPS[name](model))
    want = _eager_on_default(STEPS[name])
    assert torch.equal(model.weight, want.weight) and torch.equal(model.bias, want.bias)
    default = _eager_on_default(lambda m: None)  # the step changed the default
    assert not (torch.equal(model.weight, default.weight) and torch.equal(model.bias, default.bias))


def test_an_elementwise_function_of_the_default_agrees_to_the_last_bit() -> None:
    model = _linear()
    shardinit.materialize(model, seed=SEED, init_fn=lambda: model.bias.data.exp_())
    want = _eager_on_default(lambda m: m.bias.data.exp_())
    ulp = torch.finfo(torch.float32).eps * want.bias.abs()
    assert bool(((model.bias - want.bias).abs() <= ulp).all())
    assert torch.equal(model.weight, want.weight)


def test_a_rule_gives_the_values_the_step_reads() -> None:
    rules = {"weight": shardinit.init.normal(0.0, 1.0)}
    model = _linear()
    shardinit.materialize(
        model, seed=SEED, rules=rules, init_fn=lambda: model.weight.data.clamp_(-0.1, 0.1)
    )
    want = _eager_on_default(lambda m: m.weight.data.clamp_(-0.1, 0.1), rules)
    assert torch.equal(model.weight, want.weight)
    assert float((model.weight.abs() == 0.1).float().mean()) > 0.5  # N(0, 1), clamped


class _NoDefault(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.empty(8))


def test_a_step_on_a_parameter_with_no_default_is_refused_by_name() -> None:
    with torch.device("meta"):
        model = _NoDefault()
    with pytest.raises(ShardInitError, match=r"no rule and no torch.nn default.*scale"):
        shardinit.materialize(model, seed=SEED, init_fn=lambda: model.scale.data.clamp_(0, 1))
    assert model.scale.is_meta


REFUSED: dict[str, tuple[Init, str]] = {
    "moved": (
        lambda m: m.weight.data[:3].copy_(m.weight.data[3:6] * 2),
        "moves values that init_fn did not set",
    ),
    "random_added": (
        lambda m: m.weight.data.add_(torch.randn(32, 16) * 0.01),
        "two random values",
    ),
    "other_operand_after_a_step": (
        lambda m: (m.weight.data.mul_(2), m.weight.data.add_(m.weight.data * 0.5)),
        "through another operand",
    ),
    "other_operand_after_a_row_step": (
        lambda m: (
            [m.weight.data[row].mul_(2) for row in range(0, 32, 4)],
            m.weight.data[7:9].add_(m.weight.data[7:9] * 0.5),
        ),
        "through another operand",
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_cannot_read_the_default_is_refused_naming_the_line(name: str) -> None:
    init, why = REFUSED[name]
    model = _linear()
    with pytest.raises(UnsupportedInitOpError) as raised:
        shardinit.materialize(model, seed=SEED, init_fn=lambda: init(model))
    message = str(raised.value)
    assert "parameter 'weight'" in message and why in message
    assert "test_capture_default_steps.py" in message
    assert model.weight.is_meta


def _check_under_fsdp2(world: int, name: str) -> None:
    model = nn.Sequential(_linear(), nn.Linear(32, 8, device="meta"))
    fully_shard(model[0], mesh=init_device_mesh("cpu", (world,)))
    fully_shard(model, mesh=init_device_mesh("cpu", (world,)))
    shardinit.materialize(model, seed=SEED, init_fn=lambda: STEPS[name](model[0]))
    plain = nn.Sequential(_linear(), nn.Linear(32, 8, device="meta"))
    shardinit.materialize(plain, seed=SEED, init_fn=lambda: STEPS[name](plain[0]))
    for (key, got), want in zip(model.named_parameters(), plain.parameters(), strict=True):
        assert torch.equal(got.full_tensor(), want), key


@gloo_scenario(1, 2)
def default_steps_scenario(rank: int, world: int) -> Checks:
    del rank
    checks: Checks = {}
    for name in ("clamp_", "fill_then_step", "cast_times_two"):
        check(checks, name, functools.partial(_check_under_fsdp2, world, name))
    return checks


test_steps_on_the_default_under_fsdp2 = scenario_tests(
    default_steps_scenario, ["clamp_", "fill_then_step", "cast_times_two"], [1, 2]
)
