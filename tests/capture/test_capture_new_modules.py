"""Init code that puts a new module with tensors into the model (issue 37): refused when it
assigns it, naming the path, the module and the caller's line, before anything is
allocated, on a plain meta model and under FSDP2 (where the fill used to fail with a raw
TypeError after allocation). Modules without tensors, removals and ties to a module the
model holds are kept as eager torch leaves them."""

from __future__ import annotations

import contextlib
import inspect
import re

import pytest
import torch
from materialize_workers import Checks, check, gloo_scenario, scenario_tests
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import shardinit

SEED = 37


def _meta_seq() -> nn.Sequential:
    with torch.device("meta"):
        return nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 4))


def _line_after(marker: str, function: object) -> int:
    """The line of ``function``'s source that holds ``marker``."""
    lines, first = inspect.getsourcelines(function)  # type: ignore[arg-type]
    return first + next(i for i, line in enumerate(lines) if marker in line)


def _assert_refused_and_unchanged(
    model: nn.Sequential, init_fn: object, target: str, what: str, new: str
) -> None:
    before = list(model.named_modules())
    with pytest.raises(shardinit.UnsupportedInitOpError) as refused:
        shardinit.materialize(model, seed=SEED, init_fn=init_fn)  # type: ignore[arg-type]
    line = _line_after("# the assignment", init_fn)
    assert re.match(
        rf"^capture_init: module '{re.escape(target)}': init code {what} with a new {new} at "
        rf"{re.escape(__file__)}:{line} in ",
        str(refused.value),
    ), refused.value
    assert "torch's global generator" in str(refused.value)
    # Before allocation: the model is as it was, every parameter still on meta.
    assert list(model.named_modules()) == before
    assert all(p.is_meta for p in model.parameters())


def test_replacing_a_submodule_is_refused_naming_path_module_and_line() -> None:
    model = _meta_seq()

    def init() -> None:
        model[0] = nn.Linear(8, 8)  # the assignment

    _assert_refused_and_unchanged(model, init, "0", "replaces the Linear", "Linear")
    # The model then materializes as if init code had never run.
    shardinit.materialize(model, seed=SEED)
    assert not any(p.is_meta for p in model.parameters())


def test_adding_a_module_to_a_module_list_is_refused() -> None:
    with torch.device("meta"):
        model = nn.Sequential(nn.ModuleList([nn.Linear(4, 4)]))

    def init() -> None:
        model[0].append(nn.LayerNorm(4))  # the assignment

    _assert_refused_and_unchanged(model, init, "0.1", "adds a module", "LayerNorm")


def test_a_refusal_init_code_catches_still_refuses() -> None:
    model = _meta_seq()

    def init() -> None:
        with contextlib.suppress(shardinit.UnsupportedInitOpError):
            model.head = nn.Linear(4, 2)  # the assignment
        nn.init.zeros_(model[0].weight)

    _assert_refused_and_unchanged(model, init, "head", "adds a module", "Linear")


def test_modules_without_tensors_removals_and_ties_are_kept_as_eager() -> None:
    def init(model: nn.Sequential) -> None:
        model[1] = nn.ReLU()
        model.extra = nn.Sequential(nn.Tanh(), nn.Identity())
        model.tied = model[0]
        nn.init.constant_(model[0].weight, 0.25)

    model = _meta_seq()
    shardinit.materialize(model, seed=SEED, init_fn=lambda: init(model))
    eager = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 4))
    with torch.no_grad():
        init(eager)
    assert [(n, type(m)) for n, m in model.named_modules()] == [
        (n, type(m)) for n, m in eager.named_modules()
    ]
    assert model.tied is model[0]
    assert torch.equal(model[0].weight, eager[0].weight)


# ------------------------------------------------------------------------------- FSDP2


def _fsdp2_seq(world: int) -> nn.Sequential:
    model = _meta_seq()
    mesh = init_device_mesh("cpu", (world,))
    for block in (model[0], model[2]):
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _check_fsdp2_replacement_refused(world: int) -> None:
    model = _fsdp2_seq(world)

    def init() -> None:
        model[2] = nn.Linear(8, 4)  # the assignment

    _assert_refused_and_unchanged(model, init, "2", "replaces the Linear", "Linear")
    assert all(isinstance(p, DTensor) for p in model.parameters())
    # The same model then takes init code that initializes in place.
    shardinit.materialize(model, seed=SEED, init_fn=lambda: nn.init.ones_(model[2].weight))
    assert torch.equal(model[2].weight.full_tensor(), torch.ones(4, 8))


@gloo_scenario(1, 2)
def new_modules_scenario(rank: int, world: int) -> Checks:
    checks: Checks = {}
    check(checks, "fsdp2_replacement", lambda: _check_fsdp2_replacement_refused(world))
    return checks


test_fsdp2_replacing_a_submodule_is_refused_before_allocation = scenario_tests(
    new_modules_scenario, ["fsdp2_replacement"], [1, 2]
)
