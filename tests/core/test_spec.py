"""``ParamSpec`` and ``SUPPORTED_DTYPES`` cannot be changed after the fact: a spec's
values are a function of its fields, checked once on construction."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import shardinit
from shardinit import init


def test_a_spec_is_frozen_and_compares_by_its_fields() -> None:
    spec = shardinit.ParamSpec("w", (4, 3), torch.float32, init.uniform(-1, 1), seed=0)
    for field, value in (("name", "v"), ("shape", (8, 3)), ("seed", 1)):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(spec, field, value)
    with pytest.raises(dataclasses.FrozenInstanceError):
        del spec.name
    same = shardinit.ParamSpec("w", [4, 3], torch.float32, init.uniform(-1, 1), seed=0)
    assert spec == same and hash(spec) == hash(same)
    assert spec != shardinit.ParamSpec("w", (4, 3), torch.float32, init.uniform(-1, 1), seed=1)
    assert repr(spec) == (
        "ParamSpec(name='w', shape=(4, 3), dtype=torch.float32, "
        "init=Uniform(a=-1.0, b=1.0), seed=0)"
    )
    # The key is the fields' (name and seed only), computed once per spec: the second read
    # is the same int object (a 64-bit int computed again would be a new one).
    assert spec.key64 == shardinit.ParamSpec("w", (9,), torch.float64, seed=0).key64
    assert spec.key64 != shardinit.ParamSpec("v", (4, 3), seed=0).key64
    assert spec.key64 is spec.key64


def test_supported_dtypes_is_read_only() -> None:
    assert dict(shardinit.SUPPORTED_DTYPES) == {
        torch.float32: "float32",
        torch.float64: "float64",
        torch.bfloat16: "bfloat16",
        torch.float16: "float16",
    }
    with pytest.raises(TypeError):
        shardinit.SUPPORTED_DTYPES[torch.int8] = "int8"  # type: ignore[index]
