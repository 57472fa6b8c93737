"""The typed boundary to the core: ``_core.fill`` takes an ``Init``, a ``Region`` and a
dtype name, each parsed once, and refuses anything it does not know."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import shardinit
from shardinit import _core, init
from shardinit.init import core_init

SPEC = shardinit.ParamSpec("boundary.w", (6, 5), torch.float32, init.normal(0, 2), seed=3)


def _fill(dtype: str, out: np.ndarray, region: _core.Region | None = None) -> None:
    _core.fill(
        SPEC.key64,
        list(SPEC.shape),
        core_init(SPEC.base_init),
        dtype,
        region or _core.Region.box([(0, 6), (0, 5)]),
        out,
    )


@pytest.mark.parametrize("dtype", ["int8", "half", "Float32", "torch.float32", ""])
def test_an_unknown_dtype_is_refused_naming_the_allowed_ones(dtype: str) -> None:
    # Before the typed boundary, any name but "bfloat16" fell through to float16.
    out = np.zeros(30, dtype=np.int16)
    with pytest.raises(shardinit.ShardInitError) as raised:
        _fill(dtype, out)
    assert str(raised.value) == (
        f"dtype must be one of 'float32', 'float64', 'bfloat16', 'float16', got '{dtype}'"
    )
    assert not out.any()


def test_a_buffer_of_another_item_type_than_the_dtype_is_refused() -> None:
    with pytest.raises(BufferError):
        _fill("float32", np.zeros(30, dtype=np.float64))


def test_the_three_regions_write_the_same_values_as_full() -> None:
    whole = shardinit.full(SPEC).view(-1).numpy()
    out = np.empty(30, dtype=np.float32)
    _fill("float32", out)
    assert np.array_equal(out, whole)
    part = np.empty(7, dtype=np.float32)
    _fill("float32", part, _core.Region.box([(0, 6), (0, 5)], 11))
    assert np.array_equal(part, whole[11:18])
    flat = np.empty(7, dtype=np.float32)
    _fill("float32", flat, _core.Region.flat(11))
    assert np.array_equal(flat, whole[11:18])
    assert _core.Region.flat(3) == _core.Region.flat(3)
    assert _core.Region.box([(0, 1)]) != _core.Region.box([(0, 1)], 0)


def test_init_is_validated_by_the_core_with_messages_naming_the_argument() -> None:
    assert _core.Init.normal(0.0, 1.0) == _core.Init.normal(0.0, 1.0)
    assert _core.Init.normal(0.0, 1.0) != _core.Init.uniform(0.0, 1.0)
    cases = [
        (lambda: _core.Init.trunc_normal(0.0, 0.0, -2.0, 2.0), "std must be > 0, got 0"),
        (lambda: _core.Init.normal(0.0, -1.0), "std must be >= 0, got -1"),
        (lambda: _core.Init.uniform(1.0, 1.0), "a must be < b, got a=1, b=1"),
        (lambda: _core.Init.constant(float("nan")), "value must be a finite number, got NaN"),
    ]
    for build, message in cases:
        with pytest.raises(shardinit.ShardInitError) as raised:
            build()
        assert str(raised.value) == message


@pytest.mark.parametrize(
    "base",
    [init.constant(-0.0), init.uniform(-1, 3), init.normal(1, 0.5), init.trunc_normal(0, 2, -1, 3)],
)
def test_every_base_initializer_maps_to_the_core_init_of_its_parameters(
    base: init.BaseInit,
) -> None:
    kinds = {
        "constant": _core.Init.constant,
        "uniform": _core.Init.uniform,
        "normal": _core.Init.normal,
        "trunc_normal": _core.Init.trunc_normal,
    }
    count = {"constant": 1, "uniform": 2, "normal": 2, "trunc_normal": 4}[base.kind]
    assert core_init(base) == kinds[base.kind](*base.params()[:count])
