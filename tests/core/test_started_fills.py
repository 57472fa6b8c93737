"""``_core.start_fills``: fills started on a thread of the core's, the caller going on
until ``wait()`` (the writer of a whole model overlaps its Python with them). The values
are each ``_core.fill``'s; the buffers are claimed from the start to ``wait()``, so a
fill of the same memory meanwhile is refused; the first error in order is raised."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

import shardinit
from shardinit import _core
from shardinit._host import writable_view

BIG = 1 << 22


def _inits() -> list[_core.Init]:
    return [
        _core.Init.normal(0.0, 0.02),
        _core.Init.uniform(-1.0, 1.0),
        _core.Init.trunc_normal(0.0, 1.0, -2.0, 2.0),
        _core.Init.constant(0.5),
    ]


def _fills(count: int) -> tuple[list[tuple[object, ...]], list[torch.Tensor]]:
    """``count`` fills of every dtype, region kind and initializer, with their tensors."""
    fills, outs = [], []
    dtypes = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
    names = {torch.float32: "float32", torch.float64: "float64",
             torch.bfloat16: "bfloat16", torch.float16: "float16"}  # fmt: skip
    for index in range(count):
        dtype = dtypes[index % 4]
        rows, cols = 3 + index % 5, 7 + index % 11
        kind = index % 3
        if kind == 0:  # a whole box
            region, shape = _core.Region.box([(1, rows), (2, cols)]), (rows - 1, cols - 2)
        elif kind == 1:  # part of a box
            region, shape = _core.Region.box([(0, rows), (0, cols)], 3), (rows * cols - 3,)
        else:  # a flat range
            region, shape = _core.Region.flat(5), (rows * cols - 5,)
        out = torch.full(shape, float("nan"), dtype=dtype)
        init = _inits()[index % 4]
        fills.append((index, [rows, cols], init, names[dtype], region, writable_view(out)))
        outs.append(out)
    return fills, outs


@pytest.mark.parametrize("threads", [1, 3])
def test_started_fills_are_each_fills_values(threads: int) -> None:
    fills, outs = _fills(300)
    started = _core.start_fills(fills, threads)
    started.wait()
    for (key, shape, init, dtype, region, _), out in zip(fills, outs, strict=True):
        expected = torch.empty_like(out)
        _core.fill(key, shape, init, dtype, region, writable_view(expected), 1)
        # Bit for bit (the 16-bit dtypes by their patterns); no NaN is left.
        assert np.array_equal(writable_view(out), writable_view(expected))
    started.wait()  # a second wait returns at once


def test_the_buffers_are_claimed_until_wait() -> None:
    big = torch.empty(BIG)
    init = _core.Init.normal(0.0, 1.0)
    started = _core.start_fills(
        [(7, [BIG], init, "float32", _core.Region.flat(0), writable_view(big))], 1
    )
    with pytest.raises(shardinit.ShardInitError, match="out overlaps the memory of another"):
        _core.fill(7, [BIG], init, "float32", _core.Region.flat(BIG - 1),
                   writable_view(big[BIG - 1 :]), 1)  # fmt: skip
    started.wait()
    expected = torch.empty(BIG)
    _core.fill(7, [BIG], init, "float32", _core.Region.flat(0), writable_view(expected), 1)
    assert torch.equal(big, expected)
    # Released: the same memory can be filled again.
    _core.fill(7, [BIG], init, "float32", _core.Region.flat(0), writable_view(big), 1)


def test_overlapping_buffers_of_one_call_are_refused_and_nothing_stays_claimed() -> None:
    out = torch.zeros(64)
    init = _core.Init.constant(1.0)
    fills = [
        (1, [64], init, "float32", _core.Region.flat(0), writable_view(out[:40])),
        (1, [64], init, "float32", _core.Region.flat(30), writable_view(out[30:])),
    ]
    with pytest.raises(shardinit.ShardInitError, match="out overlaps"):
        _core.start_fills(fills, 1)
    assert not out.any(), "nothing was written"
    _core.fill(1, [64], init, "float32", _core.Region.flat(0), writable_view(out), 1)
    assert torch.equal(out, torch.ones(64))


def test_wait_raises_the_first_error_in_order_and_the_other_fills_are_written() -> None:
    init = _core.Init.uniform(0.0, 1.0)
    good, past, short = torch.zeros(8), torch.zeros(4), torch.zeros(3)
    fills = [
        (2, [8], init, "float32", _core.Region.flat(0), writable_view(good)),
        (2, [2, 2], init, "float32", _core.Region.box([(0, 2), (0, 2)]), writable_view(short)),
        (2, [8], init, "float32", _core.Region.flat(6), writable_view(past)),
    ]
    started = _core.start_fills(fills, 2)
    with pytest.raises(shardinit.ShardInitError, match=r"out has 3 elements but the region has 4"):
        started.wait()
    expected = np.empty(8, dtype=np.float32)
    _core.fill(2, [8], init, "float32", _core.Region.flat(0), expected, 1)
    assert torch.equal(good, torch.from_numpy(expected))


def test_fills_dropped_without_wait_end_before_their_buffers_are_freed() -> None:
    big = torch.empty(BIG)
    init = _core.Init.normal(0.0, 1.0)
    started = _core.start_fills(
        [(9, [BIG], init, "float32", _core.Region.flat(0), writable_view(big))], 1
    )
    del started  # joins the thread: the buffer outlives the writes
    gc.collect()
    expected = torch.empty(BIG)
    _core.fill(9, [BIG], init, "float32", _core.Region.flat(0), writable_view(expected), 1)
    assert torch.equal(big, expected)
    _core.fill(9, [BIG], init, "float32", _core.Region.flat(0), writable_view(big), 1)
