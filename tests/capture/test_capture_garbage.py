"""capture_init and materialize leave no reference cycles behind: their per-parameter
objects are freed by reference counting, with the cyclic garbage collector paused while
they run (shardinit/_integration/collector.py says why)."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

import pytest
import torch
from torch import nn

import shardinit

PACKAGE_DIR = os.path.dirname(os.path.abspath(shardinit.__file__)) + os.sep


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    yield
    if was:
        gc.enable()


def _shardinits_garbage() -> list[object]:
    """What the collector finds now of shardinit's own objects and functions (torch's
    ``tree_flatten`` leaves cycles of its own behind: not shardinit's to break)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()

    def own(thing: object) -> bool:
        code = getattr(thing, "__code__", None) or getattr(thing, "f_code", None)
        if code is not None:  # by the package's directory: a checkout may be named so too
            return bool(code.co_filename.startswith(PACKAGE_DIR))
        return type(thing).__module__.split(".")[0] == "shardinit"

    return [thing for thing in found if own(thing)]


def _model() -> nn.Sequential:
    with torch.device("meta"):
        return nn.Sequential(*[nn.Linear(4, 4) for _ in range(3)])


def _init_code(model: nn.Sequential) -> None:
    # Fills, a step, a temporary copied in: each route keeps its own records.
    for layer in model:
        nn.init.normal_(layer.weight, std=0.02)
        layer.weight.data[0].mul_(2.0)
        layer.bias.data.copy_(torch.arange(4.0))


@pytest.mark.usefixtures("collector_off")
def test_materialize_with_init_code_leaves_no_cyclic_garbage() -> None:
    model = _model()
    shardinit.materialize(model, seed=0, init_fn=lambda: _init_code(model))
    assert _shardinits_garbage() == []


@pytest.mark.usefixtures("collector_off")
def test_capture_leaves_no_cyclic_garbage_but_its_result() -> None:
    model = _model()
    captured = shardinit.capture_init(model, lambda: _init_code(model))
    assert _shardinits_garbage() == []
    assert len(captured.params) == 6


def test_the_collector_is_paused_while_init_code_runs_and_resumed_after() -> None:
    model = _model()
    seen: list[bool] = []
    assert gc.isenabled()
    shardinit.materialize(model, seed=0, init_fn=lambda: seen.append(gc.isenabled()))
    assert seen == [False]
    assert gc.isenabled()


@pytest.mark.usefixtures("collector_off")
def test_a_collector_the_caller_turned_off_stays_off() -> None:
    shardinit.materialize(_model(), seed=0)
    assert not gc.isenabled()
