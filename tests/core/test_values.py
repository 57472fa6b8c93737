"""Element values: stream-format.md §6 golden values, element values independent of the
shape, and the accepted ways to receive them (``out`` buffers and views, parameters that
require grad, 0-d parameters, numpy integers). Slices equal to ``full``, half dtypes and
thread counts are properties over random specs: test_properties.py."""

from __future__ import annotations

import math
import struct

import numpy as np
import torch

import shardinit
from shardinit import init


def f32_bits(values: torch.Tensor) -> list[str]:
    return [f"{struct.unpack('<I', struct.pack('<f', v))[0]:08x}" for v in values.tolist()]


def test_spec_golden_uniform_float32() -> None:
    spec = shardinit.ParamSpec("w", (4,), torch.float32, init.uniform(0, 1), seed=0)
    expected = torch.tensor([0.17105073, 0.97966427, 0.2126956, 0.7087004], dtype=torch.float32)
    assert torch.equal(shardinit.full(spec), expected)


def test_spec_golden_normal_float32_bits() -> None:
    spec = shardinit.ParamSpec("w", (6,), torch.float32, init.normal(0, 1), seed=0)
    # The spec says "shape (4,) or longer": element values never depend on the shape.
    assert f32_bits(shardinit.full(spec)[:4]) == ["bf733495", "4002ffd6", "bf4c0ef0", "3f0cb212"]


def test_spec_golden_normal_float64_within_an_ulp_or_two() -> None:
    spec = shardinit.ParamSpec("w", (4,), torch.float64, init.normal(0, 1), seed=0)
    got = shardinit.full(spec).tolist()
    exact = [-0.9500210761793052, -0.7971028902393957, -1.4398764779387005, 0.4788597673989011]
    for value, reference in zip(got, exact, strict=True):
        # stream-format.md §6: correctly rounded references; "an implementation may differ in the
        # last bits". This build measures <= 2 ulp; allow 4.
        assert abs(value - reference) <= 4 * math.ulp(reference), (value, reference)


def test_values_depend_on_seed_name_and_dtype_words_but_not_on_shape() -> None:
    def first(
        name: str, shape: tuple[int, ...], seed: int, dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        spec = shardinit.ParamSpec(name, shape, dtype, init.normal(), seed=seed)
        return shardinit.full(spec).reshape(-1)[:4]

    base = first("w", (4,), 0)
    assert torch.equal(first("w", (2, 2, 9), 0), base)  # element i depends on i, not the shape
    assert not torch.equal(first("w", (4,), 1), base)
    assert not torch.equal(first("v", (4,), 0), base)
    # The dtype's words (stream-format.md §3): the one-word dtypes read word i, so bfloat16
    # and float16 are float32's values rounded; float64 reads words 2i and 2i + 1, the
    # high bits of its uniform from word 2i: element i is near float32's element 2i (the
    # same 24 leading bits of the uniform), not near its element i.
    for half in (torch.bfloat16, torch.float16):
        assert torch.equal(first("w", (4,), 0, half), base.to(half))
    wide = first("w", (4,), 0, torch.float64)
    spec = shardinit.ParamSpec("w", (8,), torch.float32, init.normal(), seed=0)
    even = shardinit.full(spec)[0::2].double()
    torch.testing.assert_close(wide, even, rtol=1e-5, atol=1e-6)
    assert bool(((wide[1:] - base[1:].double()).abs() > 1e-3).all()), (wide, base)


def test_out_is_filled_in_place_and_returned() -> None:
    spec = shardinit.ParamSpec("w", (10, 4), torch.bfloat16, init.uniform(-1, 1), seed=1)
    out = torch.full((4, 4), 7.0, dtype=torch.bfloat16)
    result = shardinit.init_shard(spec, 1, 3, out=out)
    assert result is out
    assert torch.equal(out, shardinit.full(spec)[4:8])
    # A contiguous view that starts inside a bigger storage is written where it lives,
    # its neighbours untouched.
    backing = torch.zeros(50, dtype=torch.bfloat16)
    view = backing[5:45].view(10, 4)
    assert view.storage_offset() == 5
    shardinit.init_box(spec, [(0, 10), (0, 4)], out=view)
    assert torch.equal(view, shardinit.full(spec))
    assert backing[:5].eq(0).all() and backing[45:].eq(0).all()


def test_out_that_requires_grad_is_filled_without_recording_autograd() -> None:
    """Like torch.nn.init (under no_grad), filling a leaf that requires grad works and
    leaves no graph behind."""
    spec = shardinit.ParamSpec("w", (3, 3), seed=4)
    param = torch.nn.Parameter(torch.empty(3, 3))
    result = shardinit.init_shard(spec, 0, 1, out=param)
    assert result is param and param.grad_fn is None and param.requires_grad
    assert torch.equal(param.detach(), shardinit.full(spec))


def test_zero_dim_parameter_through_full_box_and_flat() -> None:
    """A 0-d parameter is one element: ``full``, the empty box and the flat range [0, 1)
    agree. (It cannot be sharded: the bad-input battery checks that error.)"""
    constant = shardinit.ParamSpec("scale", (), init=init.constant(2.5), seed=0)
    assert shardinit.full(constant).shape == () and shardinit.full(constant).item() == 2.5
    spec = shardinit.ParamSpec("s", (), torch.float32, init.normal(), seed=0)
    value = shardinit.full(spec)
    assert value.shape == () and torch.isfinite(value)
    assert torch.equal(shardinit.init_box(spec, ()), value)
    assert torch.equal(shardinit.init_flat(spec, 0, 1), value.reshape(1))


def test_numpy_ints_are_accepted_as_ranks() -> None:
    spec = shardinit.ParamSpec("w", (6,), seed=0)
    assert torch.equal(
        shardinit.init_shard(spec, np.int64(1), np.int32(2)), shardinit.full(spec)[3:]
    )
