"""Values written through a strided slice (``t[:, 0::2] = sin(...)``): one write on the
box around the slice, its elements named by a condition, not one write per element.

The sinusoidal position table of "Attention Is All You Need" (PyTorch's tutorial,
``pe[:, 0::2] = sin(position * div_term)``, ``pe[:, 1::2] = cos(...)``) was refused for
any table past a few hundred elements: each element of the slice was its own write, and
the buffer's fold nested one ``where`` per element, past Python's recursion limit. It is
computed now, bit for bit torch's table (4096 x 128 here; the tutorial's own 5000 x 512
takes about a second, a constructor's table being computed whole on the CPU). A parameter
written through such a slice is checked against eager torch and, gathered, at worlds 1
to 3 (FSDP2, and column- and row-wise tensor parallelism); seeded random slice programs
against eager are the oracle for what no list names."""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable

import pytest
import torch
from materialize_workers import Checks, check, gloo_scenario, scenario_tests
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import shardinit
from shardinit.errors import UnsupportedInitOpError

SEED = 51


def _sinusoids(rows: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    position = torch.arange(rows).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
    return torch.sin(position * div_term), torch.cos(position * div_term)


class _TutorialTable(nn.Module):
    """PyTorch's tutorial PositionalEncoding: a (rows, 1, dim) buffer."""

    def __init__(self, rows: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        sin, cos = _sinusoids(rows, dim)
        pe = torch.zeros(rows, 1, dim)
        pe[:, 0, 0::2] = sin
        pe[:, 0, 1::2] = cos
        self.register_buffer("pe", pe)


class _FlatTable(nn.Module):
    """The same table as (rows, dim), the usual spelling elsewhere."""

    def __init__(self, rows: int, dim: int) -> None:
        super().__init__()
        sin, cos = _sinusoids(rows, dim)
        pe = torch.zeros(rows, dim)
        pe[:, 0::2] = sin
        pe[:, 1::2] = cos
        self.register_buffer("pe", pe, persistent=False)


@pytest.mark.parametrize(
    ("table", "rows", "dim"),
    [(_TutorialTable, 512, 64), (_FlatTable, 512, 64), (_FlatTable, 4096, 128)],
)
def test_a_sinusoidal_table_is_torchs(table: type[nn.Module], rows: int, dim: int) -> None:
    eager = table(rows, dim)
    with torch.device("meta"), shardinit.record_constructors():
        model = table(rows, dim)
    shardinit.materialize(model, seed=SEED)
    assert torch.equal(model.pe, eager.pe)
    assert model.pe.abs().sum() > rows  # (a table, not the zeros it starts as)


Init = Callable[[torch.Tensor], object]


def _grid_of_counts(w: torch.Tensor) -> None:
    w.fill_(1.5)
    part = w[1::3, ::2]
    part.copy_(torch.arange(part.numel(), dtype=w.dtype).view(part.shape))


def _transposed_steps(w: torch.Tensor) -> None:
    w.fill_(3.0)
    part = w.t()[::2]
    part.copy_(torch.arange(part.numel(), dtype=w.dtype).view(part.shape) / 7)


def _sinusoid_columns(w: torch.Tensor) -> None:
    sin, cos = _sinusoids(*w.shape)
    w[:, 0::2] = sin
    w[:, 1::2] = cos


def _random_then_columns(w: torch.Tensor) -> None:
    nn.init.normal_(w, std=0.02)
    rows = torch.arange(w.shape[0], dtype=w.dtype).unsqueeze(1)
    w[:, 1::4] = rows.expand(-1, w[:, 1::4].shape[1])


def _table_in_empty_copied(w: torch.Tensor) -> None:
    # DistilBERT's: a table written into ``empty_like`` through its two slices (every
    # element written, none by a box), then copied in.
    table = torch.empty_like(w)
    sin, cos = _sinusoids(*w.shape)
    table[:, 0::2] = sin
    table[:, 1::2] = cos
    w.copy_(table)


#: Init code of one (24, 16) parameter, deterministic where it writes through a slice.
INITS: dict[str, Init] = {
    "grid_of_counts": _grid_of_counts,
    "transposed_steps": _transposed_steps,
    "sinusoid_columns": _sinusoid_columns,
    "random_then_columns": _random_then_columns,
    "table_in_empty_copied": _table_in_empty_copied,
}


class _One(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.empty(24, 16))


def _materialized(init: Init, model: _One | None = None) -> _One:
    if model is None:
        with torch.device("meta"):
            model = _One()
    shardinit.materialize(model, seed=SEED, init_fn=lambda: init(model.w))
    return model


@pytest.mark.parametrize("name", ["grid_of_counts", "transposed_steps"])
def test_values_through_a_slice_are_eagers(name: str) -> None:
    eager = _One()
    with torch.no_grad():
        INITS[name](eager.w)
    assert torch.equal(_materialized(INITS[name]).w, eager.w)


@pytest.mark.parametrize("name", ["sinusoid_columns", "table_in_empty_copied"])
def test_a_sinusoid_parameter_is_torchs_up_to_its_last_bits(name: str) -> None:
    # A parameter's program is evaluated by shardinit on each rank (its sin and cos,
    # not torch's: a few float32 ulps apart), so it is bit-identical across worlds
    # (below), and within float32 rounding of eager's.
    eager = _One()
    with torch.no_grad():
        INITS[name](eager.w)
    torch.testing.assert_close(_materialized(INITS[name]).w, eager.w, rtol=0, atol=1e-5)


def test_a_table_half_written_through_a_slice_is_refused() -> None:
    # Its odd columns never written: copying them is refused (eager would copy
    # whatever empty memory held), the coverage of a slice counted exactly.
    def half(w: torch.Tensor) -> None:
        table = torch.empty_like(w)
        table[:, 0::2] = _sinusoids(*w.shape)[0]
        w.copy_(table)

    with pytest.raises(UnsupportedInitOpError, match="never written"):
        _materialized(half)


def test_a_slice_left_random_keeps_its_draws() -> None:
    w = _materialized(_random_then_columns).w.detach()
    rows = torch.arange(24, dtype=w.dtype).unsqueeze(1)
    assert torch.equal(w[:, 1::4], rows.expand(-1, 4))
    kept = torch.cat([w[:, 0::4], w[:, 2::4], w[:, 3::4]], dim=1)
    assert abs(float(kept.std()) - 0.02) < 0.004 and kept.unique().numel() == kept.numel()


def test_a_random_value_moved_through_a_slice_is_still_refused() -> None:
    # One draw read at two positions (torch's values would be two draws): refused, as
    # any move of random values a parameter holds.
    def moved(w: torch.Tensor) -> None:
        nn.init.normal_(w, std=0.02)
        w[:, 1::2] = w[:, 0::2] * 2

    with pytest.raises(UnsupportedInitOpError, match="would land"):
        _materialized(moved)


def _check_gathered(world: int, name: str) -> None:
    plain = _materialized(INITS[name])
    with torch.device("meta"):
        sharded = _One()
    fully_shard(sharded, mesh=init_device_mesh("cpu", (world,)))
    _materialized(INITS[name], sharded)
    got = sharded.w.full_tensor() if isinstance(sharded.w, DTensor) else sharded.w
    assert torch.equal(got, plain.w), name


def _tensor_parallel_pair() -> nn.Sequential:
    with torch.device("meta"):
        return nn.Sequential(nn.Linear(16, 24), nn.Linear(24, 16))


def _slices_of_both(pair: nn.Sequential) -> None:
    with torch.no_grad():
        for layer in pair:
            _sinusoid_columns(layer.weight)
            layer.weight[1::3, ::2] = layer.weight[1::3, ::2] * 2 + 1


def _check_tensor_parallel(world: int) -> None:
    # Column- and row-wise TP: the weights sharded on dim 0 and on dim 1 (uneven at 3).
    plain, sharded = _tensor_parallel_pair(), _tensor_parallel_pair()
    shardinit.materialize(plain, seed=SEED, init_fn=lambda: _slices_of_both(plain))
    mesh = init_device_mesh("cpu", (world,))
    parallelize_module(sharded, mesh, {"0": ColwiseParallel(), "1": RowwiseParallel()})
    shardinit.materialize(sharded, seed=SEED, init_fn=lambda: _slices_of_both(sharded))
    for name, want in plain.named_parameters():
        got = sharded.get_parameter(name)
        assert torch.equal(got.full_tensor() if isinstance(got, DTensor) else got, want), name


@gloo_scenario(1, 2, 3)
def strided_values_scenario(rank: int, world: int) -> Checks:
    del rank
    checks: Checks = {}
    for name in INITS:
        check(checks, name, functools.partial(_check_gathered, world, name))
    check(checks, "tensor_parallel", functools.partial(_check_tensor_parallel, world))
    return checks


test_values_through_a_slice_are_layout_invariant = scenario_tests(
    strided_values_scenario, [*sorted(INITS), "tensor_parallel"], [1, 2, 3]
)


def _random_slices(rng: random.Random, shape: tuple[int, ...]) -> tuple[slice, ...]:
    picked = []
    for size in shape:
        start = rng.randrange(size)
        stop = rng.choice([None, rng.randrange(start + 1, size + 1)])
        picked.append(slice(start, stop, rng.choice([1, 1, 2, 3, 4])))
    return tuple(picked)


def _sliced_program(seed: int) -> tuple[tuple[int, ...], Init]:
    """Init code of deterministic values written through 1-3 random strided slices of a
    1-3-D tensor: into the parameter, or a temporary (zeros, full) then copied in; each
    write plain, reading the slice's own values, or followed by a step through a
    transposed slice."""
    rng = random.Random(seed)
    shape = tuple(rng.randint(2, 9) for _ in range(rng.choice([1, 2, 3])))
    writes = [(_random_slices(rng, shape), rng.random()) for _ in range(rng.randint(1, 3))]
    start, mode = rng.choice(["zeros", "full", "parameter"]), rng.choice(["plain", "own", "t"])

    def init(w: torch.Tensor) -> None:
        t = {"zeros": torch.zeros_like, "full": lambda w: torch.full_like(w, 2.0)}.get(
            start, lambda w: w.fill_(0.5)
        )(w)
        for index, scale in writes:
            values = torch.arange(t[index].numel(), dtype=w.dtype).view(t[index].shape) * scale
            t[index] = t[index] * 2 + values if mode == "own" else values
            if mode == "t" and t.dim() > 1:
                moved = t.transpose(0, 1)
                moved[::2] = moved[::2] + 1
        if t is not w:
            w.copy_(t)

    return shape, init


@pytest.mark.parametrize("seed", range(0, 240, 8))
def test_random_slice_programs_are_eagers(seed: int) -> None:
    # An oracle over what no list names: 8 programs per case, each bit for bit eager's.
    for case in range(seed, seed + 8):
        shape, init = _sliced_program(case)
        eager = torch.empty(shape)
        with torch.no_grad():
            init(eager)
        with torch.device("meta"):
            model = nn.Module()
            model.w = nn.Parameter(torch.empty(shape))
        shardinit.materialize(model, seed=SEED, init_fn=lambda m=model, f=init: f(m.w))
        assert torch.equal(model.w, eager), case
