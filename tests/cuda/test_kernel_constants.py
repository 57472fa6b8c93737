"""The device kernel's constants have one home each: its fdlibm ``log`` and AS 241
constants are the core's exported tables (rust/core/src/math.rs), and its float
arguments are the core's sampler constants by name (rust/core/src/init.rs
``Sampler::constants``), so no order of them is restated in Python. The interpreter
cases (``test_kernel_interpreter.py``) show the bits; this shows the wiring."""

from __future__ import annotations

import struct

import pytest

pytest.importorskip("triton")

import shardinit
from shardinit import _core, init
from shardinit._cuda import kernel, launch
from shardinit.init import core_init


def bits(value: float) -> bytes:
    return struct.pack("<d", value)


@pytest.mark.parametrize("table", [_core.LOG_CONSTANTS, _core.PHI_INV_CONSTANTS])
def test_kernel_constexprs_are_the_cores_tables(table: dict[str, float]) -> None:
    for name, value in table.items():
        assert bits(getattr(kernel, name).value) == bits(value), name


def test_kernel_arguments_are_the_sampler_constants_by_name() -> None:
    samplers = [init.uniform(-1.0, 3.0), init.normal(0.5, 2.0), init.trunc_normal(0.0, 1.0)]
    names = {name for base in samplers for name in _core.sampler_constants(core_init(base))}
    assert set(launch.SAMPLER_ARGS) == names
    assert len(launch.SAMPLER_ARGS) == len(names)
    spec = shardinit.ParamSpec("w", (4, 4), init=init.trunc_normal(0.1, 0.7, -0.5, 2.0), seed=3)
    arguments = launch.sampler_constants(spec)
    assert arguments == {name: 0.0 for name in launch.SAMPLER_ARGS} | dict(
        _core.sampler_constants(core_init(spec.base_init))
    )
    uniform = launch.sampler_constants(
        shardinit.ParamSpec("u", (4,), init=init.uniform(-1, 3), seed=0)
    )
    assert (uniform["a"], uniform["width"], uniform["mass"]) == (-1.0, 4.0, 0.0)
