"""A parameter written through strided views only: the views' elements count, exactly,
for whether init code set all of it (``w[::2]`` and ``w[1::2]`` together do), and a
parameter they leave part of is refused naming an element nobody set. And a loop of
steps through overlapping strided rows (``w[i::k].normal_(); w[i::k].mul_(s)``) writes
programs whose size grows linearly in the steps, with the values of the same steps
through boxes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch
from materialize_workers import Checks, check, gloo_scenario, scenario_tests
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import shardinit
from shardinit._program.nodes import walk_nodes
from shardinit._program.writer import op_programs
from shardinit.shard import writer

SEED = 11
Init = Callable[["_Bare"], Any]


class _Bare(nn.Module):
    """A parameter of no rule and no torch.nn default: init_fn must set all of it."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.empty(9, 10))


def _ours(init: Init, world: int = 0) -> torch.Tensor:
    with torch.device("meta"):
        model = _Bare()
    if world:
        fully_shard(model, mesh=init_device_mesh("cpu", (world,)))

    def init_fn() -> None:
        with torch.no_grad():
            init(model)

    shardinit.materialize(model, seed=SEED, init_fn=init_fn)
    w = model.w
    return (w.full_tensor() if isinstance(w, DTensor) else w).detach().clone()


def _eager(init: Init) -> torch.Tensor:
    model = _Bare()
    with torch.no_grad():
        init(model)
    return model.w.detach().clone()


#: Constants through strided views that together set every element: eager's values.
CONSTANT: dict[str, Init] = {
    "rows_even_odd": lambda m: (m.w[::2].fill_(1.5), m.w[1::2].fill_(-2.0)),
    "cols_assigned": lambda m: (m.w[:, ::2].__setitem__(slice(None), 3.0), m.w[:, 1::2].zero_()),
    "three_phases_then_scale": lambda m: (
        [m.w[:, j::3].fill_(float(j + 1)) for j in range(3)],
        m.w[1::4].mul_(-0.5),
    ),
    "diagonal_and_rest": lambda m: (
        m.w[:, 1:].fill_(4.0),
        m.w[1:, :1].fill_(5.0),
        m.w.diagonal().fill_(6.0),
    ),
    "diagonal_then_grid": lambda m: (m.w.view(-1)[::2].fill_(7.0), m.w.view(-1)[1::2].fill_(8.0)),
}

#: Random fills through strided views that together set every element, and the same
#: fills through boxes: each element is drawn at its own index either way.
RANDOM: dict[str, tuple[Init, Init]] = {
    "rows_even_odd": (
        lambda m: (m.w[::2].normal_(), m.w[1::2].normal_()),
        lambda m: [m.w[i].normal_() for i in range(9)],
    ),
    "cols_by_three": (
        lambda m: [m.w[:, j::3].uniform_(-1, 1) for j in range(3)],
        lambda m: m.w.uniform_(-1, 1),
    ),
}


@pytest.mark.parametrize("name", sorted(CONSTANT))
def test_constants_through_views_that_set_every_element_give_eagers_values(name: str) -> None:
    torch.manual_seed(0)
    assert torch.equal(_ours(CONSTANT[name]), _eager(CONSTANT[name]))


@pytest.mark.parametrize("name", sorted(RANDOM))
def test_random_fills_through_views_that_set_every_element_are_the_streams(name: str) -> None:
    through_views, through_boxes = RANDOM[name]
    got = _ours(through_views)
    assert torch.equal(got, _ours(through_boxes))
    assert got.unique().numel() == got.numel()


@pytest.mark.parametrize(
    ("init", "element"),
    [
        (lambda m: (m.w[::2].normal_(), m.w[1:7:2].normal_()), r"\(7, 0\)"),
        (lambda m: (m.w[:, ::2].zero_(), m.w[:8, 1::2].zero_()), r"\(8, 1\)"),
        (lambda m: m.w.diagonal().fill_(1.0), r"\(0, 1\)"),
    ],
)
def test_views_that_leave_an_element_unset_are_refused_naming_it(init: Init, element: str) -> None:
    with pytest.raises(
        shardinit.ShardInitError, match=f"init_fn writes part of it: element {element}"
    ):
        _ours(init)


def _step_loop(k: int) -> Init:
    def init(m: _Bare) -> None:
        m.w.zero_()
        for i in range(k):
            m.w[i::k].normal_()
            m.w[i::k].mul_(0.5)

    return init


def _loop_record(k: int) -> shardinit.ParamRecord:
    with torch.device("meta"):
        model = nn.Linear(64, 64, bias=False)
    return shardinit.capture_init(model, lambda: _step_loop(k)(_Proxy(model.weight.data)))["weight"]


class _Proxy:
    def __init__(self, w: torch.Tensor) -> None:
        self.w = w


def test_a_step_loop_over_overlapping_strided_rows_writes_programs_of_linear_size() -> None:
    sizes = {}
    for k in (4, 8, 16):
        record = _loop_record(k)
        sizes[k] = len(walk_nodes(op_programs(record, record.ops)[-1]))
    # Each step's program holds the last one's once: twice the steps, about twice the
    # nodes (each nested in every later one, it was 2 ** k).
    assert sizes[16] < 2.5 * sizes[8] < 2.5**2 * sizes[4], sizes


def test_a_step_loop_over_overlapping_strided_rows_gives_the_whole_steps_values() -> None:
    with torch.device("meta"):
        model = nn.Linear(64, 64, bias=False)
    whole = shardinit.capture_init(
        model, lambda: (model.weight.data.normal_(), model.weight.data.mul_(0.5))
    )["weight"]
    want = writer().full(whole, seed=SEED)
    for k in (8, 16, 32):
        assert torch.equal(writer().full(_loop_record(k), seed=SEED), want), k


SHARDED = ("rows_even_odd", "cols_by_three")


def _check_sharded(world: int, name: str) -> None:
    init = RANDOM[name][0]
    assert torch.equal(_ours(init, world), _ours(init))


@gloo_scenario(1, 2, 3)
def strided_cover_scenario(rank: int, world: int) -> Checks:
    del rank
    checks: Checks = {}
    for name in SHARDED:
        check(checks, name, functools.partial(_check_sharded, world, name))
    return checks


test_views_that_set_every_element_under_fsdp2 = scenario_tests(
    strided_cover_scenario, SHARDED, [1, 2, 3]
)
